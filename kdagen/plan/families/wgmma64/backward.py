"""wgmma64 backward kernels (templates/wgmma64/): docs/kernels.md §4 has the design and the measurements.

dstate — the backward's serial part at chunk 64: the reverse recurrence of the state gradient (docs/math.md §7.2)
alone, one CTA per (sequence, value head, 64 value rows), chunks last to first. It is the forward recurrence's
structure run backwards: a producer warp group fills a two-stage ring with each chunk's workspace tiles and dO
rows by bulk tensor copies; one consumer warp group holds dSᵀ (its 64 value rows × K) as fp32 wgmma accumulators
for the whole sequence and, per chunk, in the transposed form (value rows are wgmma's M):

  dVnᵀ = dOᵀ·Mqk + dhᵀ·k_to_endᵀ        dh (the registers) as bf16 hi + lo; dOᵀ by ldmatrix.trans
  dXᵀ  = dVnᵀ·A                         dVnᵀ as bf16 hi + lo
  dSᵀ ← dSᵀ⊙decay_total + dOᵀ·q_decayed − (β⊙dX)ᵀ·k_decayed

Before a chunk's step it hands dh, the gradient of the state leaving the chunk (dhᵀ [V, K], bf16 hi + lo), to
ws_dstate_hi / _lo by bulk tensor stores; after the first chunk, dh0. Its entry point dstate_starts is the C pass of
a cut training call (docs/segments.md §6): the same walk with no dh stored, the dS entering each segment written
to dstate_start.

chunk_bwd — everything else of the chunk's backward, chunk-parallel: one CTA per (chunk, value head) from S_c (the
forward's ws_states) and dh, mma16's recurrence_bwd outputs (docs/math.md §7.3–7.4) at chunk 64 on wgmma. So the
only serial kernel is the chain.

prepare_bwd — token-parallel, one CTA per (chunk, q/k head): chunk_bwd's products to input gradients by 16-row
blocks (docs/math.md §7.10) and the emitted prologue adjoint; param_reduce (mma16's) sums the head parameters'
per-chunk partials in a fixed order.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...model import Barrier, Buffer, Kernel, Param, Pipeline, Role, Step, Workspace, kernel_options
from ..base import Facts, prepare_bwd_io, seq_params, workspace_params
from .forward import (BLOCK, CHUNK, CONSUMER_REGS, PRODUCER_REGS, STAGES, V_ROWS, chunk_ring, decay_width,
                      diagonal_form, ring_maps, rows_map, tile_map)

CHAIN_RING = ("q_decayed", "k_decayed", "k_to_end", "A", "Mqk", "dO", "decay_total", "beta")
CHAIN_WORKSPACES = ["ws_q_decayed", "ws_k_decayed", "ws_k_to_end", "ws_A", "ws_Mqk", "ws_decay_total", "ws_beta"]


@kernel_options
@dataclass
class Dstate64Options:
    slices: int              # CTAs per (sequence, value head), each 64 value rows (blockIdx.z)
    stages: int
    state_layout: str
    varlen: bool
    decay_width: int


CHUNK_GRADS = ("ws_d_q_decayed", "ws_d_k_decayed", "ws_d_k_to_end", "ws_dMqk", "ws_dMkk", "ws_d_decay_total",
               "ws_dbeta")


def backward_workspaces(K: int, V: int, head_params: list[tuple[str, bool]]) -> list[Workspace]:
    """dstate -> chunk_bwd -> prepare_bwd -> param_reduce (head_params: (name, has a K row)). dh, the gradient of
    the state leaving each chunk (dht, or zero, for a sequence's last), goes as dhᵀ [V, K] in bf16 hi + lo (dh ≈ hi
    + lo to ~16 bits): fp32's bytes in the form the products that read it take — bf16 operand tiles a bulk tensor
    copy loads, nothing to convert. chunk_bwd's outputs are those of mma16's recurrence_bwd (docs/math.md §7.4) at
    chunk 64: the three [C, K] terms in bf16 (half the bytes of the largest round trip of the step; the gradients
    stay below FLA's error: benchmarks/probe/precision_bwd_ws.py), the rest fp32 (dMqk and dMkk in bf16 would not)."""
    C, to = CHUNK, ["prepare_bwd"]
    parts = [Workspace(f"ws_part_{name}", ("chunks", "HV", K) if row else ("chunks", "HV"), "f32", "prepare_bwd",
                       ["param_reduce"], f"this chunk's rows of d{name}, summed in a fixed order")
             for name, row in head_params]
    return [*(Workspace(f"ws_dstate_{part}", ("chunks", "HV", V, K), "bf16", "dstate", ["chunk_bwd"],
                        f"dhᵀ, bf16 {part} part") for part in ("hi", "lo")),
            Workspace("ws_d_q_decayed", ("chunks", "HV", C, K), "bf16", "chunk_bwd", to, "dO·Sᵀ"),
            Workspace("ws_d_k_decayed", ("chunks", "HV", C, K), "bf16", "chunk_bwd", to, "−(β⊙dX)·Sᵀ"),
            Workspace("ws_d_k_to_end", ("chunks", "HV", C, K), "bf16", "chunk_bwd", to, "Vn·dhᵀ"),
            Workspace("ws_dMqk", ("chunks", "HV", C, C), "f32", "chunk_bwd", to, "tril₀(dO·Vnᵀ)"),
            Workspace("ws_dMkk", ("chunks", "HV", C, C), "f32", "chunk_bwd", to, "−tril₋₁(Aᵀ·dA·Aᵀ), dA = dVn·Xᵀ"),
            Workspace("ws_d_decay_total", ("chunks", "HV", K), "f32", "chunk_bwd", to, "e^Γl⊙rowsum(S⊙dh)"),
            Workspace("ws_dbeta", ("chunks", "HV", C), "f32", "chunk_bwd", to, "Σ_v dX⊙(v − k_decayed·S)"), *parts]


def dstate(*, K: int, V: int, KD: int, varlen: bool, state_layout: str, ws: list[Workspace]) -> Kernel:
    slices = V // V_ROWS
    dw = decay_width(KD)
    ring = chunk_ring(K, dw, 1, "dO")
    stage_bytes = sum(b.stage_bytes for b in ring)
    dtypes = {w.name: w.dtype for w in ws}
    # dh staged for the bulk tensor stores: a 64-column tile each of hi and lo per 64 key columns, two in turn (the
    # stores of one chunk read theirs while the next chunk fills the other)
    staging = Buffer("dh_out", (2 * (K // 64), V_ROWS, 64), "bf16", stages=2, align=1024, swizzle=128)
    steps = [
        Step("load", "producer", "tma", writes=list(CHAIN_RING), waits=["free"], arrives=["ready"], loop=True,
             global_reads=[*CHAIN_WORKSPACES, "dout"],
             note="one elected thread, chunks last to first: expect the stage's bytes, then its boxes and copies"),
        Step("dstate_in", "consumer", "wgmma_acc", global_reads=["dht"], note="dSᵀ rows of this group from dht or 0"),
        Step("dh_out", "consumer", "wgmma_acc", writes=["dh_out"], reads=["dh_out"],
             global_writes=["ws_dstate_hi", "ws_dstate_lo"],
             waits=["dh_staged", "ready"], loop=True,
             note="dhᵀ, the gradient of the state leaving the chunk, split bf16 hi + lo: the dvn step's register "
                  "operands, and staged for one thread's bulk tensor stores into ws_dstate_hi / _lo"),
        Step("dvn", "consumer", "wgmma_acc", reads=["dO", "Mqk", "k_to_end"], loop=True,
             note="dVnᵀ = dOᵀ·Mqk + (dh_hi + dh_lo)ᵀ·k_to_endᵀ: dOᵀ by ldmatrix.trans, Mqk read N-major"),
        Step("dx", "consumer", "wgmma_acc", reads=["A"], loop=True,
             note="dXᵀ = dVnᵀ·A: A read N-major, dVnᵀ split bf16 hi + lo"),
        Step("dstate_update", "consumer", "wgmma_acc", reads=["beta", "decay_total", "q_decayed", "k_decayed"],
             arrives=["free"], loop=True,
             note="dSᵀ ← dSᵀ⊙decay_total + dOᵀ·q_decayed − (β⊙dX)ᵀ·k_decayed (both read N-major, β⊙dX formed "
                  "here); the stage is released"),
        Step("dstate_out", "consumer", "wgmma_acc", global_writes=["grad_h0", "dstate_start"],
             note="dh0: dS after the first chunk (dht, or zero, for an empty sequence); the C pass of a cut training "
                  "call (entry dstate_starts: no dh stored, dht = 0) writes it to dstate_start"),
    ]
    params = ring_maps(K, V, "dO", "dout") + [Param(n, "ptr", dtypes[n]) for n in ("ws_decay_total", "ws_beta")]
    params += [tile_map(f"map_dh_{part}", f"ws_dstate_{part}", K, f"chunks * HV * {V}", "dh_out")
               for part in ("hi", "lo")]
    params += [Param("dht", "ptr", "f32"), Param("grad_h0", "ptr", "f32", const=False),
               Param("dstate_start", "ptr", "f32", const=False), *seq_params(varlen)]
    return Kernel(
        name="dstate", kind="dstate", template="wgmma64/dstate.cu.j2", direction="backward",
        grid=["N", "HV", slices], threads=256, min_ctas_per_sm=1,
        roles=[Role("producer", (0, 4), work=["load"]),
               Role("consumer", (4, 8), work=[s.name for s in steps if s.role == "consumer"])],
        buffers=[*ring, staging],
        barriers=[Barrier("ready", "mbarrier", 1, [("producer", "elected")], ["consumer"], stages=STAGES,
                          tx_bytes=stage_bytes, note="arrive.expect_tx by the elected producer thread"),
                  Barrier("free", "mbarrier", 128, [("consumer", "thread")], ["producer"], stages=STAGES),
                  Barrier("dh_staged", "named", 128, [("consumer", "thread")], ["consumer"], id=1,
                          note="dh is staged (and the stores of the chunk before have read the other staging)")],
        pipelines=[Pipeline("chunk_ring", STAGES, "producer", ["consumer"], "ready", "free", list(CHAIN_RING),
                            copy="tma")],
        steps=steps, params=params, options=Dstate64Options(slices, STAGES, state_layout, varlen, dw),
        # the C pass of a cut training call (docs/segments.md §6): every segment from dht = 0, no dh stored
        entries=["dstate_starts"],
        note="head-parallel, chunks in reverse: the backward's only serial pass, dS in fp32 registers")


@kernel_options
@dataclass
class ChunkBwd64Options:
    consumers: int           # consumer warp groups, each owning 64 value rows in phase 1
    varlen: bool
    decay_width: int


def chunk_bwd(*, K: int, V: int, KD: int, varlen: bool, state_layout: str, ws: list[Workspace]) -> Kernel:
    """Chunk-parallel: one CTA per (64-token chunk, value head) from S_c (the forward's ws_states) and dh (dstate's),
    everything of the chunk's backward but the dS chain — mma16's recurrence_bwd outputs (docs/math.md §7.3–7.4)
    at chunk 64, every product a wgmma tile. A producer warp group loads the chunk once (one mbarrier with its
    transaction bytes); consumer warp group g owns value rows 64g.. in phase 1, in the transposed form of the
    forward and of dstate (Pᵀ, Xᵀ, Vnᵀ, dVnᵀ, dXᵀ: value rows are wgmma's M), and hands Vnᵀ, Xᵀ, dVnᵀ, (β⊙dX)ᵀ
    to shared memory as bf16 [V][C] tiles; phase 2 (token rows are M) reads them with the descriptors' transpose
    bits: the C×C chain (dMqk, dA, dMkk) on group 0, the [C][K] products on the last group."""
    C = CHUNK
    consumers = V // V_ROWS
    threads = 128 * (1 + consumers)
    dw = decay_width(KD)
    ka = K // 64
    tile = dict(align=1024, swizzle=128)
    loaded = [Buffer("k_decayed", (ka, C, 64), "bf16", alias="kd_then_T", **tile),
              Buffer("k_to_end", (ka, C, 64), "bf16", alias="kr_then_bdXT", **tile),
              Buffer("A", (C, C), "bf16", **tile), Buffer("Mqk", (C, C), "bf16", **tile),
              Buffer("v", (consumers, C, V_ROWS), "bf16", alias="v_then_XT", **tile),
              Buffer("dO", (consumers, C, V_ROWS), "bf16", **tile),
              Buffer("ST", (ka, V, 64), "bf16", **tile), Buffer("dh_hi", (ka, V, 64), "bf16", **tile),
              Buffer("dh_lo", (ka, V, 64), "bf16", **tile),
              Buffer("beta", (C,), "f32", align=16), Buffer("decay_total", (dw,), "f32", align=16)]
    tx = sum(b.bytes for b in loaded)
    handed = [Buffer("XT", (consumers, V_ROWS, C), "bf16", alias="v_then_XT", **tile),
              Buffer("VnT", (consumers, V_ROWS, C), "bf16", **tile),
              Buffer("dVnT", (consumers, V_ROWS, C), "bf16", **tile),
              Buffer("bdXT", (consumers, V_ROWS, C), "bf16", alias="kr_then_bdXT", **tile),
              Buffer("T", (2, C, C), "bf16", alias="kd_then_T", **tile),
              Buffer("dbeta_part", (4 * consumers, C), "f32"), Buffer("dgT_part", (128 * consumers // K, K), "f32")]
    rows = "chunks * HV * 64"
    vrows = f"chunks * HV * {V}"
    params = [tile_map("map_k_decayed", "ws_k_decayed", K, rows, "k_decayed"),
              tile_map("map_k_to_end", "ws_k_to_end", K, rows, "k_to_end"),
              tile_map("map_A", "ws_A", C, rows, "A"), tile_map("map_Mqk", "ws_Mqk", C, rows, "Mqk"),
              rows_map(V, "v", "v"), rows_map(V, "dO", "dout"),
              tile_map("map_ST", "ws_states", K, vrows, "ST"),
              tile_map("map_dh_hi", "ws_dstate_hi", K, vrows, "dh_hi"),
              tile_map("map_dh_lo", "ws_dstate_lo", K, vrows, "dh_lo"),
              *workspace_params(("ws_beta", "ws_decay_total"), True, ws),
              *seq_params(varlen), Param("grad_v", "ptr", "bf16", const=False),
              *workspace_params(CHUNK_GRADS, False, ws)]
    steps = [
        Step("load", "producer", "tma", writes=[b.name for b in loaded], arrives=["loaded"],
             global_reads=["ws_k_decayed", "ws_k_to_end", "ws_A", "ws_Mqk", "v", "dout", "ws_states", "ws_dstate_hi",
                           "ws_dstate_lo", "ws_beta", "ws_decay_total"],
             note="one elected thread: expect the chunk's bytes, then its boxes and copies (one stage: one chunk)"),
        Step("recompute", "consumer", "wgmma_acc", reads=["ST", "k_decayed", "v", "beta", "A"], waits=["loaded"],
             note="Pᵀ = vᵀ − Sᵀ·k_decayedᵀ, Xᵀ = β⊙Pᵀ, Vnᵀ = Xᵀ·Aᵀ (Xᵀ split bf16 hi + lo)"),
        Step("dvn", "consumer", "wgmma_acc", reads=["dO", "Mqk", "dh_hi", "dh_lo", "k_to_end"],
             note="dVnᵀ = dOᵀ·Mqk + (dh_hi + dh_lo)ᵀ·k_to_endᵀ"),
        Step("dx", "consumer", "wgmma_acc", reads=["A", "beta"], writes=["dbeta_part"], global_writes=["grad_v"],
             note="dXᵀ = dVnᵀ·A (dVnᵀ split hi + lo); dv = β⊙dX; this warp's Σ_v dX⊙P"),
        Step("handoff", "consumer", "wgmma_acc", reads=["ST", "dh_hi", "dh_lo"],
             writes=["XT", "VnT", "dVnT", "bdXT", "dgT_part"], waits=["tiles_free"], arrives=["handoff"],
             note="Xᵀ, Vnᵀ, dVnᵀ, (β⊙dX)ᵀ as bf16 [V][C] tiles (over v and k_to_end, whose readers are done); "
                  "this thread's Σ_v S⊙dh"),
        Step("sums", "consumer", "thread", reads=["dbeta_part", "dgT_part", "decay_total"], waits=["handoff"],
             global_writes=["ws_dbeta", "ws_d_decay_total"],
             note="the partials of Σ_v dX⊙P and of e^Γl⊙Σ_v S⊙dh added in a fixed order"),
        Step("c_chain", "consumer", "wgmma_acc", reads=["dO", "VnT", "dVnT", "XT", "A", "T"], writes=["T"],
             waits=["t_staged"], global_writes=["ws_dMqk", "ws_dMkk"],
             note="group 0: dMqk = tril₀(dO·Vnᵀ), dA = dVn·Xᵀ, T = dA·Aᵀ (dA split hi + lo), dMkk = −tril₋₁(Aᵀ·T) "
                  "(T staged as bf16 hi + lo tiles)"),
        Step("k_products", "consumer", "wgmma_acc", reads=["dO", "ST", "bdXT", "VnT", "dh_hi", "dh_lo"],
             global_writes=["ws_d_q_decayed", "ws_d_k_decayed", "ws_d_k_to_end"],
             note="the last group: dO·Sᵀ, −(β⊙dX)·Sᵀ, Vn·(dh_hi + dh_lo)ᵀ, each [C][K], stored as bf16"),
    ]
    return Kernel(
        name="chunk_bwd", kind="chunk_bwd", template="wgmma64/chunk_bwd.cu.j2", direction="backward",
        grid=["chunks", "HV"], threads=threads, min_ctas_per_sm=1,
        roles=[Role("producer", (0, 4), work=["load"], regs=PRODUCER_REGS, setmaxnreg=consumers > 1),
               Role("consumer", (4, 4 + 4 * consumers), work=[s.name for s in steps if s.role == "consumer"],
                    regs=CONSUMER_REGS, setmaxnreg=consumers > 1)],
        buffers=loaded + handed,
        barriers=[Barrier("loaded", "mbarrier", 1, [("producer", "elected")], ["consumer"], tx_bytes=tx,
                          note="arrive.expect_tx by the elected producer thread; one phase (one chunk)"),
                  Barrier("tiles_free", "named", 128 * consumers, [("consumer", "thread")], ["consumer"], id=1,
                          note="every group's phase-1 reads of k_to_end are done (its tile g becomes (β⊙dX)ᵀ's)"),
                  Barrier("handoff", "named", 128 * consumers, [("consumer", "thread")], ["consumer"], id=2,
                          note="the handed tiles and partial sums are written (and fenced for the async proxy)"),
                  Barrier("t_staged", "named", 128, [("consumer", "group")], ["consumer"], id=3,
                          note="consumer group 0 alone (the one running the C×C chain): T staged for Aᵀ·T")],
        pipelines=[], steps=steps, params=params, options=ChunkBwd64Options(consumers, varlen, dw),
        note="chunk-parallel: one CTA per (chunk, value head); surplus CTAs of the chunk upper bound exit")


PREPARE_BWD_THREADS = 256
PREPARE_BWD_LANES_PER_ROW = 16   # the emitted blocks' row mapping: 16 lanes per token row, threads / 16 rows a pass
FMA_PAD = 8                      # CUDA-core [C][K] tiles: rows K + 8 floats apart
MMA_PAD = 4                      # tensor-core [C][K] tiles: K + 4 floats, a B fragment's four rows meet no bank twice
PAIR_PAD = 4                     # CUDA-core [C][C] tiles: rows C + 4 floats apart
SPLIT_PAD = 8                    # bf16 [C][C] tiles: rows C + 8 apart, 16-byte rows for ldmatrix, conflict-free
MID = BLOCK // 2 - 1             # the row of a 16-row block its factors are taken about (7 rows before, 8 after)


@kernel_options
@dataclass
class PrepareBwd64Options:
    lanes_per_row: int       # emitted blocks: lanes per token row (threads / 16 rows a pass)
    kpt: int                 # emitted blocks: channels per lane
    contractions: str        # "mma": tensor cores, a warp per 8 channels; "fma": CUDA cores, a thread per channel
    parts: int               # "fma": threads per channel, each over whole 16-row blocks
    decay_kind: str
    diagonal: str            # forward.diagonal_form: how the diagonal blocks' pair factors are formed
    varlen: bool
    mid: int                 # "mma" with a per-channel decay: the row of a 16-row block its factors are taken about


def contractions_of(diagonal: str) -> str:
    """Where the contractions run. On tensor cores ("mma": bf16 hi + lo products, A by ldmatrix from tiles split
    once) where every block's factors can be taken outside the products: a per-head decay ("scalar") has one factor
    per pair, e^(Γi−Γj) ≤ 1, folded into dMqk and dMkk first; a per-channel decay with the forward's bound
    ("factored") is factored about each block's middle row, e^(Γi−Γj) = U_i·D_IJ·W_j with U, W ≤ e^(8·|lb|) (2^58
    at lb = −5, ≈ 2^63 at the weakest bound accepted), so the products overflow only where |dMqk| or |dMkk| passes
    ≈ 2^60 (non-finite gradients, never silently wrong ones). Otherwise ("running") on CUDA cores, a thread per
    (channel, block), with running products of α inside the diagonal blocks: nothing bounds k̂·e^(Γm−Γj) there."""
    return "fma" if diagonal == "running" else "mma"


def prepare_bwd_threads(K: int, f: Facts) -> int:
    """On tensor cores a warp per 8 channels (16 warps at K = 128: the kernel is bound by latency at one CTA per
    SM, so it takes all the warps its registers allow); on CUDA cores 256 threads."""
    return 32 * K // 8 if contractions_of(diagonal_form(f)) == "mma" else PREPARE_BWD_THREADS


def prepare_bwd_ctas(K: int, f: Facts) -> int:
    """CTAs per SM. The tensor-core form at K = 64 has 8 warps, which alone on an SM wait on their own barriers and
    loads; with dgc over the split dM tiles (dead once the products are done: one more barrier) two CTAs fit in
    registers and shared memory, giving the SM the 16 warps that K = 128's one CTA has."""
    return 2 if contractions_of(diagonal_form(f)) == "mma" and prepare_bwd_threads(K, f) <= 256 else 1


def max_head_params(K: int, f: Facts) -> int:
    """Each head parameter stages its per-row partials in a slice, as tall as a pass of the row mapping, of the two
    [64][K] factor tiles (Q's then P's, or W's then U's on tensor cores), free once the contractions are done."""
    return 2 * CHUNK // (prepare_bwd_threads(K, f) // PREPARE_BWD_LANES_PER_ROW)


def prepare_bwd(*, K: int, varlen: bool, f: Facts, ws: list[Workspace]) -> Kernel:
    """Token-parallel, one CTA per (64-token chunk, q/k head), its G value heads in a loop: chunk_bwd's products
    to input gradients (docs/math.md §7.5–7.10). The contractions with e^(Γi−Γj) run by 16-row blocks (math.md
    §7.10) in the form contractions_of chose (docs/kernels.md §4.4). The emitted prologue and its adjoint run on
    the row mapping of mma16's kernel, in passes of threads / 16 rows."""
    C, NB = CHUNK, CHUNK // BLOCK
    diagonal = diagonal_form(f)
    contractions = contractions_of(diagonal)
    mma = contractions == "mma"
    threads = prepare_bwd_threads(K, f)
    ctas = prepare_bwd_ctas(K, f)
    dgc_alias = "dM_then_dgc" if ctas == 2 else None    # two CTAs per SM: dgc over the split dM tiles
    warps = threads // 32
    parts = threads // K
    factored = diagonal == "factored"
    params, qk, qk_grads = prepare_bwd_io(f, CHUNK_GRADS, ws)
    params += seq_params(varlen)
    head_params = f.head_params
    tile = dict(ld=K + (MMA_PAD if mma else FMA_PAD))
    row_side, key_side = ("U", "W") if mma else ("P", "Q")
    buffers = [Buffer("q_hat", (C, K), "f32", **tile), Buffer("k_hat", (C, K), "f32", **tile),
               Buffer(row_side, (C, K), "f32", **tile), Buffer(key_side, (C, K), "f32", **tile),
               Buffer("dgc", (C, K), "f32", alias=dgc_alias, **tile),
               Buffer("beta", (C,), "f32"),
               Buffer("kR_part", (C, warps if mma else K // 32), "f32")]
    if mma:
        # the split tiles dMqk hi, lo, dMkk hi, lo, one after the other
        buffers += [Buffer("dM", (4, C, C), "bf16", ld=C + SPLIT_PAD, alias=dgc_alias)]
        buffers += [Buffer("kbr_total", (K,), "f32")]
        # factored: Γm(I), Γm(I) − Γm(I−1), Γl − Γm(I) per block and channel (the last two from sums within blocks)
        # per-head: Γ, e^Γ and e^(Γl−Γ) per row
        buffers += [Buffer("Gm", (3 * NB, K), "f32")] if factored else [Buffer("gamma", (3, C), "f32")]
    else:
        buffers += [Buffer("dMqk", (C, C), "f32", ld=C + PAIR_PAD), Buffer("dMkk", (C, C), "f32", ld=C + PAIR_PAD),
                    Buffer("T", (NB, K), "f32"), Buffer("block_dgc", (NB, K), "f32"),
                    Buffer("block_kbr", (NB, K), "f32")]
    seq = [p.name for p in seq_params(varlen) if p.kind == "ptr"]
    steps = [
        Step("prefetch", "all", "thread0",
             note="one thread asks L2 for the chunk's gradients of every value head (bulk prefetches, not "
                  "waited for): the later plain loads meet L2"),
        Step("prologue_qk", "all", "row", writes=["q_hat", "k_hat"], global_reads=qk + seq,
             note="emitted, in passes of threads / 16 rows: q̂, k̂ of the q/k head (rows past the chunk's end "
                  "zero)"),
    ]
    grads = ["ws_d_q_decayed", "ws_d_k_decayed", "ws_d_k_to_end"]
    prologue_v = Step("prologue_v", "all", "row", writes=[row_side, "beta"],
                      waits=["sync"] if mma else [], loop=True,
                      global_reads=[p.name for p in f.leaves if p.name not in qk],
                      note=f"emitted, per value head: a (into {row_side}'s tile; a per-head decay copied to every "
                           "channel), β")
    if mma:
        factors = ("U_i = e^(Γi−Γm(I)), W_i = e^(Γm(I)−Γi) about row m(I) = 16I + " + str(MID) + " of each block "
                   "(sums within the block); Gm: per block Γm(I), Γm(I)−Γm(I−1) and Γl−Γm(I)" if factored
                   else "one warp scans Γ, the per-head decay's cumsum, down the chunk (a shuffle scan, two rows per "
                        "lane) into gamma with each row's e^Γi and e^(Γl−Γi); then every thread copies them into U's "
                        "and W's tiles (U_i = e^Γi, W_i = e^(Γl−Γi) in every channel)")
        steps += [
            prologue_v,
            Step("block_factors", "all", "column" if factored else "scan_then_thread",
                 reads=["U"] if factored else ["U", "gamma"],
                 writes=["U", "W", "Gm" if factored else "gamma"], waits=["sync"], loop=True,
                 note=("a thread per channel down the chunk: " if factored else "") + factors),
            Step("load_grads", "all", "thread", reads=[] if factored else ["gamma"],
                 writes=["dM"], waits=["sync"], loop=True,
                 global_reads=["ws_dMqk", "ws_dMkk"],
                 note="masked to tril₀ and tril₋₁" + ("" if factored else ", × e^(Γi−Γj) ≤ 1 (the per-head decay's "
                                                      "pair factors)") + ", split once into bf16 hi + lo"),
            Step("branch_grads", "all", "warp_channels",
                 reads=["U", "W", "q_hat", "k_hat", "dM", "beta", *(["Gm"] if factored else [])],
                 waits=["sync"], loop=True, global_reads=grads,
                 note="warp w, channels [8w, 8w + 8) of every row: b_q and R, then b_ki, as bf16 hi + lo "
                      "mma.m16n8k16 products, every row block's sums live, each block's operand built once: dMqk, "
                      "dMkk (or their transposes) by ldmatrix, the other side built in registers "
                      + ("(k̂·W; scale·q̂·U, β·k̂·U), the blocks between by a Horner walk of the accumulators "
                         "(× e^(Γm(J)−Γm(J−1)) per channel), the rows × U or W after" if factored
                         else "(raw k̂; scale·q̂, β·k̂)")
                      + "; every block's chunk gradients asked for before the products"),
            Step("branch_elements", "all", "warp_channels",
                 reads=["U", "W", "q_hat", "k_hat", "beta", *(["Gm"] if factored else [])],
                 writes=["dgc", "kR_part", "kbr_total"], waits=["sync"] if ctas == 2 else [], loop=True,
                 note="each block's elements from the products' sums and the chunk gradients: b_kd, b_kr; dq̂ += "
                      "b_q, dk̂ += Σb (registers); dgc; Σ_rows k̂⊙b_kr; Σ over the warp's channels of k̂⊙R"
                      + ("; after a barrier, since dgc takes the split dM tiles' place" if ctas == 2 else "")),
            Step("reverse_cumsum", "all", "warp_channels", reads=["dgc", "kbr_total"], writes=["dgc"], loop=True,
                 global_reads=["ws_d_decay_total"],
                 note="lane c of warp w, channel 8w + c: d_decay = suffix sum + d_decay_total + Σ_rows k̂⊙b_kr")]
    else:
        steps += [
            Step("load_terms", "all", "column_blocks", waits=["sync"], loop=True, global_reads=grads,
                 note="the own rows' d_q_decayed, d_k_decayed, d_k_to_end into registers, issued first: their "
                      "latency hides behind the steps up to grad_terms"),
            prologue_v,
            Step("load_grads", "all", "thread", writes=["dMqk", "dMkk"], global_reads=["ws_dMqk", "ws_dMkk"],
                 loop=True, note="masked to tril₀ and tril₋₁"),
            Step("block_factors", "all", "column_blocks", reads=["P"], writes=["P", "Q", "T"], waits=["sync"],
                 loop=True, note="per (channel, block): α = e^a, P_i = Π α down the block (in place), Q_j = Π α "
                                 "after j up the block, the block total T"),
            Step("grad_terms", "all", "column_blocks", reads=["P", "Q", "T", "q_hat", "k_hat"],
                 writes=["dgc", "block_kbr"], waits=["sync"], loop=True,
                 note="the loaded gradients' terms of the own rows: b_kr = e^(Γl−Γi)·d_k_to_end whole, "
                      "E_i·d_q_decayed and E_i·d_k_decayed into dq̂, dk̂ (registers) and dgc; Σ_rows k̂⊙b_kr"),
            Step("branch_grads", "all", "column_blocks",
                 reads=["P", "Q", "T", "q_hat", "k_hat", "dMqk", "dMkk", "beta", "dgc"],
                 writes=["dgc", "block_dgc", "kR_part"], loop=True,
                 note="b_q, R, b_ki of the own blocks (blocks before and after by FMA with factors ≤ 1, the "
                      "diagonal one by running products of α); dq̂, dk̂ += their parts (registers); dgc completed; "
                      "its block sums; Σ over each warp's channels of k̂⊙R"),
            Step("reverse_cumsum", "all", "column_blocks", reads=["dgc", "block_dgc", "block_kbr"], writes=["dgc"],
                 waits=["sync"], loop=True, global_reads=["ws_d_decay_total"],
                 note="d_decay = suffix sum in the chunk (later blocks by their sums) + d_decay_total + "
                      "Σ_rows k̂⊙b_kr")]
    steps.append(
        Step("adjoint_v", "all", "row", reads=["dgc", "kR_part"],
             writes=[key_side, row_side][:1 + (len(head_params) > max_head_params(K, f) // 2)] if head_params else [],
             waits=["sync"], loop=True, global_reads=["ws_dbeta"],
             global_writes=[p.name for p in params if p.name.startswith("grad_") and p.name not in qk_grads],
             note="emitted, in passes: the DSL backward graph per value head, seeded with d_decay and dβ = "
                  "chunk_bwd's part + Σ k̂⊙R; each head parameter's per-token terms summed over this thread's rows "
                  f"into a pass-tall slice of {key_side}'s tile (then {row_side}'s)"))
    if head_params:
        steps.append(Step("param_sums", "all", "column", reads=[key_side, row_side], waits=["sync"], loop=True,
                          global_writes=[f"ws_part_{n}" for n, _ in head_params],
                          note="each head parameter's row partials (a pass's rows) added in row order: the "
                               "chunk's partial"))
    steps += [
        Step("seeds", "all", "warp_channels" if mma else "column_blocks", writes=["dgc", key_side], waits=["sync"],
             note=f"the GVA-summed dq̂, dk̂ from the registers into the tiles dgc and {key_side}"),
        Step("adjoint_qk", "all", "row", reads=["q_hat", "k_hat", "dgc", key_side], waits=["sync"],
             global_writes=qk_grads,
             note="emitted, in passes: the q/k adjoint (L2 norm) seeded with the GVA-summed dq̂, dk̂"),
    ]
    # per value head: loop top, then on tensor cores a, block factors, the split tiles, (with dgc over the split
    # tiles) the products, branch grads; on CUDA cores a and the grads loaded, block factors, branch grads, d_decay;
    # the parameter rows
    phases = 5 + bool(head_params) + (ctas == 2)
    return Kernel(
        name="prepare_bwd", kind="prepare_bwd", template="wgmma64/prepare_bwd.cu.j2", direction="backward",
        grid=["chunks", "H"], threads=threads, min_ctas_per_sm=ctas,
        roles=[Role("all", (0, warps), work=[s.name for s in steps], regs=min(255, 65536 // (threads * ctas)))],
        buffers=buffers,
        barriers=[Barrier("sync", "cta", threads, [("all", "thread")], ["all"], phases_per_iter=phases,
                          note="__syncthreads per value head: loop top, "
                               + ("a, block factors, the split tiles, "
                                  + ("the products (dgc over the split tiles), " if ctas == 2 else "")
                                  + "branch grads" if mma else
                                  "a and the grads loaded, block factors, branch grads, d_decay")
                               + (", the parameter rows" if head_params else "")
                               + "; twice after the loop (the seeds)")],
        pipelines=[], steps=steps, params=params,
        options=PrepareBwd64Options(PREPARE_BWD_LANES_PER_ROW, K // PREPARE_BWD_LANES_PER_ROW,
                                    contractions, parts, f.decay_kind, diagonal, varlen, MID),
        # the chunk gradients of all four row blocks held from before branch_grads' products: at the 128-register cap
        # ptxas spills one word in the factored form (lower-bound gate, K = 128), and the kernel is 7.7% shorter
        # than with the loads one block ahead and no spill (benchmarks/NOTES.md, session 20, run 2)
        spill_allowance=8 if diagonal == "factored" and K == 128 else 0,
        note="token-parallel over (chunk, q/k head); loops over the G value heads of the group; surplus CTAs exit")
