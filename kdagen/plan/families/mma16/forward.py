"""mma16 forward kernels: "prepare" (token-parallel) and "recurrence" (head-parallel; the backward runs it
again as "states", storing the state entering each chunk). docs/kernels.md §1.

prepare, per (chunk, value head), 4 warps: the emitted prologue with 8 threads per token row, the
in-chunk cumsum Γ₂ (log2 units, one thread per channel), the decayed tensors, the C×C products
(tensor cores for the factored and the scalar-decay forms, CUDA cores per pair and channel for the
relative vector form) and A = (I + Mkk)⁻¹ by forward substitution (16 lanes, one column each).

recurrence, per (sequence, value head, V slice): 4 consumer warps each own 16 value rows of the
transposed state Sᵀ as fp32 mma accumulators for the whole sequence; every product of the chunk step
chains accumulator -> A operand in registers (no state copy in shared memory). One producer warp
streams the chunk workspace through a 2-stage cp.async ring guarded by ready/free mbarriers.

Precision: A and Mqk are fp32 in the workspace, and the C×C products split their operands into
bf16 hi + lo (bf16x3), as does Vn entering the state update: these roundings would otherwise
dominate o's error (each ~1.7e-3 relative at bf16; o's own rounding is ~1.7e-3).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...model import Barrier, Buffer, Kernel, Param, Pipeline, Role, Step, Workspace, kernel_options
from ...problem import PlanError
from ..base import Facts, seq_params, token_parallel, workspace_params

PREPARE_WARPS = 4
PREPARE_LANES_PER_ROW = 8
RECURRENCE_MMA_WARPS = 4
RECURRENCE_STAGES = 2
PAD = 8                      # bf16 elements of row padding: ldmatrix rows on distinct banks


@kernel_options
@dataclass
class PrepareOptions:
    lanes_per_row: int       # threads sharing a token row
    kpt: int                 # channels per thread
    form: str                # exponent form: "factored" | "relative"
    decay_kind: str          # "vector" | "scalar"
    varlen: bool


@kernel_options
@dataclass
class RecurrenceOptions:
    mode: str                # "forward" (o, final state) | "store_states" (the state entering each chunk)
    v_slice: int             # value rows per CTA
    mma_warps: int
    stages: int
    varlen: bool
    state_layout: str
    block_chunks: int        # chunks per checkpoint block (forward: writes them; store_states: one CTA per block)


# Chunks per block: the backward restarts its serial chains (the state forwards in `states`, dS backwards in
# recurrence_bwd) at the start or end of every block of 8 chunks, from fp32 checkpoints (K·V per 128 tokens and
# head, a quarter of what ws_states holds for them), so those kernels run every block of a sequence at once.
BLOCK_CHUNKS = 8
BLOCK_SLOTS = f"chunks // {BLOCK_CHUNKS} + N"      # checkpoint slots: sequence n's block b is ⌊first chunk/8⌋ + n + b


def state_block_workspace(K: int, V: int) -> Workspace:
    """S entering each block of chunks, written by the forward's recurrence for the backward's states."""
    return Workspace("ws_state_blocks", (BLOCK_SLOTS, "HV", V, K), "f32", "recurrence", ["states"],
                     "Sᵀ entering each block of chunks (zero in slots no block owns)", kept_only=True)


def forward_workspaces(C: int, K: int, KD: int) -> list[Workspace]:
    """prepare -> recurrence (and the backward): per (chunk, value head); rows >= the chunk's length are zero.
    states reads all but q_decayed and Mqk; the backward's dstate_pass and recurrence_bwd read them all."""
    everyone = ["recurrence", "states", "dstate_pass", "recurrence_bwd"]
    outputs = ["recurrence", "dstate_pass", "recurrence_bwd"]
    return [
        Workspace("ws_q_decayed", ("chunks", "HV", C, K), "bf16", "prepare", outputs, "scale·q̂⊙e^Γ"),
        Workspace("ws_k_decayed", ("chunks", "HV", C, K), "bf16", "prepare", everyone, "k̂⊙e^Γ"),
        Workspace("ws_k_to_end", ("chunks", "HV", C, K), "bf16", "prepare", everyone, "k̂⊙e^(Γl−Γ)"),
        Workspace("ws_decay_total", ("chunks", "HV", KD), "f32", "prepare", everyone,
                  "e^Γl (per channel or per head)"),
        Workspace("ws_A", ("chunks", "HV", C, C), "f32", "prepare", everyone, "(I + Mkk)⁻¹"),
        Workspace("ws_Mqk", ("chunks", "HV", C, C), "f32", "prepare", outputs, "scale·tril₀(q̂ k̂ᵀ ⊙ e^(Γi−Γj))"),
        Workspace("ws_beta", ("chunks", "HV", C), "f32", "prepare", everyone, "β after the prologue"),
    ]


PREPARE_OUTPUTS = ["ws_q_decayed", "ws_k_decayed", "ws_k_to_end", "ws_decay_total", "ws_A", "ws_Mqk", "ws_beta"]


