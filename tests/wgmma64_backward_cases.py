"""wgmma64 backward cases shared by the CPU emulation (tests/test_wgmma64_backward_emulated.py) and the GPU
(tests/gpu/test_wgmma64_backward_gpu.py): run the wgmma64 forward's prepare and the backward's kernels on random
inputs, NaN-poisoned, and the two float64 checks — the reference at chunk 64 on the same rounded inputs, and the
dS chain's steps recomputed from the kernel's own inputs to them (chain_steps)."""
from __future__ import annotations

import torch

from kdagen.ops import backward as bw
from kdagen.ops import forward as fw
from kdagen.ops.api import kernel_call, make_call
from kdagen.ops.forward import call_config
from kdagen.ops.launcher import poisoned
from kdagen.reference import Options, chunk_delta_rule_bwd_k2, chunk_delta_rule_fwd, chunked_backward, prologue
from kdagen.reference.inputs import make_inputs
from kdagen.reference.options import scale_of, state_in, state_out

C = 64
# dS is an fp32 chain fed by bf16 workspaces: the forward's o bound, for each chunk's dh on its own (the last
# chunk's is dht itself, exact, so one norm over every chunk would hide an error in the rest)
BOUND = 0.005
# against chain_steps, per chunk (row_errors): fp32 arithmetic, and in a few chunks a bf16 rounding of β⊙dX falling
# the other way
ORACLE_BOUND = (5e-5, 5e-4)
# chunk_bwd against chunk_oracle, per row (row_errors): most rows to the hi + lo products' ~16 bits, a few moved by a
# bf16 rounding that falls the other way (an operand handed to phase 2, or dv's own storage): the maximum against
# the larger of the row's norm and half its terms' (a row of ws_d_k_decayed whose terms cancel 60-fold reached 1.0e-2
# of its norm, 3.5e-4 of its terms': session 15, run 11, and session 16, run 2)
CHUNK_BOUND = (3e-4, 1e-2)

LB = dict(use_gate_in_kernel=True, lower_bound=-5.0, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)
SOFTPLUS = dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)
# name: (op, FLA options, make_inputs shape, dht given)
CASES = {
    # per-channel decay, lower-bound gate, state_v_first; varlen with an empty and a length-1 sequence and one of
    # three chunks (a store's staging reused); GVA 2; no dht
    "kda_lb_varlen_gva2_vfirst_k64": ("kda", {**LB, "state_v_first": True},
                                      dict(H=1, G=2, K=64, V=64, cu_seqlens=[0, 0, 1, 150, 150, 161]), False),
    # per-head decay (GDN), K = V = 128 (two CTAs of 64 value rows), three chunks, the last partial; dht
    "gdn_softplus_k128": ("gdn", SOFTPLUS, dict(T=150, H=1, K=128, V=128), True),
    # per-channel decay with no bound: prepare_bwd's CUDA-core form (running products in the diagonal blocks), at
    # K = 128 where each thread owns two row blocks (grad_terms' sums by block, branch_grads' rotated ones); a weak
    # gate (A_log − 4: ≈ −0.03 per token), so that the later row blocks' terms weigh in every gradient
    "kda_softplus_k128": ("kda", SOFTPLUS, dict(T=150, H=1, K=128, V=128, A_log_shift=-4.0), True),
}
# larger shapes for the device
GPU_CASES = {
    "kda_lb_k128": ("kda", LB, dict(B=2, T=1000, H=4, K=128, V=128), True),
    # a weak gate (as kda_softplus_k128's): every row block's terms weigh in
    "kda_softplus_varlen_gva2_vfirst_k128": ("kda", {**SOFTPLUS, "state_v_first": True},
                                             dict(H=2, G=2, K=128, V=128, cu_seqlens=[0, 0, 1, 64, 700, 765],
                                                  A_log_shift=-4.0), True),
    "gdn_softplus_k64": ("gdn", SOFTPLUS, dict(B=1, T=2000, H=4, K=64, V=64), False),
}


def spans_of(shape: dict) -> list[tuple[int, int]]:
    """Each sequence's [begin, end) on the flattened token axis; its chunks follow those of the sequences before it
    in the workspaces."""
    cu, B, T = shape.get("cu_seqlens"), shape.get("B", 1), shape.get("T", 0)
    return [(cu[i], cu[i + 1]) for i in range(len(cu) - 1)] if cu else [(b * T, (b + 1) * T) for b in range(B)]


