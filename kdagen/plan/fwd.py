"""Plan entries of the forward kernels: K1 "prepare" (token-parallel) and K2 "recurrence"
(head-parallel; also run in the backward in "store_states" mode).

K1, per (chunk, value head), 4 warps: the emitted prologue with 8 threads per token row, the
in-chunk cumsum Γ₂ (log2 units, one thread per channel), the decayed tensors, the C×C products
(tensor cores for the factored and the scalar-decay forms, CUDA cores per pair and channel for the
relative vector form) and A = (I + Mkk)⁻¹ by forward substitution (16 lanes, one column each).

K2, per (sequence, value head, V slice): 4 consumer warps each own 16 value rows of the transposed
state Sᵀ as fp32 mma accumulators for the whole sequence; every product of the chunk step chains
accumulator -> A operand in registers (no state copy in shared memory). One producer warp streams the
chunk workspace through a 2-stage cp.async ring guarded by ready/free mbarriers.

Precision: A and Mqk are fp32 in the workspace, and the C×C products split their operands into
bf16 hi + lo (bf16x3), as does Vn entering the state update: these roundings would otherwise
dominate o's error (each ~1.7e-3 relative at bf16; o's own rounding is ~1.7e-3).
"""
from __future__ import annotations

from .model import Barrier, Buffer, Kernel, Param, Pipeline, Role, Step, Workspace
from .problem import PlanError

K1_WARPS = 4
K1_LANES_PER_ROW = 8
K2_MMA_WARPS = 4
K2_STAGES = 2
PAD = 8                      # bf16 elements of row padding: ldmatrix rows on distinct banks


def forward_workspaces(C: int, K: int, KD: int) -> list[Workspace]:
    """K1 -> K2 (and the backward): per (chunk, value head); rows >= the chunk's length are zero.
    K2 in "store_states" mode reads all but qd and Mqk."""
    everyone = ["k2_recurrence", "k2_states", "k2_bwd"]
    outputs = ["k2_recurrence", "k2_bwd"]
    return [
        Workspace("ws_qd", ("chunks", "HV", C, K), "bf16", "k1_prepare", outputs, "scale·q̂⊙e^Γ"),
        Workspace("ws_kd", ("chunks", "HV", C, K), "bf16", "k1_prepare", everyone, "k̂⊙e^Γ"),
        Workspace("ws_kr", ("chunks", "HV", C, K), "bf16", "k1_prepare", everyone, "k̂⊙e^(Γl−Γ)"),
        Workspace("ws_gte", ("chunks", "HV", KD), "f32", "k1_prepare", everyone, "e^Γl (per channel or per head)"),
        Workspace("ws_A", ("chunks", "HV", C, C), "f32", "k1_prepare", everyone, "(I + Mkk)⁻¹"),
        Workspace("ws_Mqk", ("chunks", "HV", C, C), "f32", "k1_prepare", outputs, "scale·tril₀(q̂ k̂ᵀ ⊙ e^(Γi−Γj))"),
        Workspace("ws_beta", ("chunks", "HV", C), "f32", "k1_prepare", everyone, "β after the prologue"),
    ]


def _seq_params(varlen: bool) -> list[Param]:
    """How kernels find sequences: cu_seqlens and per-sequence chunk offsets (varlen), else B rows of T."""
    seq = [Param("cu_seqlens", "ptr", "i64"), Param("chunk_offsets", "ptr", "i32")] if varlen else []
    return seq + [Param("T", "i32"), Param("N", "i32")]


def _ws_params(names, const: bool, dtypes: dict) -> list[Param]:
    return [Param(n, "ptr", dtypes[n], const=const) for n in names]


