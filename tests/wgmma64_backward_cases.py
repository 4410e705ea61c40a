"""wgmma64 backward cases shared by the CPU emulation (tests/test_wgmma64_backward_emulated.py) and the GPU
(tests/gpu/test_wgmma64_backward_gpu.py): run the wgmma64 forward's prepare and the backward's kernels on random
inputs, NaN-poisoned, and the two float64 checks — the reference at chunk 64 on the same rounded inputs, and the
dS chain's steps recomputed from the kernel's own inputs to them (chain_steps)."""
from __future__ import annotations

import torch

from kdagen.ops import backward as bw
from kdagen.ops.api import kernel_call, make_call
from kdagen.ops.forward import call_config, forward
from kdagen.ops.launcher import poisoned
from kdagen.reference import Options, chunk_delta_rule_bwd_k2, prologue
from kdagen.reference.inputs import make_inputs
from kdagen.reference.options import scale_of, state_in

C = 64
# dS is an fp32 chain fed by bf16 workspaces: the forward's o bound, for each chunk's dh on its own (the last
# chunk's is dht itself, exact, so one norm over every chunk would hide an error in the rest)
BOUND = 0.005
ORACLE_BOUND = 5e-5  # against chain_steps: fp32 arithmetic and the odd bf16 rounding of β⊙dX falling the other way

LB = dict(use_gate_in_kernel=True, lower_bound=-5.0, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)
SOFTPLUS = dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)
# name: (op, FLA options, make_inputs shape, dht given)
CASES = {
    # per-channel decay, lower-bound gate; varlen with an empty and a length-1 sequence and one of two chunks; GVA 2
    "kda_lb_varlen_gva2_k64": ("kda", LB, dict(H=1, G=2, K=64, V=64, cu_seqlens=[0, 0, 1, 90, 90, 101]), False),
    # per-head decay (GDN), K = V = 128 (two CTAs of 64 value rows), three chunks, the last partial
    "gdn_softplus_k128": ("gdn", SOFTPLUS, dict(T=150, H=1, K=128, V=128), True),
    # an unbounded per-channel gate (softplus), state_v_first, two rows of two chunks
    "kda_softplus_vfirst_k64": ("kda", dict(use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                                            state_v_first=True), dict(B=2, T=65, H=1, K=64, V=64), True),
}
# larger shapes for the device
GPU_CASES = {
    "kda_lb_k128": ("kda", LB, dict(B=2, T=1000, H=4, K=128, V=128), True),
    "kda_softplus_varlen_gva2_vfirst_k128": ("kda", {**SOFTPLUS, "state_v_first": True},
                                             dict(H=2, G=2, K=128, V=128, cu_seqlens=[0, 0, 1, 64, 700, 765]), True),
    "gdn_softplus_k64": ("gdn", SOFTPLUS, dict(B=1, T=2000, H=4, K=64, V=64), False),
}


