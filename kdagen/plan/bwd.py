"""Plan entries of the backward kernels (templates in templates/bwd/, written by the backward engineer
from this vocabulary): K2 in "store_states" mode (fwd.k2_recurrence), K2_bwd, K1_bwd and the
deterministic parameter reduction.

K2_bwd, per (sequence, value head), chunks in reverse: V/16 consumer warps each own 16 value rows of
dSᵀ (fp32 accumulators, as K2 owns Sᵀ) and one producer warp streams the chunk's workspace, v, dO and
the stored state through a cp.async ring. Terms that sum over V (dMqk, dA, dβ, dO·Sᵀ, (β⊙dX)·Sᵀ,
Vn·dhᵀ, rowsum(S⊙dh)) go through the exchange buffers and the "exchange" named barrier. It writes dv
and dh0 directly, and the per-chunk gradients of the derived tensors to workspaces for K1_bwd.

K1_bwd, per (chunk, q/k head), 4 warps, loops over the G value heads of the group: recomputes the
prologue and Γ, forms b_q, b_kd, b_ki, b_kr (the e^(Γi−Γj) contractions of dMqk/dMkk), dgc, the
reverse cumsum plus the chunk-total term, then the prologue adjoint emitted from the DSL backward
graph per value head (gate, β, per-token parameter terms) and, after the GVA sum, for q/k (L2 norm).
Per-head parameter gradients: per-chunk partials (a fixed-order sum over the chunk's rows) to a
workspace, summed over chunks in a fixed order by param_reduce — bitwise reproducible, no atomics.
"""
from __future__ import annotations

from .fwd import PAD, _seq_params
from .model import Barrier, Buffer, Kernel, Param, Pipeline, Role, Step, Workspace

K1B_WARPS = 4
REDUCE_THREADS = 128


def backward_workspaces(C: int, K: int, KD: int, V: int, token_sums: list[tuple[str, bool]]) -> list[Workspace]:
    """K2(store_states) -> K2_bwd -> K1_bwd -> param_reduce. token_sums: the backward graph's
    sum_tokens nodes (per-head parameter gradients before their per-head epilogue), (id, has a K row)."""
    grads = ["k1_bwd"]
    ws = [
        Workspace("ws_states", ("chunks", "HV", V, K), "bf16", "k2_states", ["k2_bwd"], "S entering each chunk, [V,K]"),
        Workspace("ws_dqd", ("chunks", "HV", C, K), "f32", "k2_bwd", grads, "dO·Sᵀ"),
        Workspace("ws_dkd", ("chunks", "HV", C, K), "f32", "k2_bwd", grads, "−(β⊙dX)·Sᵀ"),
        Workspace("ws_dkr", ("chunks", "HV", C, K), "f32", "k2_bwd", grads, "Vn·dhᵀ"),
        Workspace("ws_dgT", ("chunks", "HV", KD), "f32", "k2_bwd", grads, "e^Γl·rowsum(S⊙dh)"),
        Workspace("ws_dMqk", ("chunks", "HV", C, C), "f32", "k2_bwd", grads, "tril₀(dO·Vnᵀ)"),
        Workspace("ws_dMkk", ("chunks", "HV", C, C), "f32", "k2_bwd", grads, "−tril₋₁(Aᵀ·dA·Aᵀ)"),
        Workspace("ws_dbeta", ("chunks", "HV", C), "f32", "k2_bwd", grads, "Σ_v dX⊙(v − kd·S)"),
    ]
    for node, row in token_sums:
        shape = ("chunks", "HV", K) if row else ("chunks", "HV")
        ws.append(Workspace(f"ws_sum_{node}", shape, "f32", "k1_bwd", ["param_reduce"],
                            f"per-chunk partial of {node} (a sum over tokens in the backward graph)"))
    return ws


def _ring_fits(per_stage: int, fixed: int, limit: int) -> int:
    return 2 if fixed + 2 * per_stage <= limit else 1


