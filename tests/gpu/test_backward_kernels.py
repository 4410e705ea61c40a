"""The backward kernels (templates/bwd/, kdagen.ops.backward) against the float64 reference.

Inputs are drawn in float64, rounded to the kernels' dtypes, and the reference
(kdagen.reference.chunked_backward) runs on the rounded values. The forward workspace the kernels read
is built here from the same float64 math (reference.chunk_terms) and rounded to its storage dtypes, so
these tests check the backward alone; rows past a chunk's end and surplus chunks hold NaN, which the
kernels must never read. Every output and workspace is allocated NaN-filled.

- marker gpu: every case on the GPU, plus two runs bitwise equal, plus the K2_bwd workspace against
  its float64 oracle (for debugging: it names the first intermediate that is off).
- no marker: a few small cases through kdagen.codegen.emulate (the same kernels compiled for the host,
  one std::thread per CUDA thread, mma/ldmatrix per the PTX ISA), and a check of the oracle itself.

Inputs are fresh every run; a failure prints the seed, and KDAGEN_TEST_SEED=<seed> reproduces it.
Run on a GPU machine: python -m pytest -m gpu tests/gpu -x -q
"""
from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass, field

import pytest
import torch

from kdagen.ops import backward as bw
from kdagen.recurrences import from_options
from kdagen.reference import Options, chunk_terms, chunked_backward, prologue
from kdagen.reference.inputs import make_inputs
from kdagen.reference.options import expand_heads, scale_of, state_in

C = 16
BOUND = {"q": 0.008, "k": 0.008, "v": 0.008, "g": 0.02, "beta": 0.02, "A_log": 0.02, "dt_bias": 0.02,
         "initial_state": 0.02}
NAN = float("nan")
F64 = torch.float64
GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture
def seed() -> int:
    return int(os.environ.get("KDAGEN_TEST_SEED") or random.SystemRandom().randrange(2 ** 31))


@dataclass(frozen=True)
class Case:
    name: str
    opt: Options
    K: int
    shape: dict = field(default_factory=dict)     # make_inputs arguments: B, T, H, G, cu_seqlens, initial_state
    g: torch.dtype = torch.float32
    beta: torch.dtype = torch.bfloat16
    dht: bool = True
    A_log_max: float | None = None                # strong decays: A_log = log U(1, A_log_max)

    def __str__(self):
        return self.name


KDA_SOFT = dict(use_gate_in_kernel=True)
FULL = dict(use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)
VARLEN = [0, 0, 1, 21, 40, 77]                    # an empty and a length-1 sequence, tails everywhere
# Cases with head parameters have >= 4 value heads: dA_log and ddt_bias are per-head sums that can cancel, and
# a relative L2 over 1-2 of them measures that luck (GDN on 2 heads × 50 tokens: the forward's bf16 workspace
# alone passed 0.02 for 2 seeds in 8 in a float64 model; on 4 heads × 100 tokens it stays below 2e-3).
CASES = [
    Case("kda_softplus_l2_bsig_gva2_k128", Options(**KDA_SOFT, **FULL), 128, dict(B=2, T=50, H=2, G=2)),
    Case("kda_softplus_strong_decay_k64", Options(**KDA_SOFT, **FULL), 64, dict(B=1, T=45, H=4), A_log_max=16.0),
    Case("kda_lb5_l2_bsig_gva2_varlen_k128", Options(**KDA_SOFT, lower_bound=-5.0, **FULL), 128,
         dict(cu_seqlens=VARLEN, H=2, G=2), g=torch.bfloat16),
    Case("kda_lb5_noneg_k64", Options(**KDA_SOFT, lower_bound=-5.0, use_beta_sigmoid_in_kernel=True,
                                      allow_neg_eigval=True), 64, dict(B=1, T=33, H=4), beta=torch.float32),
    Case("kda_plain_no_h0_k64", Options(), 64, dict(B=2, T=37, H=1, initial_state=False)),
    Case("kda_plain_vfirst_no_dht_k128", Options(state_v_first=True), 128, dict(B=1, T=64, H=1), dht=False),
    Case("kda_softplus_vfirst_varlen_k64", Options(**KDA_SOFT, use_qk_l2norm_in_kernel=True, state_v_first=True), 64,
         dict(cu_seqlens=VARLEN, H=4, G=1)),
    Case("gdn_softplus_l2_bsig_gva2_k128", Options(op="gdn", **KDA_SOFT, **FULL), 128, dict(B=1, T=100, H=2, G=2)),
    Case("gdn_plain_varlen_k64", Options(op="gdn"), 64, dict(cu_seqlens=VARLEN, H=1), g=torch.bfloat16),
    Case("gdn_softplus_vfirst_no_h0_k64", Options(op="gdn", **KDA_SOFT, use_qk_l2norm_in_kernel=True,
                                                  state_v_first=True), 64, dict(B=2, T=40, H=4, initial_state=False)),
]
EMULATED = ["kda_softplus_vfirst_varlen_k64", "gdn_plain_varlen_k64"]     # small enough for the host emulation
# forward kernels -> backward kernels, both emulated: the factored form of K1 (a lower-bound gate), varlen, GVA
END_TO_END = Case("kda_lb5_end_to_end_k64", Options(**KDA_SOFT, lower_bound=-5.0, **FULL), 64,
                  dict(cu_seqlens=VARLEN, H=2, G=2), g=torch.bfloat16)


