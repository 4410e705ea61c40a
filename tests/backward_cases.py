"""Backward test cases shared by the GPU tests (tests/gpu/test_backward_kernels.py) and the CPU emulation
(tests/test_backward_emulated.py): inputs, the float64 reference, a forward workspace built from float64
math, and the float64 oracle of the recurrence_bwd workspaces (S_c and what recurrence_bwd hands to prepare_bwd).

Inputs are drawn in float64 and rounded to the kernels' dtypes; the reference runs on the rounded values.
The forward workspace the kernels read is built from the same float64 math (reference.chunk_terms) and
rounded to the plan's storage dtypes, so the backward is checked alone. Every output and workspace is
allocated NaN-filled. Inputs are fresh every run; a failure prints the seed, and KDAGEN_TEST_SEED=<seed>
reproduces it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from kdagen import dsl
from kdagen.ops import backward as bw
from kdagen.ops.config import Config, default_arch, options_config

# The forward workspace and the recurrence_bwd outputs under this file's short names, and their plan names
WORKSPACE = {"qd": "ws_q_decayed", "kd": "ws_k_decayed", "kr": "ws_k_to_end", "gte": "ws_decay_total", "A": "ws_A",
             "Mqk": "ws_Mqk", "beta": "ws_beta"}
RECURRENCE_BWD = {"states": "ws_states", "dqd": "ws_d_q_decayed", "dkd": "ws_d_k_decayed", "dkr": "ws_d_k_to_end",
                  "dMqk": "ws_dMqk", "dMkk": "ws_dMkk", "dgT": "ws_d_decay_total", "dbeta": "ws_dbeta"}
from kdagen.reference import Options, chunk_terms, chunked_backward, prologue
from kdagen.reference.inputs import make_inputs
from kdagen.reference.options import expand_heads, scale_of, state_in

C = 16
BOUND = {"q": 0.008, "k": 0.008, "v": 0.008, "g": 0.02, "beta": 0.02, "A_log": 0.02, "dt_bias": 0.02,
         "initial_state": 0.02}
NAN = float("nan")
F64 = torch.float64
TORCH_DTYPE = {"bf16": torch.bfloat16, "f32": torch.float32}


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
    g_scale: float | None = None                  # weak decays: g (a log decay) times this

    def __str__(self):
        return self.name


KDA_SOFT = dict(use_gate_in_kernel=True)
FULL = dict(use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)
VARLEN = [0, 0, 1, 21, 40, 77]                    # an empty and a length-1 sequence, tails everywhere
# sequences of several recurrence_bwd blocks (8 chunks of 16): 10 chunks (a full block and a short one), 1, and 9
BLOCKS_VARLEN = [0, 150, 165, 300]
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
    # one head: no head parameters (a per-head sum over one head measures cancellation luck, see above); decays
    # weak enough (≈ −0.015 per token) that a block's gradient reaches the blocks before it
    Case("kda_blocks_varlen_k64", Options(**FULL), 64, dict(cu_seqlens=BLOCKS_VARLEN, H=1), g_scale=0.02),
    Case("gdn_blocks_vfirst_k64", Options(op="gdn", **FULL, state_v_first=True), 64, dict(B=1, T=260, H=1),
         g_scale=0.02),
]
# small enough for the host emulation: varlen KDA and GDN, fixed-length sequences, sequences of several blocks
EMULATED = ["kda_softplus_vfirst_varlen_k64", "gdn_plain_varlen_k64", "kda_plain_no_h0_k64",
            "kda_blocks_varlen_k64", "gdn_blocks_vfirst_k64"]
# forward kernels -> backward kernels, both emulated: the factored form of prepare (a lower-bound gate), varlen, GVA;
# and sequences of several blocks, where the forward's state checkpoints restart the backward's states
END_TO_END = [Case("kda_lb5_end_to_end_k64", Options(**KDA_SOFT, lower_bound=-5.0, **FULL), 64,
                   dict(cu_seqlens=VARLEN, H=2, G=2), g=torch.bfloat16),
              Case("kda_blocks_end_to_end_k64", Options(**FULL), 64, dict(cu_seqlens=BLOCKS_VARLEN, H=1), g_scale=0.02)]
BLOCK_CHUNKS = 8


def dsl_only(r):
    """A recurrence written only in the tests: its own gate activation and β map, a per-channel head parameter."""
    q, k, v = r.token_input("q", "K"), r.token_input("k", "K"), r.token_input("v", "V")
    g, b = r.token_input("g", "K"), r.token_input("beta")
    w = r.head_param("w", "K")
    r.delta_rule(query=dsl.l2norm(q), key=dsl.l2norm(k), value=v, beta=dsl.square(dsl.sigmoid(b)),
                 decay=-dsl.square(g) * dsl.exp(w), scale=r.scalar("scale"))


# ---- inputs, reference, and the forward workspace (float64, rounded) ----------------------------------

def case_inputs(case: Case, seed: int) -> tuple[dict, torch.Tensor, torch.Tensor | None]:
    """(x, do, dht) on the CPU in the kernels' dtypes; their float64 values are the reference's inputs."""
    gen = torch.Generator().manual_seed(seed)
    x = make_inputs(case.opt, K=case.K, V=case.K, generator=gen, **case.shape)
    if case.A_log_max is not None:
        x["A_log"] = (1 + (case.A_log_max - 1) * torch.rand(x["A_log"].shape, generator=gen, dtype=F64)).log()
    if case.g_scale is not None:
        x["g"] = x["g"] * case.g_scale
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


def config_of(case: Case, x: dict, device) -> Config:
    """The forward's Config for these inputs: the plan the backward kernels come from."""
    dtype = {torch.bfloat16: "bf16", torch.float32: "f32"}
    return options_config(case.opt, case.K, case.K, default_arch(torch.device(device)),
                          has_A_log=x.get("A_log") is not None, has_dt_bias=x.get("dt_bias") is not None,
                          G=x["v"].shape[2] // x["q"].shape[2], varlen=x.get("cu_seqlens") is not None,
                          g_dtype=dtype[case.g], beta_dtype=dtype[case.beta])