def k2_bwd(*, C: int, K: int, V: int, KD: int, varlen: bool, state_layout: str, smem_limit: int,
           io: str) -> Kernel:
    warps = V // 16
    threads = (warps + 1) * 32
    ring = [Buffer("qd_s", (C, K), "bf16", ld=K + PAD), Buffer("kd_s", (C, K), "bf16", ld=K + PAD),
            Buffer("kr_s", (C, K), "bf16", ld=K + PAD), Buffer("a_s", (C, C), "bf16", ld=C + PAD),
            Buffer("mqk_s", (C, C), "bf16", ld=C + PAD), Buffer("beta_s", (C,), "f32"),
            Buffer("gte_s", (KD,), "f32"), Buffer("v_s", (C, V), "bf16", ld=V + PAD),
            Buffer("do_s", (C, V), "bf16", ld=V + PAD), Buffer("s_s", (V, K), "bf16", ld=K + PAD)]
    exchange = [Buffer("vn_x", (C, V), "bf16", ld=V + PAD), Buffer("x_x", (C, V), "bf16", ld=V + PAD),
                Buffer("bdx_x", (C, V), "bf16", ld=V + PAD), Buffer("dh_x", (V, K), "bf16", ld=K + PAD),
                Buffer("red_cc", (warps, 2, C, C), "f32"), Buffer("red_c", (warps, C), "f32")]
    per_stage = sum(b.bytes for b in ring)
    stages = _ring_fits(per_stage, sum(b.bytes for b in exchange) + 1024, smem_limit)
    for b in ring:
        b.stages = stages
    ring_names = [b.name for b in ring]
    steps = [
        Step("dstate_in", "mma", "strip", global_reads=["dht"], note="dSᵀ rows of this warp from dht (or zeros)"),
        Step("load", "load", "cp.async", writes=ring_names, waits=["free"], arrives=["ready"], loop=True,
             global_reads=["ws_qd", "ws_kd", "ws_kr", "ws_gte", "ws_A", "ws_Mqk", "ws_beta", "ws_states", "v", "do"]),
        Step("recompute", "mma", "strip", reads=["s_s", "kd_s", "v_s", "beta_s", "a_s"], writes=["vn_x", "x_x"],
             waits=["ready"], loop=True, note="X = β⊙(v − kd·S), Vn = A·X"),
        Step("dvn", "mma", "strip", reads=["mqk_s", "do_s", "kr_s"], writes=["dh_x"], loop=True,
             note="dVn = Mqkᵀ·dO + kr·dh; dh (bf16) to the exchange for the K-side products"),
        Step("dx", "mma", "strip", reads=["a_s", "beta_s", "v_s", "kd_s", "s_s"], writes=["bdx_x", "red_c"],
             loop=True, global_writes=["grad_v"], note="dX = Aᵀ·dVn, dv = β⊙dX, dβ partial Σ_v dX⊙(v − kd·S)"),
        Step("cc_partials", "mma", "strip", reads=["do_s", "vn_x", "x_x"], writes=["red_cc"], waits=["exchange"],
             loop=True, note="per-warp partials of dO·Vnᵀ and dVn·Xᵀ"),
        Step("chunk_grads", "mma", "ksplit", reads=["red_cc", "red_c", "a_s", "do_s", "s_s", "bdx_x", "vn_x", "dh_x",
                                                     "gte_s"],
             waits=["exchange"], loop=True,
             global_writes=["ws_dqd", "ws_dkd", "ws_dkr", "ws_dgT", "ws_dMqk", "ws_dMkk", "ws_dbeta"],
             note="dMqk, dMkk = −tril₋₁(Aᵀ·dA·Aᵀ), dβ; dO·Sᵀ, −(β⊙dX)·Sᵀ, Vn·dhᵀ, e^Γl·rowsum(S⊙dh) split over K"),
        Step("dstate", "mma", "strip", reads=["gte_s", "qd_s", "do_s", "kd_s", "bdx_x"], waits=["exchange"],
             arrives=["free"], loop=True, note="dSᵀ ← dSᵀ⊙gte + dOᵀ·qd − (β⊙dX)ᵀ·kd"),
        Step("dstate_out", "mma", "strip", global_writes=["grad_h0"], note="dh0 (fp32, always written)"),
    ]
    params = [Param(n, "ptr", d) for n, d in (("ws_qd", "bf16"), ("ws_kd", "bf16"), ("ws_kr", "bf16"),
                                              ("ws_gte", "f32"), ("ws_A", "bf16"), ("ws_Mqk", "bf16"),
                                              ("ws_beta", "f32"), ("ws_states", "bf16"), ("v", io), ("do", io),
                                              ("dht", "f32"))]
    params += _seq_params(varlen)
    params += [Param("grad_v", "ptr", io, const=False), Param("grad_h0", "ptr", "f32", const=False)]
    params += [Param(n, "ptr", "f32", const=False) for n in ("ws_dqd", "ws_dkd", "ws_dkr", "ws_dgT", "ws_dMqk",
                                                               "ws_dMkk", "ws_dbeta")]
    mma_threads = warps * 32
    return Kernel(
        name="k2_bwd", kind="k2_bwd", template="bwd/k2_bwd.cu.j2", direction="backward",
        grid=["N", "HV"], threads=threads, min_ctas_per_sm=1,
        roles=[Role("mma", (0, warps), work=[s.name for s in steps if s.role == "mma"], regs=200),
               Role("load", (warps, warps + 1), work=["load"], regs=200)],
        buffers=ring + exchange,
        barriers=[Barrier("ready", "mbarrier", 32, [("load", "thread")], ["mma"], stages=stages),
                  Barrier("free", "mbarrier", mma_threads, [("mma", "thread")], ["load"], stages=stages),
                  Barrier("exchange", "named", mma_threads, [("mma", "thread")], ["mma"], phases_per_iter=3, id=1)],
        pipelines=[Pipeline("chunk_ring", stages, "load", ["mma"], "ready", "free", ring_names)],
        steps=steps, params=params,
        options={"mma_warps": warps, "stages": stages, "varlen": varlen, "state_layout": state_layout,
                 "order": "reverse"},
        note="head-parallel, chunks in reverse; dS stays in registers (the whole V per CTA: the V sums stay on chip)")