# ---- inputs, reference, and the forward workspace (float64, rounded) ----------------------------------

def case_inputs(case: Case, seed: int) -> tuple[dict, torch.Tensor, torch.Tensor | None]:
    """(x, do, dht) on the CPU in the kernels' dtypes; their float64 values are the reference's inputs."""
    gen = torch.Generator().manual_seed(seed)
    x = make_inputs(case.opt, K=case.K, V=case.K, generator=gen, **case.shape)
    if case.A_log_max is not None:
        x["A_log"] = (1 + (case.A_log_max - 1) * torch.rand(x["A_log"].shape, generator=gen, dtype=F64)).log()
    dtypes = {"q": torch.bfloat16, "k": torch.bfloat16, "v": torch.bfloat16, "g": case.g, "beta": case.beta}
    x = {n: (t.to(dtypes.get(n, torch.float32)) if t is not None and t.is_floating_point() else t) for n, t in x.items()}
    do = torch.randn(x["v"].shape, generator=gen, dtype=F64).to(torch.bfloat16)
    dht = torch.randn(x["initial_state"].shape if x.get("initial_state") is not None else _state_shape(case, x),
                      generator=gen, dtype=F64).to(torch.float32) if case.dht else None
    return x, do, dht


def _state_shape(case: Case, x: dict) -> tuple:
    N = x["v"].shape[0] if x.get("cu_seqlens") is None else len(x["cu_seqlens"]) - 1
    HV = x["v"].shape[2]
    return (N, HV, case.K, case.K)


def as64(t):
    return t.to(F64) if isinstance(t, torch.Tensor) and t.is_floating_point() else t


def reference(case: Case, x: dict, do, dht) -> dict:
    x64 = {n: as64(t) for n, t in x.items()}
    return chunked_backward(x64, case.opt, as64(do), as64(dht), C)


def chunks(x: dict):
    """(sequence, global chunk index, first token, end token) on the flattened token axis."""
    B, T = x["q"].shape[:2]
    cu = [b * T for b in range(B + 1)] if x.get("cu_seqlens") is None else [int(c) for c in x["cu_seqlens"]]
    c = 0
    for n in range(len(cu) - 1):
        for s in range(cu[n], cu[n + 1], C):
            yield n, c, s, min(s + C, cu[n + 1])
            c += 1