def prepare(*, C: int, K: int, form: str, varlen: bool, f: Facts, ws: list[Workspace]) -> Kernel:
    kpt = K // PREPARE_LANES_PER_ROW
    KD, decay_kind = f.KD, f.decay_kind
    if form == "factored":
        operands = [Buffer(n, (C, K), "f32", ld=K + PAD) for n in ("q_decayed", "k_decayed", "k_inv")]
        product = Step("products", "all", "mma:w0=Mkk,w1=Mqk", reads=["q_decayed", "k_decayed", "k_inv", "beta"],
                       writes=["Mkk"], waits=["sync"], global_writes=["ws_Mqk"],
                       note="Mkk = β·tril₋₁(k_decayed·k_invᵀ), Mqk = tril₀(q_decayed·k_invᵀ): 16×16×K mma, bf16x3")
    elif decay_kind == "scalar":
        operands = [Buffer(n, (C, K), "f32", ld=K + PAD) for n in ("q_hat", "k_hat")]
        product = Step("products", "all", "mma:w0=Mkk,w1=Mqk", reads=["q_hat", "k_hat", "gamma", "beta"],
                       writes=["Mkk"], waits=["sync"], global_writes=["ws_Mqk"],
                       note="q̂k̂ᵀ, k̂k̂ᵀ on tensor cores (bf16x3), then the per-pair scalar e^(Γi−Γj) (select-masked)")
    else:
        operands = [Buffer(n, (C, K), "f32", ld=K + 1) for n in ("q_hat", "k_hat")]
        product = Step("products", "all", "pairs", reads=["q_hat", "k_hat", "gamma", "beta"], writes=["Mkk"],
                       waits=["sync"], global_writes=["ws_Mqk"],
                       note="per pair (i ≥ j) and channel: e^(Γi−Γj) ≤ 1 on CUDA cores, any decay magnitude")
    gamma_ld = K + 1 if form == "relative" and decay_kind == "vector" else KD
    buffers = [Buffer("gamma", (C, KD), "f32", ld=gamma_ld), Buffer("beta", (C,), "f32"), *operands,
               Buffer("Mkk", (C, C), "f32")]
    row_writes = ["gamma", "beta"] + (["q_hat", "k_hat"] if form == "relative" else [])
    decay_writes = ["q_decayed", "k_decayed", "k_inv"] if form == "factored" else []
    steps = [
        Step("prologue", "all", "row", writes=row_writes, global_reads=[p.name for p in f.leaves],
             note="emitted from the DSL graph: q̂, k̂, per-step decay a (stored ×log2e), β"),
        Step("cumsum", "all", "column", reads=["gamma"], writes=["gamma"], waits=["sync"],
             note="Γ₂ = in-chunk inclusive cumsum (tail rows carry a = 0)"),
        Step("decay", "all", "row", reads=["gamma"], writes=decay_writes, waits=["sync"],
             global_writes=["ws_q_decayed", "ws_k_decayed", "ws_k_to_end", "ws_decay_total", "ws_beta"]),
        product,
        Step("inverse", "all", "column16", reads=["Mkk"], waits=["sync"], global_writes=["ws_A"],
             note="A = (I + Mkk)⁻¹: forward substitution in fp32, lane j owns column j"),
    ]
    return token_parallel(template="mma16/prepare.cu.j2", f=f, varlen=varlen, ws=ws, outputs=PREPARE_OUTPUTS,
                          warps=PREPARE_WARPS, min_ctas_per_sm=4, regs=128, buffers=buffers, steps=steps,
                          options=PrepareOptions(PREPARE_LANES_PER_ROW, kpt, form, decay_kind, varlen),
                          barrier_phases=4)