def chunk_rows(x: torch.Tensor, t0: int, L: int) -> torch.Tensor:
    """Tokens [t0, t0 + L) of a [tokens, HV, V] tensor as one chunk, head-major [HV, C, V], rows past L zero."""
    out = torch.zeros(x.shape[1], C, x.shape[2], dtype=torch.float64)
    out[:, :L] = x[t0:t0 + L].transpose(0, 1)
    return out


def chain_steps(ws: dict, do: torch.Tensor, dht: torch.Tensor | None, shape: dict, opt, dstate: torch.Tensor,
                dh0: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each of dstate's chunk steps recomputed in float64 from the kernel's own input to it: (expected, got) over
    every chunk's dhᵀ [chunks, HV, V, K] — a sequence's last chunk expects dht (or zero) exactly, chunk c − 1 the
    step of chunk c applied to the kernel's dh of chunk c — and the same for dh0 [N, HV, V, K] from each sequence's
    first chunk. The workspace is read as the kernel reads it (bf16 tiles widened exactly) and (β⊙dX) rounded to
    bf16 where the kernel's register operand is, so what is left is fp32 arithmetic: an index or transpose error
    cannot hide under the workspace's bf16 rounding, and no error compounds along the chain."""
    f = {n: ws[n].double().cpu() for n in ("ws_q_decayed", "ws_k_decayed", "ws_k_to_end", "ws_A", "ws_Mqk",
                                           "ws_beta", "ws_decay_total")}
    d_o = do.reshape(-1, *do.shape[-2:]).double().cpu()      # [tokens, HV, V]
    got = dstate.double().cpu().transpose(-1, -2)           # dh [chunks, HV, K, V]
    HV, K, V = f["ws_q_decayed"].shape[1], f["ws_q_decayed"].shape[-1], d_o.shape[-1]
    dht_core = (torch.zeros(len(spans_of(shape)), HV, K, V, dtype=torch.float64) if dht is None
                else state_in({"initial_state": dht.double().cpu()}, opt))
    expected, first_steps, row = [], [], 0
    for n, (s, e) in enumerate(spans_of(shape)):
        count = -(-(e - s) // C)
        steps = []
        for c in range(count):
            w = {name: t[row + c] for name, t in f.items()}           # [HV, ...]
            L = min(C, e - s - c * C)
            dO = chunk_rows(d_o, s + c * C, L)
            dh = got[row + c]
            dVn = w["ws_Mqk"].transpose(1, 2) @ dO + w["ws_k_to_end"] @ dh
            bdX = (w["ws_beta"][..., None] * (w["ws_A"].transpose(1, 2) @ dVn)).to(torch.bfloat16).double()
            gte = w["ws_decay_total"][:, :K] if opt.per_channel else w["ws_decay_total"][:, :1]
            steps.append(gte[..., None] * dh + w["ws_q_decayed"].transpose(1, 2) @ dO
                         - w["ws_k_decayed"].transpose(1, 2) @ bdX)
        expected += steps[1:] + [dht_core[n]] if count else []
        first_steps.append(steps[0] if count else dht_core[n])
        row += count
    dh0_expected = torch.stack(first_steps).transpose(-1, -2)
    dh0_got = None if dh0 is None else state_in({"initial_state": dh0.double().cpu()}, opt).transpose(-1, -2)
    return torch.stack(expected).transpose(-1, -2), dh0_expected, dh0_got


def run_case(spec: tuple, seed: int, device: str = "cpu") -> dict:
    """The wgmma64 forward keeping its workspaces (and once not keeping them), then the backward's kernels, on
    `device` ("cpu": the emulator). Returns the outputs ("grad_h0", "dv", the backward's workspaces and S_c in
    "debug"), whether o and the final state were bitwise those of the forward that keeps nothing ("kept_alike"),
    "chunks" (how many), and the checks' float64 values: "ref" (the chunk-64 reference: dh per chunk, dh0, dv and the
    states entering each chunk), "steps" (chain_steps) and "chunk" (chunk_oracle); "ws" and "do", the forward's
    workspaces and dO the backward ran on."""
    op, options, shape, with_dht = spec
    opt = Options(op=op, **options)
    gen = torch.Generator().manual_seed(seed)
    x = make_inputs(opt, generator=gen, **{n: d for n, d in shape.items() if n != "A_log_shift"})
    if "A_log_shift" in shape:           # a weaker (or stronger) in-kernel gate than make_inputs draws
        x["A_log"] = x["A_log"] + shape["A_log_shift"]
    bf = dict.fromkeys(("q", "k", "v", "g", "beta"), torch.bfloat16)
    xk = {n: t if n == "cu_seqlens" else t.to(bf.get(n, torch.float32)).to(device).contiguous() for n, t in x.items()}
    xr = {n: t if n == "cu_seqlens" else t.double().cpu() for n, t in xk.items()}
    emulated = device == "cpu"
    call = make_call(op, initial_state=xk.get("initial_state"), output_final_state=True,
                     cu_seqlens=xk.get("cu_seqlens"), A_log=xk.get("A_log"), dt_bias=xk.get("dt_bias"), **options)
    kcall, tensors = kernel_call(call, xk, emulate=emulated, family="wgmma64")
    inputs = {**tensors, "initial_state": xk.get("initial_state"), "cu_seqlens": xk.get("cu_seqlens")}
    v = xk["v"]
    # the plan run directly, its forward keeping what the backward reads (ws_states too), its backward then launched
    # on the kept workspaces
    config = call_config(inputs, kcall, keep=False)
    plan, recurrence = config.planned()
    if emulated:             # one host build for both directions (each build is a C++ compile)
        from kdagen.codegen import emulate
        built = emulate.build(plan, recurrence, [k.name for k in plan.kernels])
        modules = dict.fromkeys(("forward", "backward"), built)
    else:
        from kdagen.ops.config import load
        modules = {d: load(config, v.device, d) for d in ("forward", "backward")}
    o, ht, ws = fw.launch(plan, recurrence, modules["forward"], inputs, kcall.scalars, poison=True, keep=True)
    # keeping S_c changes nothing else the forward computes
    o_inference, ht_inference, _ = fw.launch(plan, recurrence, modules["forward"], inputs, kcall.scalars, poison=True,
                                             keep=False)
    kept_alike = torch.equal(o, o_inference) and torch.equal(ht, ht_inference)
    do = torch.randn(v.shape, generator=gen).to(torch.bfloat16).to(device)
    # dht small beside dO's share (or absent), so every chunk's dh is mostly the chain's own work
    dht = 0.1 * torch.randn(xk["initial_state"].shape, generator=gen).to(device) if with_dht else None
    module = modules["backward"]
    debug = {}
    grads = bw.launch(plan, recurrence, module, inputs, {n: ws[n] for n in plan.saved}, kcall.scalars, do, dht,
                      alloc=poisoned, debug=debug)
    p = prologue(xr, opt)
    ref = chunk_delta_rule_bwd_k2(p["q"], p["k"], xr["v"], p["a"], p["beta"], scale_of(opt, shape["K"]),
                                  state_in(xr, opt), C, do.double().cpu(),
                                  None if dht is None else state_in({"initial_state": dht.double().cpu()}, opt),
                                  xr.get("cu_seqlens"))
    chunks = sum(-(-(e - s) // C) for s, e in spans_of(shape))
    _, _, entering = chunk_delta_rule_fwd(p["q"], p["k"], xr["v"], p["a"], p["beta"], scale_of(opt, shape["K"]),
                                          state_in(xr, opt), C, xr.get("cu_seqlens"))
    ref["states"] = torch.cat([torch.stack(e_).transpose(-1, -2) for e_ in entering if e_])   # Sᵀ [chunks, HV, V, K]
    debug["ws_states"] = ws["ws_states"]
    debug["dstate"] = dstate_of(debug)
    steps = chain_steps(ws, do, dht, shape, opt, debug["dstate"][:chunks], grads["initial_state"])
    ref_grads = chunked_backward(xr, opt, do.double().cpu(), None if dht is None else dht.double().cpu(), C)
    return dict(opt=opt, grad_h0=grads["initial_state"], dv=grads["v"], debug=debug, ref=ref, chunks=chunks,
                steps=steps, chunk=chunk_oracle(ws, debug["dstate"], v, do, shape, opt), kept_alike=kept_alike,
                grads=grads, ref_grads=ref_grads, ws=ws, do=do)


# chunk_bwd's outputs (plan names) and chunk_oracle's keys
# the outputs with a factor the kernel rounds to bf16 where it hands it on: (β⊙dX)ᵀ, Vnᵀ, dVnᵀ and Xᵀ
HANDED_ON = ("ws_d_k_decayed", "ws_d_k_to_end", "ws_dMqk", "ws_dMkk")
CHUNK_OUTPUTS = ("ws_d_q_decayed", "ws_d_k_decayed", "ws_d_k_to_end", "ws_dMqk", "ws_dMkk", "ws_d_decay_total",
                 "ws_dbeta")


def chunk_products(w: dict, dO: torch.Tensor, Vm: torch.Tensor, dh: torch.Tensor, keep: torch.Tensor, per_channel: bool,
                   absolute: bool) -> dict:
    """One chunk's chunk_bwd outputs in float64 from its inputs (the workspace tiles `w`, dO and v rows, dh), with
    Xᵀ, Vnᵀ, dVnᵀ, (β⊙dX)ᵀ rounded to bf16 where the kernel hands them on. `absolute`: every input in absolute value
    and every difference a sum — the magnitude of each output's terms, which bounds what a bf16 rounding falling
    the other way can move it by (2^-8 of it)."""
    m = (lambda x: x.abs()) if absolute else (lambda x: x)                             # noqa: E731
    sign = 1.0 if absolute else -1.0
    bf = lambda x: x.to(torch.bfloat16).double()                                       # noqa: E731
    S, dh, dO, Vm = m(w["ws_states"].transpose(1, 2)), m(dh), m(dO), m(Vm)             # [HV, K, V]
    kd, kr, A, Mqk, beta = (m(w[n]) for n in ("ws_k_decayed", "ws_k_to_end", "ws_A", "ws_Mqk", "ws_beta"))
    K = S.shape[-2]
    P = Vm + sign * kd @ S
    X = beta[..., None] * P
    Vn = A @ X
    dVn = Mqk.transpose(1, 2) @ dO + kr @ dh
    dX = A.transpose(1, 2) @ dVn
    bdX = beta[..., None] * dX
    dA = bf(dVn) @ bf(X).transpose(1, 2)
    gte = m(w["ws_decay_total"][:, :K] if per_channel else w["ws_decay_total"][:, :1])
    return {"ws_d_q_decayed": dO @ S.transpose(1, 2), "ws_d_k_decayed": sign * bf(bdX) @ S.transpose(1, 2),
            "ws_d_k_to_end": bf(Vn) @ dh.transpose(1, 2) * keep,
            "ws_dMqk": (dO @ bf(Vn).transpose(1, 2)).tril() * keep,
            "ws_dMkk": sign * (A.transpose(1, 2) @ dA @ A.transpose(1, 2)).tril(-1) * keep,
            "ws_d_decay_total": gte * (S * dh).sum(-1), "ws_dbeta": (dX * P).sum(-1) * keep[:, 0], "bdX": bdX}


def chunk_oracle(ws: dict, dstate: torch.Tensor, v: torch.Tensor, do: torch.Tensor, shape: dict, opt) -> dict:
    """chunk_bwd's outputs recomputed in float64 per chunk (docs/math.md §7.3, chunk_products) from the kernel's own
    inputs: the forward's workspace and S_c as stored, dh as dstate wrote it. Keys: the plan's workspace names,
    "dv" [tokens, HV, V], and "terms": each output's terms in absolute value (chunk_products)."""
    f = {n: ws[n].double().cpu() for n in ("ws_k_decayed", "ws_k_to_end", "ws_A", "ws_Mqk", "ws_beta",
                                           "ws_decay_total", "ws_states")}
    d_o, vv = (t.reshape(-1, *t.shape[-2:]).double().cpu() for t in (do, v))     # [tokens, HV, V]
    out, terms = ({n: [] for n in CHUNK_OUTPUTS} for _ in range(2))
    dv = torch.zeros_like(vv)
    row = 0
    for s, e in spans_of(shape):
        for c in range(-(-(e - s) // C)):
            w = {name: t[row] for name, t in f.items()}
            t0, L = s + c * C, min(C, e - s - c * C)
            args = (w, chunk_rows(d_o, t0, L), chunk_rows(vv, t0, L), dstate[row].double().cpu().transpose(1, 2),
                    torch.arange(C)[:, None] < L, opt.per_channel)
            got, mag = chunk_products(*args, absolute=False), chunk_products(*args, absolute=True)
            for n in CHUNK_OUTPUTS:
                out[n].append(got[n])
                terms[n].append(mag[n])
            dv[t0:t0 + L] = got["bdX"][:, :L].transpose(0, 1)
            row += 1
    return {**{n: torch.stack(x) for n, x in out.items()}, "dv": dv,
            "terms": {n: torch.stack(x) for n, x in terms.items()}}


def row_scales(got: torch.Tensor, want: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(L2 error, scale) per row (the last dim, the rest flattened): the scale is the row's norm, or the rows' RMS
    norm where the row is smaller."""
    got, want = got.double().cpu().flatten(0, -2), want.double().cpu().flatten(0, -2)
    scale = want.norm(dim=-1).clamp_min(want.norm() / want.shape[0] ** 0.5).clamp_min(1e-30)
    return (got - want).norm(dim=-1), scale


def row_errors(got: torch.Tensor, want: torch.Tensor, terms: torch.Tensor | None = None) -> tuple[float, float]:
    """(90th percentile, max) over rows (the last dim) of the L2 error relative to the row's norm, or to the rows'
    RMS norm where the row is smaller: the bulk of the rows is the fp32-level check. A bf16 rounding that falls the
    other way in the kernel than in float64 moves a row by up to 2^-8 of one of its terms, so the maximum, the bound
    on those few rows, is also taken against half the norm of the row's terms in absolute value where `terms` gives
    them (a row whose terms cancel to near zero would make any such move look large)."""
    err, scale = row_scales(got, want)
    e = err / scale
    worst = e if terms is None else err / torch.maximum(scale, terms.double().cpu().flatten(0, -2).norm(dim=-1) / 2)
    return torch.quantile(e, 0.9).item(), worst.max().item()


def chunk_errors(result: dict) -> dict:
    """Each chunk_bwd output, and dv, against chunk_oracle (rounded to bf16 where the output is stored so, as dv):
    row_errors, the maximum also against the output's terms where the kernel rounds one of their factors to bf16
    (HANDED_ON)."""
    want, got = result["chunk"], result["debug"]

    def stored(n: str) -> torch.Tensor:
        return want[n].to(torch.bfloat16) if got[n].dtype == torch.bfloat16 else want[n]
    errors = {n: row_errors(got[n][:result["chunks"]], stored(n), want["terms"][n] if n in HANDED_ON else None)
              for n in CHUNK_OUTPUTS}
    errors["dv"] = row_errors(result["dv"].reshape(want["dv"].shape), want["dv"].to(torch.bfloat16))
    return errors


def dstate_of(debug: dict) -> torch.Tensor:
    """dhᵀ per chunk as the backward's kernels read it: hi + lo, in float64."""
    return debug["ws_dstate_hi"].double() + debug["ws_dstate_lo"].double()


def rel(a, b) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def dstate_errors(result: dict) -> tuple[list[float], tuple[float, float]]:
    """dh per chunk against the chunk-64 reference (relative L2, each chunk), and against its own steps
    (chain_steps, dh0 included) as row_errors over the chunks' flattened dh (90th percentile, max)."""
    got = result["debug"]["dstate"][:result["chunks"]].cpu()
    want = torch.cat([torch.stack(d).transpose(-1, -2) for d in result["ref"]["dh_chunks"] if d])
    expected, dh0_expected, dh0_got = result["steps"]
    if dh0_got is not None:
        got_all = torch.cat([got.double().flatten(1), dh0_got.double().flatten(1)])
        expected_all = torch.cat([expected.flatten(1), dh0_expected.flatten(1)])
    else:
        got_all, expected_all = got.double().flatten(1), expected.flatten(1)
    return [rel(g, w) for g, w in zip(got, want)], row_errors(got_all, expected_all)


# ---- the checks both test files make: each returns (a line of figures, the failures) -----------------------------

DV_BOUND = 0.008     # dv against the float64 reference: the GPU tests' bound for dq, dk, dv


def states_checks(result: dict) -> tuple[str, list[str]]:
    """S_c (the forward keeping its workspaces) against the float64 states entering each chunk; the forward's o and
    final state unchanged by keeping it."""
    got = result["debug"]["ws_states"][:result["chunks"]]
    errors = [rel(g, w) for g, w in zip(got, result["ref"]["states"])]
    fails = [] if result["kept_alike"] else ["keeping S_c changed o or the final state"]
    fails += ["NaN left in ws_states"] if torch.isnan(got).any() else []
    fails += [f"S_c against float64 {max(errors):.2e}"] if not max(errors) <= BOUND else []
    return f"S_c per chunk against float64 max {max(errors):.2e}", fails


def dstate_checks(result: dict) -> tuple[str, list[str]]:
    """dh per chunk against the reference and against its own steps; dh0."""
    got = result["debug"]["dstate"][:result["chunks"]]
    reference, exact = dstate_errors(result)
    dh0 = rel(result["grad_h0"], state_out(result["ref"]["dh0"], result["opt"]))
    fails = ["NaN left in dh (ws_dstate_hi + _lo) or dh0"] if torch.isnan(got).any() or \
        torch.isnan(result["grad_h0"]).any() else []
    fails += [f"dh against float64 {max(reference):.2e}"] if not max(reference) <= BOUND else []
    fails += [f"dh against its own steps (90th percentile, max) {exact}"] \
        if not (exact[0] <= ORACLE_BOUND[0] and exact[1] <= ORACLE_BOUND[1]) else []
    fails += [f"dh0 {dh0:.2e}"] if not dh0 <= BOUND else []
    return (f"dh per chunk against float64 max {max(reference):.2e}, against its own steps {exact[0]:.2e} (90th "
            f"percentile) / {exact[1]:.2e}; dh0 {dh0:.2e}"), fails


def chunk_checks(result: dict) -> tuple[str, list[str]]:
    """chunk_bwd's outputs against chunk_oracle, per row; dv against the float64 reference."""
    fails = [f"NaN left in {n}" for n in CHUNK_OUTPUTS if torch.isnan(result["debug"][n][:result["chunks"]]).any()]
    errors = chunk_errors(result)
    dv = rel(result["dv"], result["ref"]["dv"])
    fails += [f"{n} against its float64 recomputation, per row (90th percentile / max) {a:.1e} / {b:.1e}"
              for n, (a, b) in errors.items() if not (a <= CHUNK_BOUND[0] and b <= CHUNK_BOUND[1])]
    fails += [f"dv against float64 {dv:.2e}"] if not dv <= DV_BOUND else []
    return ("per row (90th percentile / max) " + ", ".join(f"{n} {a:.1e} / {b:.1e}" for n, (a, b) in errors.items())
            + f"; dv against float64 {dv:.2e}"), fails


# every gradient against the float64 reference: the bounds of the backward's GPU tests
GRAD_BOUND = {"q": 0.008, "k": 0.008, "v": 0.008}
GRAD_BOUND_REST = 0.02


def grads_checks(result: dict) -> tuple[str, list[str]]:
    """Every input gradient the op returns (prepare_bwd's and param_reduce's, dv, dh0) against the float64
    reference at chunk 64; no NaN left."""
    errors, fails = {}, []
    for name, want in result["ref_grads"].items():
        got = result["grads"].get(name)
        if want is None:
            fails += [f"{name}: a gradient where the reference has none"] if got is not None else []
            continue
        if got is None or tuple(got.shape) != tuple(want.shape):
            fails.append(f"{name}: {None if got is None else tuple(got.shape)} for {tuple(want.shape)}")
            continue
        errors[name] = rel(got, want)
        bound = GRAD_BOUND.get(name, GRAD_BOUND_REST)
        fails += [f"NaN left in d{name}"] if torch.isnan(got.float()).any() else []
        fails += [f"d{name} against float64 {errors[name]:.2e} (bound {bound})"] if not errors[name] <= bound else []
    return "against float64: " + ", ".join(f"d{n} {e:.2e}" for n, e in errors.items()), fails


def outputs(result: dict) -> dict:
    """Everything the kernels wrote that two runs must give bit for bit."""
    n = result["chunks"]
    return {"S_c": result["debug"]["ws_states"][:n], "dh": result["debug"]["dstate"][:n],
            **{f"d{name}": g for name, g in result["grads"].items() if g is not None},
            **{w: result["debug"][w][:n] for w in CHUNK_OUTPUTS}}