def forward_workspace(case: Case, x: dict, rounded: bool = True) -> dict:
    """K1's workspace as the forward would store it (float64 when not `rounded`); NaN in rows past a chunk's
    end and in surplus chunks (the chunk dim is the planner's upper bound B·T // C + N)."""
    opt, K = case.opt, case.K
    x64 = {n: as64(t) for n, t in x.items()}
    p = prologue(x64, opt)
    B, T, HV = x["v"].shape[:3]
    N = B if x.get("cu_seqlens") is None else len(x["cu_seqlens"]) - 1
    NC = B * T // C + N
    flat = lambda t: t.flatten(0, 1)                                  # noqa: E731
    q, k = flat(expand_heads(p["q"], HV)), flat(expand_heads(p["k"], HV))
    a = flat(p["a"]) if opt.per_channel else flat(p["a"])[..., None].expand(B * T, HV, K)
    v, beta = flat(x64["v"]), flat(p["beta"])
    scale = scale_of(opt, K)
    ws = {n: torch.full((NC, HV, C, K), NAN, dtype=F64) for n in ("qd", "kd", "kr")}
    ws.update(gte=torch.full((NC, HV, K), NAN, dtype=F64), A=torch.full((NC, HV, C, C), NAN, dtype=F64),
              Mqk=torch.full((NC, HV, C, C), NAN, dtype=F64), beta=torch.full((NC, HV, C), NAN, dtype=F64))
    for _, c, s, e in chunks(x):
        L = e - s
        hm = lambda t: t[s:e].transpose(0, 1)                        # noqa: E731
        t = chunk_terms(hm(q), hm(k), hm(v), hm(a), hm(beta), scale)
        ws["qd"][c, :, :L] = scale * hm(q) * t["E"]
        ws["kd"][c, :, :L] = hm(k) * t["E"]
        ws["kr"][c, :, :L] = hm(k) * t["R"]
        ws["gte"][c] = t["Gl"].exp()
        ws["A"][c, :, :L, :L] = t["A"]
        ws["Mqk"][c, :, :L, :L] = t["Mqk"]
        ws["beta"][c, :, :L] = hm(beta)
    if not opt.per_channel:
        ws["gte"] = ws["gte"][..., 0].contiguous()
    if not rounded:
        return ws
    store = {"qd": torch.bfloat16, "kd": torch.bfloat16, "kr": torch.bfloat16, "A": torch.bfloat16,
             "Mqk": torch.bfloat16}
    return {n: t.to(store.get(n, torch.float32)) for n, t in ws.items()}


def saved_for(case: Case, x: dict, device) -> dict:
    on = {n: (t.to(device) if isinstance(t, torch.Tensor) else t) for n, t in x.items()}
    ws = {n: t.to(device) for n, t in forward_workspace(case, x).items()}
    return {"recurrence": from_options(case.opt, x.get("A_log") is not None, x.get("dt_bias") is not None),
            "x": on, "scalars": {"scale": scale_of(case.opt, case.K)}, "state_v_first": case.opt.state_v_first,
            "workspace": ws}


def poisoned(shape, dtype, device):
    return torch.full(shape, NAN, dtype=dtype, device=device)


# ---- comparisons ----------------------------------------------------------------------------------------

def rel_l2(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.detach().to("cpu", F64), ref.to(F64)
    if not torch.isfinite(x).all():
        return float("inf")
    return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def check_grads(grads: dict, ref: dict, where: str) -> None:
    """Every reference gradient matched within its bound; the message lists every tensor's error."""
    rows, bad = [], []
    for name, r in ref.items():
        if r is None:
            assert grads.get(name) is None, f"{where}: {name} has a gradient, the reference has none"
            continue
        got = grads.get(name)
        assert got is not None, f"{where}: no gradient for {name}"
        assert tuple(got.shape) == tuple(r.shape), f"{where}: {name} has shape {tuple(got.shape)}, expected {tuple(r.shape)}"
        err = rel_l2(got, r)
        rows.append(f"  {name:14s} rel L2 {err:.3e}  (bound {BOUND[name]:.3g}, |ref| {r.norm().item():.3e},"
                    f" nan {int(torch.isnan(got.float()).sum())})")
        if not err <= BOUND[name]:
            bad.append(name)
    assert not bad, f"{where}: {bad} off\n" + "\n".join(rows)


def run_case(case: Case, device, seed: int, loader=None, debug=None) -> tuple[dict, dict]:
    x, do, dht = case_inputs(case, seed)
    ref = reference(case, x, do, dht)
    saved = saved_for(case, x, device)
    grads = bw.backward(saved, do.to(device), None if dht is None else dht.to(device), alloc=poisoned,
                        loader=loader, debug=debug)
    return grads, ref


# ---- GPU ----------------------------------------------------------------------------------------------

@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("case", CASES, ids=str)
def test_backward_matches_reference(case, seed):
    grads, ref = run_case(case, "cuda", seed)
    check_grads(grads, ref, f"{case.name} seed={seed}")
    again, _ = run_case(case, "cuda", seed)
    differ = [n for n, g in grads.items() if g is not None and not torch.equal(g, again[n])]
    assert not differ, f"{case.name} seed={seed}: two runs differ bitwise in {differ}"


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[7]], ids=str)   # KDA, KDA varlen GVA, GDN
def test_k2_bwd_workspace_matches_oracle(case, seed):
    """The S_c and K2_bwd workspaces against their float64 oracle, to tell which kernel is off."""
    debug = {}
    run_case(case, "cuda", seed, debug=debug)
    check_k2_workspace(case, debug, seed)