def k1_prepare(*, C: int, K: int, KD: int, form: str, decay_kind: str, varlen: bool, leaves: list[Param],
               scalars: list[str], ws: list[Workspace]) -> Kernel:
    threads = K1_WARPS * 32
    kpt = K // K1_LANES_PER_ROW
    if form == "factored":
        operands = [Buffer(n, (C, K), "f32", ld=K + PAD) for n in ("qd", "kd", "ki")]
        product = Step("products", "all", "mma:w0=Mkk,w1=Mqk", reads=["qd", "kd", "ki", "beta_s"], writes=["mkk"],
                       waits=["sync"], global_writes=["ws_Mqk"],
                       note="Mkk = β·tril₋₁(kd·kiᵀ), Mqk = tril₀(qd·kiᵀ): 16×16×K mma products, bf16x3")
    elif decay_kind == "scalar":
        operands = [Buffer(n, (C, K), "f32", ld=K + PAD) for n in ("qf", "kf")]
        product = Step("products", "all", "mma:w0=Mkk,w1=Mqk", reads=["qf", "kf", "gamma", "beta_s"], writes=["mkk"],
                       waits=["sync"], global_writes=["ws_Mqk"],
                       note="q̂k̂ᵀ, k̂k̂ᵀ on tensor cores (bf16x3), then the per-pair scalar e^(Γi−Γj) (select-masked)")
    else:
        operands = [Buffer(n, (C, K), "f32", ld=K + 1) for n in ("qf", "kf")]
        product = Step("products", "all", "pairs", reads=["qf", "kf", "gamma", "beta_s"], writes=["mkk"],
                       waits=["sync"], global_writes=["ws_Mqk"],
                       note="per pair (i ≥ j) and channel: e^(Γi−Γj) ≤ 1 on CUDA cores, any decay magnitude")
    gamma_ld = K + 1 if form == "relative" and decay_kind == "vector" else KD
    buffers = [Buffer("gamma", (C, KD), "f32", ld=gamma_ld), Buffer("beta_s", (C,), "f32"), *operands,
               Buffer("mkk", (C, C), "f32")]
    row_writes = ["gamma", "beta_s"] + (["qf", "kf"] if form == "relative" else [])
    decay_writes = ["qd", "kd", "ki"] if form == "factored" else []
    steps = [
        Step("prologue", "all", "row", writes=row_writes, global_reads=[p.name for p in leaves],
             note="emitted from the DSL graph: q̂, k̂, per-step decay a (stored ×log2e), β"),
        Step("cumsum", "all", "column", reads=["gamma"], writes=["gamma"], waits=["sync"],
             note="Γ₂ = in-chunk inclusive cumsum (tail rows carry a = 0)"),
        Step("decay", "all", "row", reads=["gamma"], writes=decay_writes, waits=["sync"],
             global_writes=["ws_qd", "ws_kd", "ws_kr", "ws_gte", "ws_beta"]),
        product,
        Step("inverse", "all", "column16", reads=["mkk"], waits=["sync"], global_writes=["ws_A"],
             note="A = (I + Mkk)⁻¹: forward substitution in fp32, lane j owns column j"),
    ]
    outs = ["ws_qd", "ws_kd", "ws_kr", "ws_gte", "ws_A", "ws_Mqk", "ws_beta"]
    dtypes = {w.name: w.dtype for w in ws}
    params = leaves + [Param(s, "f32") for s in scalars] + _seq_params(varlen) + _ws_params(outs, False, dtypes)
    return Kernel(
        name="k1_prepare", kind="k1_prepare", template="fwd/k1_prepare.cu.j2", direction="forward",
        grid=["chunks", "HV"], threads=threads, min_ctas_per_sm=4,
        roles=[Role("all", (0, K1_WARPS), work=[s.name for s in steps], regs=128)],
        buffers=buffers,
        barriers=[Barrier("sync", "cta", threads, [("all", "thread")], ["all"], phases_per_iter=4)],
        pipelines=[], steps=steps, params=params,
        options={"lanes_per_row": K1_LANES_PER_ROW, "kpt": kpt, "form": form, "decay_kind": decay_kind,
                 "varlen": varlen},
        note="token-parallel: one CTA per (chunk, value head); surplus CTAs of the chunk upper bound exit")