def spans_of(shape: dict) -> list[tuple[int, int]]:
    """Each sequence's [begin, end) on the flattened token axis; its chunks follow those of the sequences before it
    in the workspaces."""
    cu, B, T = shape.get("cu_seqlens"), shape.get("B", 1), shape.get("T", 0)
    return [(cu[i], cu[i + 1]) for i in range(len(cu) - 1)] if cu else [(b * T, (b + 1) * T) for b in range(B)]


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
    expected, first_steps, firsts, row = [], [], [], 0
    for n, (s, e) in enumerate(spans_of(shape)):
        count = -(-(e - s) // C)
        steps = []
        for c in range(count):
            w = {name: t[row + c] for name, t in f.items()}           # [HV, ...]
            L = min(C, e - s - c * C)
            dO = torch.zeros(HV, C, V, dtype=torch.float64)
            dO[:, :L] = d_o[s + c * C:s + c * C + L].transpose(0, 1)
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
    """The wgmma64 forward (prepare) then the backward's kernels on `device` ("cpu": the emulator). Returns the
    outputs (dh0 "grad_h0", the backward's workspaces "debug") and the checks' float64 values ("ref": the chunk-64
    reference's dh per chunk and dh0; "steps": chain_steps; "chunks": how many there are)."""
    op, options, shape, with_dht = spec
    opt = Options(op=op, **options)
    gen = torch.Generator().manual_seed(seed)
    x = make_inputs(opt, generator=gen, **shape)
    dtypes = {"q": torch.bfloat16, "k": torch.bfloat16, "v": torch.bfloat16, "g": torch.bfloat16, "beta": torch.bfloat16}
    xk = {n: t if n == "cu_seqlens" else t.to(dtypes.get(n, torch.float32)).to(device).contiguous() for n, t in x.items()}
    xr = {n: t if n == "cu_seqlens" else t.double().cpu() for n, t in xk.items()}
    emulated = device == "cpu"
    call = make_call(op, initial_state=xk.get("initial_state"), output_final_state=True,
                     cu_seqlens=xk.get("cu_seqlens"), A_log=xk.get("A_log"), dt_bias=xk.get("dt_bias"), **options)
    kcall, tensors = kernel_call(call, xk, emulate=emulated, family="wgmma64")
    inputs = {**tensors, "initial_state": xk.get("initial_state"), "cu_seqlens": xk.get("cu_seqlens")}
    ws = {}
    forward(inputs, kcall, keep=False, poison=True, debug=ws)
    v = xk["v"]
    do = torch.randn(v.shape, generator=gen).to(torch.bfloat16).to(device)
    # dht small beside dO's share (or absent), so every chunk's dh is mostly the chain's own work
    dht = 0.1 * torch.randn(xk["initial_state"].shape, generator=gen).to(device) if with_dht else None
    config = call_config(inputs, kcall, keep=False)
    plan, recurrence = config.planned()
    if emulated:
        from kdagen.codegen import emulate
        module = emulate.build(plan, recurrence, "backward")
    else:
        from kdagen.ops.config import load
        module = load(config, v.device, "backward")
    debug = {}
    grads = bw.launch(plan, recurrence, module, inputs, {n: ws[n] for n in plan.saved}, kcall.scalars, do, dht,
                      alloc=poisoned, debug=debug)
    p = prologue(xr, opt)
    ref = chunk_delta_rule_bwd_k2(p["q"], p["k"], xr["v"], p["a"], p["beta"], scale_of(opt, shape["K"]),
                                  state_in(xr, opt), C, do.double().cpu(),
                                  None if dht is None else state_in({"initial_state": dht.double().cpu()}, opt),
                                  xr.get("cu_seqlens"))
    chunks = sum(-(-(e - s) // C) for s, e in spans_of(shape))
    debug["dstate"] = dstate_of(debug)
    steps = chain_steps(ws, do, dht, shape, opt, debug["dstate"][:chunks], grads["initial_state"])
    return dict(opt=opt, grad_h0=grads["initial_state"], debug=debug, ref=ref, chunks=chunks, steps=steps)


def dstate_of(debug: dict) -> torch.Tensor:
    """dhᵀ per chunk as the backward's kernels read it: hi + lo, in float64."""
    return debug["ws_dstate_hi"].double() + debug["ws_dstate_lo"].double()


def rel(a, b) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def dstate_errors(result: dict) -> tuple[list[float], list[float]]:
    """Per chunk: dh against the chunk-64 reference, and against its own steps (chain_steps), dh0's last."""
    got = result["debug"]["dstate"][:result["chunks"]].cpu()
    want = torch.cat([torch.stack(d).transpose(-1, -2) for d in result["ref"]["dh_chunks"] if d])
    expected, dh0_expected, dh0_got = result["steps"]
    exact = [rel(g, w) for g, w in zip(got, expected)]
    if dh0_got is not None:
        exact.append(rel(dh0_got, dh0_expected))
    return [rel(g, w) for g, w in zip(got, want)], exact