@pytest.mark.gpu
@GPU
def test_through_the_public_op(seed):
    """End to end on the GPU: kdagen.chunk_kda's autograd runs the forward kernels, then these."""
    import kdagen
    case = CASES[0]
    x, do, dht = case_inputs(case, seed)
    ref = reference(case, x, do, dht)
    dev = {n: t.cuda().requires_grad_(t.is_floating_point()) for n, t in x.items()}
    o, ht = kdagen.chunk_kda(dev["q"], dev["k"], dev["v"], dev["g"], dev["beta"], A_log=dev["A_log"],
                             dt_bias=dev["dt_bias"], initial_state=dev["initial_state"], output_final_state=True,
                             **call_options(case.opt))
    torch.autograd.backward((o, ht), (do.cuda(), dht.cuda()))
    check_grads({n: dev[n].grad for n in ref}, ref, f"chunk_kda autograd seed={seed}")


# ---- the K2_bwd oracle ----------------------------------------------------------------------------------

def k2_oracle(case: Case, x: dict, do, dht, rounded: bool = True) -> dict:
    """float64 S_c, dqd, dkd, dkr, dMqk, dMkk, dgT and dβ (the Σ_v dX⊙P part) from the (rounded) workspace."""
    ws = {n: t.to(F64) for n, t in forward_workspace(case, x, rounded).items()}
    if not case.opt.per_channel:
        ws["gte"] = ws["gte"][..., None].expand(*ws["gte"].shape, case.K)
    v, dO = x["v"].to(F64).flatten(0, 1), do.to(F64).flatten(0, 1)
    HV, K = v.shape[1], case.K
    h0 = state_in({n: as64(t) for n, t in x.items()}, case.opt)
    dh = None if dht is None else state_in({"initial_state": dht.to(F64)}, case.opt)
    NC = ws["qd"].shape[0]
    out = {n: torch.zeros(NC, HV, *s, dtype=F64) for n, s in (("states", (K, K)), ("dqd", (C, K)), ("dkd", (C, K)),
                                                             ("dkr", (C, K)), ("dMqk", (C, C)), ("dMkk", (C, C)),
                                                             ("dgT", (K,)), ("dbeta", (C,)))}
    seqs = {}
    for n, c, s, e in chunks(x):
        seqs.setdefault(n, []).append((c, s, e))
    tril = torch.ones(C, C, dtype=torch.bool).tril()
    for n, spans in seqs.items():
        S = torch.zeros(HV, K, K, dtype=F64) if h0 is None else h0[n]
        blocks = []
        for c, s, e in spans:
            L = e - s
            w = {m: torch.nan_to_num(t[c]) for m, t in ws.items()}
            for m in ("A", "Mqk"):
                w[m][:, L:, :] = 0
                w[m][:, :, L:] = 0
            vc, do_c = torch.zeros(HV, C, K, dtype=F64), torch.zeros(HV, C, K, dtype=F64)
            vc[:, :L], do_c[:, :L] = v[s:e].transpose(0, 1), dO[s:e].transpose(0, 1)
            out["states"][c] = S.transpose(1, 2)                         # stored [V, K]
            P = vc - w["kd"] @ S
            X = w["beta"][..., None] * P
            Vn = w["A"] @ X
            blocks.append((c, w, vc, do_c, S, P, X, Vn))
            S = w["gte"][..., None] * S + w["kr"].transpose(1, 2) @ Vn
        dS = torch.zeros(HV, K, K, dtype=F64) if dh is None else dh[n]
        for c, w, vc, do_c, S, P, X, Vn in reversed(blocks):
            dVn = w["Mqk"].transpose(1, 2) @ do_c + w["kr"] @ dS
            dX = w["A"].transpose(1, 2) @ dVn
            bdX = w["beta"][..., None] * dX
            dA = dVn @ X.transpose(1, 2)
            out["dqd"][c] = do_c @ S.transpose(1, 2)
            out["dkd"][c] = -bdX @ S.transpose(1, 2)
            out["dkr"][c] = Vn @ dS.transpose(1, 2)
            out["dMqk"][c] = (do_c @ Vn.transpose(1, 2)).masked_fill(~tril, 0)
            out["dMkk"][c] = -(w["A"].transpose(1, 2) @ dA @ w["A"].transpose(1, 2)).tril(-1)
            out["dgT"][c] = w["gte"] * (S * dS).sum(-1)
            out["dbeta"][c] = (dX * P).sum(-1)
            dS = w["gte"][..., None] * dS + w["qd"].transpose(1, 2) @ do_c - w["kd"].transpose(1, 2) @ bdX
    return out