def k1_bwd(*, C: int, K: int, KD: int, G: int, form: str, decay_kind: str, varlen: bool, leaves: list[Param],
           scalars: list[str], token_grads: list[Param], token_sums: list[str]) -> Kernel:
    threads = K1B_WARPS * 32
    gld = K + 1 if decay_kind == "vector" else KD
    buffers = [Buffer("gamma", (C, KD), "f32", ld=gld), Buffer("beta_s", (C,), "f32"),
               Buffer("qf", (C, K), "f32", ld=K + 1), Buffer("kf", (C, K), "f32", ld=K + 1),
               Buffer("dmqk", (C, C), "f32"), Buffer("dmkk", (C, C), "f32"),
               Buffer("dgc", (C, KD), "f32", ld=gld), Buffer("dpar", (C, K), "f32", ld=K + 1)]
    steps = [
        Step("prologue", "all", "row", writes=["gamma", "beta_s", "qf", "kf"], global_reads=[p.name for p in leaves],
             loop=True, note="recompute the emitted prologue and a (per value head of the group)"),
        Step("cumsum", "all", "column", reads=["gamma"], writes=["gamma"], waits=["sync"], loop=True),
        Step("load_grads", "all", "row", writes=["dmqk", "dmkk"], waits=["sync"], loop=True,
             global_reads=["ws_dMqk", "ws_dMkk"]),
        Step("branch_grads", "all", "row", reads=["gamma", "qf", "kf", "dmqk", "dmkk", "beta_s"], writes=["dgc"],
             waits=["sync"], loop=True, global_reads=["ws_dqd", "ws_dkd", "ws_dkr", "ws_dgT", "ws_dbeta"],
             note="b_q, b_kd, b_ki, b_kr; dq̂ += b_q, dk̂ += Σb; dgc = q̂⊙b_q + k̂⊙(b_kd − b_ki − b_kr)"),
        Step("reverse_cumsum", "all", "column", reads=["dgc"], writes=["dgc"], waits=["sync"], loop=True,
             note="d_decay = suffix sum in the chunk + dgT + Σ_rows k̂⊙b_kr"),
        Step("adjoint_v", "all", "row", reads=["dgc"], writes=["dpar"], waits=["sync"], loop=True,
             global_writes=[p.name for p in token_grads if p.name not in ("grad_q", "grad_k")],
             note="emitted: the DSL backward graph per value head (gate, β, per-token parameter terms)"),
        Step("param_partials", "all", "column", reads=["dpar"], waits=["sync"], loop=True,
             global_writes=[f"ws_sum_{n}" for n in token_sums], note="fixed-order sums over the chunk's rows"),
        Step("adjoint_qk", "all", "row", global_writes=["grad_q", "grad_k"],
             note="emitted: the L2-norm adjoint after the GVA sum of dq̂, dk̂"),
    ]
    params = leaves + [Param(s, "f32") for s in scalars] + _seq_params(varlen)
    params += [Param(n, "ptr", "f32") for n in ("ws_dqd", "ws_dkd", "ws_dkr", "ws_dgT", "ws_dMqk", "ws_dMkk",
                                                 "ws_dbeta")]
    params += token_grads + [Param(f"ws_sum_{n}", "ptr", "f32", const=False) for n in token_sums]
    return Kernel(
        name="k1_bwd", kind="k1_bwd", template="bwd/k1_bwd.cu.j2", direction="backward",
        grid=["chunks", "H"], threads=threads, min_ctas_per_sm=4,
        roles=[Role("all", (0, K1B_WARPS), work=[s.name for s in steps], regs=128)],
        buffers=buffers,
        barriers=[Barrier("sync", "cta", threads, [("all", "thread")], ["all"], phases_per_iter=6)],
        pipelines=[], steps=steps, params=params,
        options={"lanes_per_row": 8, "kpt": K // 8, "form": form, "decay_kind": decay_kind, "gva_ratio": G,
                 "varlen": varlen},
        note="token-parallel over (chunk, q/k head); loops over the G value heads of the group")