def k2_recurrence(*, C: int, K: int, V: int, KD: int, varlen: bool, state_layout: str, mode: str,
                  ws: list[Workspace]) -> Kernel:
    """mode "forward" writes o and the final state; "store_states" writes the state entering each chunk."""
    vs = K2_MMA_WARPS * 16
    threads = (K2_MMA_WARPS + 1) * 32
    ring = [Buffer("v_s", (C, vs), "bf16", ld=vs + PAD, stages=K2_STAGES),
            Buffer("qd_s", (C, K), "bf16", ld=K + PAD, stages=K2_STAGES),
            Buffer("kd_s", (C, K), "bf16", ld=K + PAD, stages=K2_STAGES),
            Buffer("kr_s", (C, K), "bf16", ld=K + PAD, stages=K2_STAGES),
            Buffer("a_s", (C, C), "f32", stages=K2_STAGES),
            Buffer("mqk_s", (C, C), "f32", stages=K2_STAGES),
            Buffer("beta_s", (C,), "f32", stages=K2_STAGES),
            Buffer("gte_s", (KD,), "f32", stages=K2_STAGES)]
    forward = mode == "forward"
    if not forward:
        ring = [b for b in ring if b.name not in ("qd_s", "mqk_s")]
    buffers = ring + ([Buffer("o_s", (C, 16), "bf16", ld=16 + PAD, scope="warp", copies=K2_MMA_WARPS)] if forward else [])
    ring_names = [b.name for b in ring]
    ws_in = ["ws_kd", "ws_kr", "ws_gte", "ws_A", "ws_beta"] + (["ws_qd", "ws_Mqk"] if forward else [])
    steps = [
        Step("state_in", "mma", "strip", global_reads=["h0"], note="Sᵀ rows of this warp from h0 (or zeros)"),
        Step("load", "load", "cp.async", writes=ring_names, waits=["free"], arrives=["ready"],
             global_reads=ws_in + ["v"], loop=True, note="one chunk of workspace + v rows (tail rows zero-filled)"),
        Step("state_products", "mma", "strip", reads=["kd_s"] + (["qd_s"] if forward else []), waits=["ready"],
             loop=True, note="P = Sᵀ·kdᵀ" + (", Q = Sᵀ·qdᵀ" if forward else "") + " (A operand from the state registers)"),
        Step("delta", "mma", "strip", reads=["v_s", "beta_s"], loop=True, note="Xᵀ = β⊙(vᵀ − P)"),
        Step("solve", "mma", "strip", reads=["a_s"], loop=True, note="Vnᵀ = Xᵀ·Aᵀ (bf16x3: X and A split hi + lo)"),
    ]
    if forward:
        steps.append(Step("output", "mma", "strip", reads=["mqk_s", "o_s"], writes=["o_s"], loop=True,
                          global_writes=["o"], note="Oᵀ = Q + Vnᵀ·Mqkᵀ (bf16x3); staged per warp for 16-byte stores"))
    else:
        steps.append(Step("store_state", "mma", "strip", loop=True, global_writes=["ws_states"],
                          note="S entering the chunk, bf16 [V,K] per (chunk, head)"))
    steps.append(Step("update", "mma", "strip", reads=["kr_s", "gte_s"], arrives=["free"], loop=True,
                      note="Sᵀ ← Sᵀ⊙gte + (Vn_hi + Vn_lo)ᵀ·kr"))
    if forward:
        steps.append(Step("state_out", "mma", "strip", global_writes=["ht"], note="final state (if requested)"))
    dtypes = {w.name: w.dtype for w in ws}
    params = [Param("v", "ptr", "bf16"), Param("h0", "ptr", "f32")]
    params += _ws_params(ws_in, True, dtypes) + _seq_params(varlen)
    if forward:
        params += [Param("o", "ptr", "bf16", const=False), Param("ht", "ptr", "f32", const=False)]
    else:
        if dtypes["ws_states"] != "bf16":
            raise PlanError(f"k2_states writes S_c in bf16, the plan's ws_states is {dtypes['ws_states']}")
        params += [Param("ws_states", "ptr", "bf16", const=False)]
    name = "k2_recurrence" if forward else "k2_states"
    return Kernel(
        name=name, kind="k2_recurrence", template="fwd/k2_recurrence.cu.j2",
        direction="forward" if forward else "backward",
        grid=["N", "HV", V // vs], threads=threads, min_ctas_per_sm=2,
        roles=[Role("mma", (0, K2_MMA_WARPS), work=[s.name for s in steps if s.role == "mma"], regs=200),
               Role("load", (K2_MMA_WARPS, K2_MMA_WARPS + 1), work=["load"], regs=200)],
        buffers=buffers,
        barriers=[Barrier("ready", "mbarrier", 32, [("load", "thread")], ["mma"], stages=K2_STAGES,
                          note="cp.async.mbarrier.arrive.noinc from each producer lane"),
                  Barrier("free", "mbarrier", K2_MMA_WARPS * 32, [("mma", "thread")], ["load"], stages=K2_STAGES)],
        pipelines=[Pipeline("chunk_ring", K2_STAGES, "load", ["mma"], "ready", "free", ring_names)],
        steps=steps, params=params,
        options={"mode": mode, "v_slice": vs, "mma_warps": K2_MMA_WARPS, "stages": K2_STAGES, "varlen": varlen,
                 "state_layout": state_layout},
        note="head-parallel: one CTA per (sequence, value head, V slice); the state never leaves registers")