def check_k2_workspace(case: Case, debug: dict, seed: int) -> None:
    x, do, dht = case_inputs(case, seed)
    want = k2_oracle(case, x, do, dht)
    used = sorted({c for _, c, _, _ in chunks(x)})
    rows, bad = [], []
    for name, w in want.items():
        got = debug[name].detach().to("cpu", F64)[used]
        err = rel_l2(got, w[used])
        rows.append(f"  {name:7s} rel L2 {err:.3e}")
        if not err <= 0.02:                       # bf16 operands give 1e-3..9e-3 here; a wrong index gives > 0.04
            bad.append(name)
    assert not bad, f"{case.name} seed={seed}: K2 workspace {bad} off\n" + "\n".join(rows)


def test_oracle_composes_to_the_reference(seed):
    """k2_oracle is what K2_bwd must produce: combined as K1_bwd combines it, it gives the reference."""
    case = next(c for c in CASES if c.name == "kda_softplus_vfirst_varlen_k64")
    x, do, dht = case_inputs(case, seed)
    x = {n: as64(t) for n, t in x.items()}                            # exact: no storage rounding
    w2 = k2_oracle(case, x, do, dht, rounded=False)
    ref = chunk_reference_k2(case, x, do, dht)
    opt, scale = case.opt, scale_of(case.opt, case.K)
    p = prologue(x, opt)
    HV = x["v"].shape[2]
    q, k = expand_heads(p["q"], HV).flatten(0, 1), expand_heads(p["k"], HV).flatten(0, 1)
    a = p["a"].flatten(0, 1)
    beta = p["beta"].flatten(0, 1)
    for _, c, s, e in chunks(x):
        L = e - s
        G = a[s:e].transpose(0, 1).cumsum(1)
        E, R = G.exp(), (G[:, -1:] - G).exp()
        kh, qh, b = k[s:e].transpose(0, 1), q[s:e].transpose(0, 1), beta[s:e].transpose(0, 1)
        F = torch.where(torch.ones(L, L, dtype=torch.bool).tril()[..., None],
                        (G[:, :, None] - G[:, None]).clamp(max=0).exp(), torch.zeros((), dtype=F64))
        dMqk, dMkk = w2["dMqk"][c][:, :L, :L], w2["dMkk"][c][:, :L, :L]
        Rm = torch.einsum("hij,hjd,hijd->hid", dMkk, kh, F)
        b_q = scale * (E * w2["dqd"][c][:, :L] + torch.einsum("hij,hjd,hijd->hid", dMqk, kh, F))
        b_kr = R * w2["dkr"][c][:, :L]
        torch.testing.assert_close(b_q, ref["b_q"][s:e].transpose(0, 1), rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(b_kr, ref["b_kr"][s:e].transpose(0, 1), rtol=1e-9, atol=1e-9)
        b_ki = (scale * torch.einsum("hij,hid,hijd->hjd", dMqk, qh, F)
                + torch.einsum("hij,hi,hid,hijd->hjd", dMkk, b, kh, F))
        torch.testing.assert_close(b_ki, ref["b_ki"][s:e].transpose(0, 1), rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(E * w2["dkd"][c][:, :L] + b[..., None] * Rm, ref["b_kd"][s:e].transpose(0, 1),
                                   rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(w2["dbeta"][c][:, :L] + (kh * Rm).sum(-1), ref["dbeta"][s:e].transpose(0, 1),
                                   rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(w2["dgT"][c], ref["dgT"][s], rtol=1e-9, atol=1e-9)


def chunk_reference_k2(case: Case, x: dict, do, dht) -> dict:
    """reference.chunk_delta_rule_bwd_k2 on the flattened token axis (per value head tensors [B·T, HV, ...])."""
    from kdagen.reference import chunk_delta_rule_bwd_k2
    p = prologue(x, case.opt)
    h0 = state_in(x, case.opt)
    dh = None if dht is None else state_in({"initial_state": as64(dht)}, case.opt)
    g = chunk_delta_rule_bwd_k2(p["q"], p["k"], x["v"], p["a"], p["beta"], scale_of(case.opt, case.K), h0, C,
                                as64(do), dh, x.get("cu_seqlens"))
    return {n: t.flatten(0, 1) if n != "dh0" else t for n, t in g.items()}


# ---- the same kernels on the CPU through kdagen.codegen.emulate ----------------------------------------

def emulated_loader(cfg: bw.BackwardConfig, device=None):
    """The backward module compiled for the host (kdagen.codegen.emulate) with launch trampolines."""
    from kdagen.codegen import emulate
    from kdagen.codegen.render import COMMON
    from kdagen.paths import templates_dir
    root = templates_dir()
    parts = [(root / "emulate" / "cuda_host.h").read_text()]
    parts += [(root / "emulate" / "ptx_host.cuh" if n == "ptx.cuh" else root / "common" / n).read_text() for n in COMMON]
    parts.append(bw.render_kernels(cfg))
    sigs = {}
    kernels = r'extern "C"\s+__global__\s+void\s+__launch_bounds__\([^)]*\)\s*(\w+)\(([^)]*)\)'
    for name, params in re.findall(kernels, parts[-1]):
        types = [p.rsplit(None, 1)[0].replace("__restrict__", "").strip() for p in params.split(",")]
        sigs[name] = len(types)
        args = ", ".join(f"*static_cast<{t.replace('const ', '')}*>(args[{i}])" for i, t in enumerate(types))
        parts.append(f'extern "C" void kdg_emu_launch_{name}(unsigned gx, unsigned gy, unsigned gz, unsigned threads, '
                     f"unsigned smem, void** args) {{\n  kdg_emu::launch(gx, gy, gz, threads, smem, [args] {{ "
                     f"{name}({args}); }});\n}}\n")
    assert sorted(sigs) == sorted(bw.KERNELS), sorted(sigs)
    lib = emulate._compile("\n".join(parts))
    params = {name: [None] * n for name, n in sigs.items()}
    kernels = [type("K", (), {"name": name, "params": p}) for name, p in params.items()]
    return emulate.EmulatedModule(lib, kernels)


@pytest.mark.parametrize("name", EMULATED)
def test_backward_emulated_on_cpu(name, seed):
    from kdagen.codegen import emulate
    case = next(c for c in CASES if c.name == name)
    debug = {}
    try:
        grads, ref = run_case(case, "cpu", seed, loader=emulated_loader, debug=debug)
    except emulate.EmulationUnavailable as e:                           # no g++ or no CUDA headers
        pytest.skip(str(e))
    check_k2_workspace(case, debug, seed)
    check_grads(grads, ref, f"{case.name} (emulated) seed={seed}")


def call_options(opt: Options) -> dict:
    """FLA keyword arguments that give `opt` (the flags that are set)."""
    flags = ("use_qk_l2norm_in_kernel", "use_gate_in_kernel", "use_beta_sigmoid_in_kernel", "allow_neg_eigval",
             "lower_bound", "state_v_first")
    return {f: getattr(opt, f) for f in flags if getattr(opt, f) not in (None, False)}


def test_forward_then_backward_emulated_on_cpu(seed):
    """The forward kernels' own saved workspace feeds the backward kernels; both run emulated on the CPU."""
    from kdagen.codegen import emulate
    from kdagen.ops.api import make_call
    from kdagen.ops.forward import forward
    case = END_TO_END
    x, do, dht = case_inputs(case, seed)
    ref = reference(case, x, do, dht)
    call = make_call(case.opt.op, initial_state=x.get("initial_state"), output_final_state=True,
                     cu_seqlens=x.get("cu_seqlens"), A_log=x.get("A_log"), dt_bias=x.get("dt_bias"),
                     **call_options(case.opt))
    try:
        _, _, saved = forward({n: x.get(n) for n in ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "initial_state",
                                                       "cu_seqlens")}, call,
                              loader=lambda config, device: emulate.build(*config.planned()), poison=True)
    except emulate.EmulationUnavailable as e:
        pytest.skip(str(e))
    grads = bw.backward(saved, do, dht, alloc=poisoned, loader=emulated_loader)
    check_grads(grads, ref, f"{case.name} (forward + backward emulated) seed={seed}")