def forward_workspace(case: Case, x: dict, rounded: bool = True) -> dict:
    """prepare's workspace as the forward stores it, in the plan's shapes and (when `rounded`) dtypes, float64
    otherwise. Rows past a chunk's end are zero, as prepare writes them (states reads whole tiles); the
    surplus chunks of the chunk dim (the planner's upper bound B·T // C + N) hold NaN, which no kernel may
    read."""
    opt, K = case.opt, case.K
    x64 = {n: as64(t) for n, t in x.items()}
    p = prologue(x64, opt)
    B, T, HV = x["v"].shape[:3]
    N = B if x.get("cu_seqlens") is None else len(x["cu_seqlens"]) - 1
    NC, KD = B * T // C + N, K if opt.per_channel else 1
    flat = lambda t: t.flatten(0, 1)                                  # noqa: E731
    q, k = flat(expand_heads(p["q"], HV)), flat(expand_heads(p["k"], HV))
    a = flat(p["a"]) if opt.per_channel else flat(p["a"])[..., None].expand(B * T, HV, K)
    v, beta = flat(x64["v"]), flat(p["beta"])
    scale = scale_of(opt, K)
    ws = {n: torch.full((NC, HV, C, K), NAN, dtype=F64) for n in ("qd", "kd", "kr")}
    ws.update(gte=torch.full((NC, HV, KD), NAN, dtype=F64), A=torch.full((NC, HV, C, C), NAN, dtype=F64),
              Mqk=torch.full((NC, HV, C, C), NAN, dtype=F64), beta=torch.full((NC, HV, C), NAN, dtype=F64))
    for _, c, s, e in chunks(x):
        L = e - s
        hm = lambda t: t[s:e].transpose(0, 1)                        # noqa: E731
        t = chunk_terms(hm(q), hm(k), hm(v), hm(a), hm(beta), scale)
        for w in ws.values():
            w[c] = 0
        ws["qd"][c, :, :L] = scale * hm(q) * t["E"]
        ws["kd"][c, :, :L] = hm(k) * t["E"]
        ws["kr"][c, :, :L] = hm(k) * t["R"]
        ws["gte"][c] = t["Gl"].exp()[..., :KD]
        ws["A"][c, :, :L, :L] = t["A"]
        ws["Mqk"][c, :, :L, :L] = t["Mqk"]
        ws["beta"][c, :, :L] = hm(beta)
    if not rounded:
        return ws
    plan, _ = config_of(case, x, "cpu").planned()
    return {n: t.to(TORCH_DTYPE[plan.workspace(WORKSPACE[n]).dtype]) for n, t in ws.items()}