def recurrence(*, C: int, K: int, V: int, KD: int, varlen: bool, state_layout: str, mode: str,
               ws: list[Workspace]) -> Kernel:
    """mode "forward" writes o and the final state; "store_states" writes the state entering each chunk."""
    vs = RECURRENCE_MMA_WARPS * 16
    threads = (RECURRENCE_MMA_WARPS + 1) * 32
    ring = [Buffer("v", (C, vs), "bf16", ld=vs + PAD, stages=RECURRENCE_STAGES),
            Buffer("q_decayed", (C, K), "bf16", ld=K + PAD, stages=RECURRENCE_STAGES),
            Buffer("k_decayed", (C, K), "bf16", ld=K + PAD, stages=RECURRENCE_STAGES),
            Buffer("k_to_end", (C, K), "bf16", ld=K + PAD, stages=RECURRENCE_STAGES),
            Buffer("A", (C, C), "f32", stages=RECURRENCE_STAGES),
            Buffer("Mqk", (C, C), "f32", stages=RECURRENCE_STAGES),
            Buffer("beta", (C,), "f32", stages=RECURRENCE_STAGES),
            Buffer("decay_total", (KD,), "f32", stages=RECURRENCE_STAGES)]
    forward = mode == "forward"
    if not forward:
        ring = [b for b in ring if b.name not in ("q_decayed", "Mqk")]
    buffers = ring + ([Buffer("o", (C, 16), "bf16", ld=16 + PAD, scope="warp", copies=RECURRENCE_MMA_WARPS)]
                      if forward else [])
    ring_names = [b.name for b in ring]
    ws_in = ["ws_k_decayed", "ws_k_to_end", "ws_decay_total", "ws_A", "ws_beta"]
    ws_in += ["ws_q_decayed", "ws_Mqk"] if forward else []
    steps = [
        Step("state_in", "mma", "strip", global_reads=["h0"] if forward else ["ws_state_blocks"],
             note="Sᵀ rows of this warp from h0 (or zeros)" if forward else "Sᵀ rows of this warp from the block's "
                                                                              "checkpoint"),
        Step("load", "load", "cp.async", writes=ring_names, waits=["free"], arrives=["ready"],
             global_reads=ws_in + ["v"], loop=True, note="one chunk of workspace + v rows (tail rows zero-filled)"),
        Step("state_products", "mma", "strip", reads=["k_decayed"] + (["q_decayed"] if forward else []),
             waits=["ready"], loop=True,
             note="P = Sᵀ·k_decayedᵀ" + (", Q = Sᵀ·q_decayedᵀ" if forward else "")
             + " (A operand from the state registers)"),
        Step("delta", "mma", "strip", reads=["v", "beta"], loop=True, note="Xᵀ = β⊙(vᵀ − P)"),
        Step("solve", "mma", "strip", reads=["A"], loop=True, note="Vnᵀ = Xᵀ·Aᵀ (bf16x3: X and A split hi + lo)"),
    ]
    if forward:
        steps.insert(2, Step("checkpoint", "mma", "strip", global_writes=["ws_state_blocks"], loop=True,
                             note="at a block's first chunk, when kept: Sᵀ (fp32) for the backward's states; the "
                                  "sequence's unowned slots zeroed"))
        steps.append(Step("output", "mma", "strip", reads=["Mqk", "o"], writes=["o"], loop=True,
                          global_writes=["o"], note="Oᵀ = Q + Vnᵀ·Mqkᵀ (bf16x3); staged per warp for 16-byte stores"))
    else:
        steps.append(Step("store_state", "mma", "strip", loop=True, global_writes=["ws_states"],
                          note="S entering the chunk, bf16 [V,K] per (chunk, head)"))
    steps.append(Step("update", "mma", "strip", reads=["k_to_end", "decay_total"], arrives=["free"], loop=True,
                      note="Sᵀ ← Sᵀ⊙decay_total + (Vn_hi + Vn_lo)ᵀ·k_to_end"))
    if forward:
        steps.append(Step("state_out", "mma", "strip", global_writes=["ht"], note="final state (if requested)"))
    dtypes = {w.name: w.dtype for w in ws}
    params = [Param("v", "ptr", "bf16"), Param("h0" if forward else "ws_state_blocks", "ptr", "f32")]
    params += workspace_params(ws_in, True, ws) + seq_params(varlen)
    if forward:
        params += [Param("o", "ptr", "bf16", const=False), Param("ht", "ptr", "f32", const=False),
                   Param("ws_state_blocks", "ptr", "f32", const=False)]
    else:
        if dtypes["ws_states"] != "bf16":
            raise PlanError(f"states writes S_c in bf16, the plan's ws_states is {dtypes['ws_states']}")
        params += [Param("ws_states", "ptr", "bf16", const=False)]
    return Kernel(
        name="recurrence" if forward else "states", kind="recurrence", template="mma16/recurrence.cu.j2",
        direction="forward" if forward else "backward",
        grid=["N" if forward else BLOCK_SLOTS, "HV", V // vs], threads=threads, min_ctas_per_sm=2,
        roles=[Role("mma", (0, RECURRENCE_MMA_WARPS), work=[s.name for s in steps if s.role == "mma"], regs=200),
               Role("load", (RECURRENCE_MMA_WARPS, RECURRENCE_MMA_WARPS + 1), work=["load"], regs=200)],
        buffers=buffers,
        barriers=[Barrier("ready", "mbarrier", 32, [("load", "thread")], ["mma"], stages=RECURRENCE_STAGES,
                          note="cp.async.mbarrier.arrive.noinc from each producer lane"),
                  Barrier("free", "mbarrier", RECURRENCE_MMA_WARPS * 32, [("mma", "thread")], ["load"],
                          stages=RECURRENCE_STAGES)],
        pipelines=[Pipeline("chunk_ring", RECURRENCE_STAGES, "load", ["mma"], "ready", "free", ring_names)],
        steps=steps, params=params,
        options=RecurrenceOptions(mode, vs, RECURRENCE_MMA_WARPS, RECURRENCE_STAGES, varlen, state_layout,
                                  BLOCK_CHUNKS),
        note="head-parallel: one CTA per (sequence, value head, V slice); the state never leaves registers"
             if forward else "block-parallel: one CTA per (block of chunks, value head, V slice) from its checkpoint")