def param_reduce(*, token_sums: list[str], head_params: list[str], K: int) -> Kernel:
    """Sum each per-chunk partial over chunks in a fixed order, then the emitted per-head epilogue
    (what the backward graph does after its sum_tokens nodes, e.g. × e^A_log)."""
    grads = [f"grad_{n}" for n in head_params]
    steps = [Step("reduce", "all", "thread", global_reads=[f"ws_sum_{n}" for n in token_sums] + head_params,
                  global_writes=grads,
                  note="one thread per (head, channel): Σ over chunks in chunk order, then the epilogue")]
    params = [Param(f"ws_sum_{n}", "ptr", "f32") for n in token_sums]
    params += [Param(n, "ptr", "f32") for n in head_params]
    params += [Param("num_chunks", "i32")]
    params += [Param(g, "ptr", "f32", const=False) for g in grads]
    return Kernel(
        name="param_reduce", kind="param_reduce", template="bwd/param_reduce.cu.j2", direction="backward",
        grid=["HV"], threads=REDUCE_THREADS, min_ctas_per_sm=1,
        roles=[Role("all", (0, REDUCE_THREADS // 32), work=["reduce"], regs=64)],
        buffers=[], barriers=[], pipelines=[], steps=steps, params=params,
        options={"token_sums": list(token_sums), "head_params": list(head_params), "K": K},
        note="deterministic: per-chunk partials summed in chunk order, no atomics")