def block_starts(x: dict) -> dict:
    """{checkpoint slot: the block's first chunk} of every block of 8 chunks; block b of sequence n owns slot
    ⌊its first chunk / 8⌋ + n + b."""
    first, starts = {}, {}
    for n, c, _, _ in chunks(x):
        first.setdefault(n, c)
        b, within = divmod(c - first[n], BLOCK_CHUNKS)
        if not within:
            starts[first[n] // BLOCK_CHUNKS + n + b] = c
    return starts


def state_blocks(case: Case, x: dict) -> torch.Tensor:
    """The forward's saved ws_state_blocks: Sᵀ entering each block's first chunk (the float64 chain over the
    rounded workspace, stored in fp32), zero in slots no block owns."""
    states = k2_oracle(case, x, torch.zeros_like(x["v"]), None)["states"]
    B, T, HV = x["v"].shape[:3]
    N = B if x.get("cu_seqlens") is None else len(x["cu_seqlens"]) - 1
    out = torch.zeros((B * T // C + N) // BLOCK_CHUNKS + N, HV, case.K, case.K)
    for slot, c in block_starts(x).items():
        out[slot] = states[c].float()
    return out


def saved_for(case: Case, x: dict, device) -> dict:
    """What kdagen.ops.forward saves, with the workspace built here from float64 math."""
    on = {n: (t.to(device) if isinstance(t, torch.Tensor) else t) for n, t in x.items()}
    ws = {WORKSPACE[n]: t.to(device) for n, t in forward_workspace(case, x).items()}
    ws["ws_state_blocks"] = state_blocks(case, x).to(device)
    return {"config": config_of(case, x, device), "x": on, "scalars": {"scale": scale_of(case.opt, case.K)},
            "workspace": ws}


def poisoned(shape, dtype, device):
    return torch.full(shape, NAN, dtype=dtype, device=device)


# ---- comparisons ----------------------------------------------------------------------------------------

def rel_l2(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.detach().to("cpu", F64), ref.to(F64)
    if not torch.isfinite(x).all():
        return float("inf")
    return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def check_grads(grads: dict, ref: dict, where: str, bound: dict = BOUND) -> None:
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
        rows.append(f"  {name:14s} rel L2 {err:.3e}  (bound {bound[name]:.3g}, |ref| {r.norm().item():.3e},"
                    f" nan {int(torch.isnan(got.float()).sum())})")
        if not err <= bound[name]:
            bad.append(name)
    assert not bad, f"{where}: {bad} off\n" + "\n".join(rows)


def run_case(case: Case, device, seed: int, loader=None, debug=None) -> tuple[dict, dict]:
    x, do, dht = case_inputs(case, seed)
    ref = reference(case, x, do, dht)
    saved = saved_for(case, x, device)
    grads = bw.backward(saved, do.to(device), None if dht is None else dht.to(device), alloc=poisoned,
                        loader=loader, debug=debug)
    return grads, ref


# ---- the recurrence_bwd oracle ----------------------------------------------------------------------------------

def k2_oracle(case: Case, x: dict, do, dht, rounded: bool = True) -> dict:
    """float64 S_c, dqd, dkd, dkr, dMqk, dMkk, dgT and dβ (the Σ_v dX⊙P part) from the (rounded) workspace, and
    "dgT_terms": e^Γl⊙Σ_v |S⊙dh|, the magnitude of dgT's terms (its sum cancels: check_k2_workspace's measure)."""
    ws = {n: t.to(F64) for n, t in forward_workspace(case, x, rounded).items()}
    ws["gte"] = ws["gte"].expand(*ws["gte"].shape[:2], case.K)          # a per-head decay: [NC, HV, 1]
    v, dO = x["v"].to(F64).flatten(0, 1), do.to(F64).flatten(0, 1)
    HV, K = v.shape[1], case.K
    h0 = state_in({n: as64(t) for n, t in x.items()}, case.opt)
    dh = None if dht is None else state_in({"initial_state": dht.to(F64)}, case.opt)
    NC = ws["qd"].shape[0]
    out = {n: torch.zeros(NC, HV, *s, dtype=F64) for n, s in (("states", (K, K)), ("dqd", (C, K)), ("dkd", (C, K)),
                                                             ("dkr", (C, K)), ("dMqk", (C, C)), ("dMkk", (C, C)),
                                                             ("dgT", (K,)), ("dgT_terms", (K,)), ("dbeta", (C,)))}
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
            out["dgT_terms"][c] = w["gte"] * (S * dS).abs().sum(-1)
            out["dbeta"][c] = (dX * P).sum(-1)
            dS = w["gte"][..., None] * dS + w["qd"].transpose(1, 2) @ do_c - w["kd"].transpose(1, 2) @ bdX
    return out


def check_k2_workspace(case: Case, debug: dict, seed: int) -> None:
    x, do, dht = case_inputs(case, seed)
    want = k2_oracle(case, x, do, dht)
    used = sorted({c for _, c, _, _ in chunks(x)})
    rows, bad = [], []
    for name, w in want.items():
        if name.endswith("_terms"):
            continue
        got = debug[RECURRENCE_BWD[name]].detach().to("cpu", F64)[used]
        if name == "dgT":
            # a sum of V products that cancel: its error is measured against the sum of their magnitudes (a
            # floating-point sum's bound), where bf16 operands give ≤ 6e-4 and chunks or channels out of place ≥ 0.024
            err, bound = ((got - w[used]).norm() / want["dgT_terms"][used].norm()).item(), 0.005
        else:                                     # bf16 operands give 1e-3..9e-3 here; a wrong index gives > 0.04
            err, bound = rel_l2(got, w[used]), 0.02
        rows.append(f"  {name:7s} rel L2 {err:.3e}")
        if not err <= bound:
            bad.append(name)
    assert not bad, f"{case.name} seed={seed}: recurrence_bwd workspace {bad} off\n" + "\n".join(rows)


def chunk_reference_k2(case: Case, x: dict, do, dht) -> dict:
    """reference.chunk_delta_rule_bwd_k2 on the flattened token axis (per value head tensors [B·T, HV, ...])."""
    from kdagen.reference import chunk_delta_rule_bwd_k2
    p = prologue(x, case.opt)
    h0 = state_in(x, case.opt)
    dh = None if dht is None else state_in({"initial_state": as64(dht)}, case.opt)
    g = chunk_delta_rule_bwd_k2(p["q"], p["k"], x["v"], p["a"], p["beta"], scale_of(case.opt, case.K), h0, C,
                                as64(do), dh, x.get("cu_seqlens"))
    return {n: t.flatten(0, 1) if n != "dh0" else t for n, t in g.items() if n != "dh_chunks"}


def call_options(opt: Options) -> dict:
    """FLA keyword arguments that give `opt` (the flags that are set)."""
    flags = ("use_qk_l2norm_in_kernel", "use_gate_in_kernel", "use_beta_sigmoid_in_kernel", "allow_neg_eigval",
             "lower_bound", "state_v_first")
    return {f: getattr(opt, f) for f in flags if getattr(opt, f) not in (None, False)}
