"""mma16 backward kernels (templates/mma16/): the recurrence once more in "store_states" mode ("states",
writing S_c, the state entering each chunk), dstate_pass (the serial dS chain alone, checkpointed every
BLOCK_CHUNKS chunks), recurrence_bwd (every block of chunks at once from its checkpoint), prepare_bwd and the
deterministic parameter reduction. The math is kdagen.reference.chunked.chunk_delta_rule_bwd_k2 and
kdagen.reference.prepare, split where the reference splits it (docs/math.md, docs/kernels.md §1).

dstate_pass, per (sequence, value head), chunks last to first: only what the next chunk's dS needs (dVn, dX,
the dS update; no S_c, no output but the checkpoints), the next chunk's tiles prefetched into a second stage
while this one computes. At the top of each block's last chunk it stores dS (fp32, as dSᵀ [V, K]) in
ws_dstate_blocks: the gradient of the state leaving that block (dht or zero for a sequence's last block). It
stops at block 0's checkpoint: the chunks of block 0 are recurrence_bwd's. Its further entry point dstate_starts
(the C pass of a training call cut into segments, docs/segments.md §6) writes no checkpoint, runs block 0 too and
writes the dS entering the sequence into dstate_start.

recurrence_bwd, per (block of BLOCK_CHUNKS chunks, value head), its chunks last to first from the block's
checkpoint — the same dS chain as dstate_pass, operation for operation, so the gradients are bitwise those of
one CTA walking the whole sequence. V/16 warps, no producer. All threads load the chunk (cp.async and plain
loads), then three phases separated by __syncthreads (barrier "sync"):
  phase V  warp w owns value rows 16w..16w+15: recompute Vn from S_c; dVn, dX, dv; partial sums of dβ
           and of rowsum(S⊙dh); dSᵀ (fp32 registers, the whole sequence) ← dSᵀ⊙gte + dOᵀ·qd − (β⊙dX)ᵀ·kd
  phase K  warp w owns K/(V/16) key columns: dO·Sᵀ, −(β⊙dX)·Sᵀ, Vn·dhᵀ; warp 0 dMqk, warp 1 dA;
           fixed-order sums of the dβ and dgte partials over the warps
  phase A  one thread per element: dMkk = −tril₋₁(Aᵀ·dA·Aᵀ) in fp32
It writes dv and dh0 directly, and per (chunk, head) the gradients of the derived tensors for prepare_bwd.

prepare_bwd, per (chunk, q/k head), C·16 threads (16 lanes per token row), loops over the G value heads of the
group: recomputes the prologue and Γ, forms b_q, b_kd, b_ki, b_kr (the e^(Γi−Γj) contractions of
dMqk/dMkk), dgc, the reverse cumsum plus the chunk-total term, then the prologue adjoint emitted from the
DSL backward graph per value head and, after the GVA sum, for q/k. A head parameter's gradient leaves the
adjoint as a per-token term: prepare_bwd sums it over the chunk's rows (fixed order) into a per-chunk partial,
param_reduce over chunks (fixed order) — bitwise reproducible, no atomics.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...model import WARP, Barrier, Buffer, Kernel, Param, Role, Step, Workspace, kernel_options
from ..base import Facts, grad_param, prepare_bwd_io
from .forward import BLOCK_CHUNKS, BLOCK_SLOTS, PAD

PREPARE_BWD_LANES_PER_ROW = 16       # prepare_bwd: 16 lanes share a token row, K/16 channels each
# prepare_bwd CTAs per SM, by head dim: its per-thread arrays hold K/16 channels; ptxas fits K = 128 in 128
# registers and K = 64 in 80 without spilling (left to pick on its own, it spills at K = 64 to reach 4 CTAs)
PREPARE_BWD_CTAS_PER_SM = {64: 3, 128: 2}
REDUCE_ROWS = 8              # param_reduce: 8 rows of 32 lanes, row y sums chunks y, y+8, ...
STATES_DTYPE = "bf16"        # S_c as states writes it: recurrence_bwd's mma operand is bf16 either way
# dstate_pass: value rows per CTA, and warps per CTA. The value columns of dS evolve independently, so a few
# (sequence, head) pairs spread over V/16 times as many CTAs; inside one, a chunk's step is a chain of dependent
# instructions that one warp issues at a fraction of an instruction per cycle (measured: ≈ 2.3 µs per chunk with
# the whole K on one warp), so its key columns go to DSTATE_K_PARTS warps, one per part of the dVn contraction
# (the template's DVN_PARTS, at most K/16: one 16-column step each), whose partial sums meet in shared memory and
# add in a fixed tree order that recurrence_bwd, running every part in one warp, repeats.
DSTATE_V_SLICE = 16
DSTATE_K_PARTS = 4


def dvn_parts(K: int) -> int:
    """Parts of the dVn key contraction, for dstate_pass and recurrence_bwd alike (the same sums, bit for bit)."""
    return min(DSTATE_K_PARTS, K // 16)


RECURRENCE_GRADS = ("ws_d_q_decayed", "ws_d_k_decayed", "ws_d_k_to_end", "ws_dMqk", "ws_dMkk", "ws_d_decay_total",
                    "ws_dbeta")


@kernel_options
@dataclass
class RecurrenceBwdOptions:
    warps: int
    state_layout: str
    order: str               # "reverse": chunks last to first
    block_chunks: int        # chunks per block (recurrence_bwd: one CTA per block; dstate_pass: one checkpoint)
    dvn_parts: int           # parts of the dVn key contraction, summed in dstate_pass's order


@kernel_options
@dataclass
class DstatePassOptions:
    v_slice: int             # value rows per CTA (blockIdx.z picks the slice)
    dvn_parts: int           # warps per 16 value rows, one per part of the key columns
    state_layout: str
    block_chunks: int        # chunks per checkpoint


@kernel_options
@dataclass
class PrepareBwdOptions:
    lanes_per_row: int
    kpt: int
    decay_kind: str


@kernel_options
@dataclass
class ReduceOptions:
    head_params: list        # [{"name": ..., "row": bool}] in parameter order (blockIdx.y)
    rows: int
    chunks: str              # the number of chunks that exist, as a C expression of the kernel's parameters


def backward_workspaces(C: int, K: int, V: int, head_params: list[tuple[str, bool]]) -> list[Workspace]:
    """states, dstate_pass -> recurrence_bwd -> prepare_bwd -> param_reduce. head_params: (name, has a K row)."""
    grads = ["prepare_bwd"]
    ws = [
        Workspace("ws_states", ("chunks", "HV", V, K), STATES_DTYPE, "states", ["recurrence_bwd"],
                  "S entering each chunk, stored [V, K]"),
        Workspace("ws_dstate_blocks", (BLOCK_SLOTS, "HV", V, K), "f32", "dstate_pass", ["recurrence_bwd"],
                  "dSᵀ leaving each block of chunks (dht or zero for a sequence's last block)"),
        Workspace("ws_d_q_decayed", ("chunks", "HV", C, K), "f32", "recurrence_bwd", grads, "dO·Sᵀ"),
        Workspace("ws_d_k_decayed", ("chunks", "HV", C, K), "f32", "recurrence_bwd", grads, "−(β⊙dX)·Sᵀ"),
        Workspace("ws_d_k_to_end", ("chunks", "HV", C, K), "f32", "recurrence_bwd", grads, "Vn·dhᵀ"),
        Workspace("ws_dMqk", ("chunks", "HV", C, C), "f32", "recurrence_bwd", grads, "tril₀(dO·Vnᵀ)"),
        Workspace("ws_dMkk", ("chunks", "HV", C, C), "f32", "recurrence_bwd", grads, "−tril₋₁(Aᵀ·dA·Aᵀ)"),
        Workspace("ws_d_decay_total", ("chunks", "HV", K), "f32", "recurrence_bwd", grads,
                  "e^Γl⊙rowsum(S⊙dh) (per channel)"),
        Workspace("ws_dbeta", ("chunks", "HV", C), "f32", "recurrence_bwd", grads, "Σ_v dX⊙(v − k_decayed·S)"),
    ]
    for name, row in head_params:
        ws.append(Workspace(f"ws_part_{name}", ("chunks", "HV", K) if row else ("chunks", "HV"), "f32", "prepare_bwd",
                            ["param_reduce"], f"this chunk's rows of d{name}, summed in row order"))
    return ws


def _at_cap(kernel: Kernel) -> Kernel:
    """Roles without setmaxnreg get the launch-bound cap: __launch_bounds__ is the only register control."""
    for r in kernel.roles:
        r.regs = kernel.max_regs
    return kernel


def _sync(threads: int, phases: int, note: str) -> Barrier:
    return Barrier("sync", "cta", threads, [("all", "thread")], ["all"], phases_per_iter=phases, note=note)


# The forward workspace tiles the dS chain reads per chunk (dstate_pass and recurrence_bwd alike)
CHAIN_WORKSPACES = ["ws_q_decayed", "ws_k_decayed", "ws_k_to_end", "ws_decay_total", "ws_A", "ws_Mqk", "ws_beta"]


def dstate_pass(*, C: int, K: int, V: int, io: str, state_layout: str, ws: list[Workspace]) -> Kernel:
    """The serial part of the backward alone: dS from the last chunk to block 0's checkpoint, one CTA per
    (sequence, head, DSTATE_V_SLICE value rows), two stages of tiles so the next chunk's copies overlap this
    chunk's tensor-core work; its entry point dstate_starts walks to the start instead (the C pass of a cut
    training call)."""
    vs = DSTATE_V_SLICE
    parts = dvn_parts(K)
    threads = vs // 16 * parts * WARP
    ldk, ldc = K + PAD, C + PAD
    stages = 3               # filled two chunks ahead: a copy has two chain steps to land
    buffers = [
        *[Buffer(n, (C, K), "bf16", ld=ldk, stages=stages) for n in ("k_decayed", "k_to_end", "q_decayed")],
        Buffer("dO", (C, vs), "bf16", ld=vs + PAD, stages=stages),
        *[Buffer(n, (C, C), "bf16", ld=ldc, stages=stages) for n in ("A", "Mqk")],
        Buffer("beta", (C,), "f32", stages=stages), Buffer("decay_total", (K,), "f32", stages=stages),
    ]
    loads = [b.name for b in buffers]
    chain_reads = ["ws_k_decayed", "ws_k_to_end", "ws_q_decayed", "dout", "ws_A", "ws_Mqk", "ws_beta", "ws_decay_total"]
    buffers.append(Buffer("dvn_parts", (vs // 16 * parts, WARP, 8), "f32"))
    steps = [
        Step("dstate_in", "all", "vrows", global_reads=["dht"], note="dSᵀ rows of this warp from dht (or zeros)"),
        Step("dstate_out", "all", "thread", global_writes=["grad_h0"],
             note="an empty sequence's dh0 is its dht (recurrence_bwd has no block there; slice 0 copies it)"),
        Step("prefill", "all", "tile", writes=loads, global_reads=chain_reads,
             note="the pass's first two chunks into the first two stages of the ring"),
        Step("checkpoint", "all", "vrows", global_writes=["ws_dstate_blocks"], loop=True,
             note="at the top of a block's last chunk: dSᵀ, the gradient of the state leaving the block"),
        Step("dvn_part", "all", "kpart", reads=["dO", "Mqk", "k_to_end"], writes=["dvn_parts"], waits=["sync"],
             loop=True, note="this warp's key part of dVnᵀ = dOᵀ·Mqk + (dh_hi + dh_lo)ᵀ·k_to_endᵀ"),
        Step("dvn_sum", "all", "vrows", reads=["dvn_parts"], waits=["sync"], loop=True,
             note="dVnᵀ: the parts added in a fixed tree order (every warp, the same bits)"),
        Step("dx", "all", "vrows", reads=["A", "beta"], loop=True, note="(β⊙dX)ᵀ = diag(β)·(dVnᵀ·A)"),
        Step("dstate", "all", "kpart", reads=["decay_total", "q_decayed", "k_decayed"], loop=True,
             note="this warp's key part of dSᵀ ← dSᵀ⊙decay_total + dOᵀ·q_decayed − (β⊙dX)ᵀ·k_decayed"),
        Step("load", "all", "tile", writes=loads, loop=True, global_reads=chain_reads,
             note="after chunk c's chain, chunk c − 2 into the stage chunk c + 1 left: cp.async tiles (a commit "
                  "group), the fp32 values via registers, stored into their stage at the end of chunk c − 1"),
        Step("start_out", "all", "kpart", global_writes=["dstate_start"],
             note="the C pass (entry dstate_starts, a cut training call): no checkpoints, block 0 run too, and the "
                  "dS entering the sequence written to dstate_start"),
    ]
    dtypes = {w.name: w.dtype for w in ws}
    params = [Param("dout", "ptr", io)]
    params += [Param(n, "ptr", dtypes[n]) for n in CHAIN_WORKSPACES]
    params += [Param("dht", "ptr", "f32"), Param("ws_dstate_blocks", "ptr", "f32", const=False),
               Param("grad_h0", "ptr", "f32", const=False), Param("dstate_start", "ptr", "f32", const=False),
               Param("cu_seqlens", "ptr", "i64"), Param("chunk_offsets", "ptr", "i32"), Param("HV", "i32")]
    return _at_cap(Kernel(
        name="dstate_pass", kind="dstate_pass", template="mma16/dstate_pass.cu.j2", direction="backward",
        grid=["N", "HV", V // vs], threads=threads, min_ctas_per_sm=1,
        roles=[Role("all", (0, threads // WARP), work=[s.name for s in steps])],
        buffers=buffers, barriers=[_sync(threads, 2, "__syncthreads per chunk: its stage landed and the other is "
                                                     "free; the dVn parts are written")],
        pipelines=[], steps=steps, params=params, entries=["dstate_starts"],
        options=DstatePassOptions(vs, parts, state_layout, BLOCK_CHUNKS),
        note="head-parallel, chunks in reverse; the backward's only serial pass: dS in fp32 registers"))


def recurrence_bwd(*, C: int, K: int, V: int, io: str, state_layout: str, ws: list[Workspace]) -> Kernel:
    warps = V // 16
    threads = warps * WARP
    ldk, ldv, ldc = K + PAD, V + PAD, C + PAD
    buffers = [
        Buffer("k_decayed", (C, K), "bf16", ld=ldk), Buffer("k_to_end", (C, K), "bf16", ld=ldk),
        Buffer("v", (C, V), "bf16", ld=ldv), Buffer("A", (C, C), "bf16", ld=ldc), Buffer("A_f32", (C, C), "f32"),
        Buffer("beta", (C,), "f32"), Buffer("decay_total", (K,), "f32"), Buffer("q_decayed", (C, K), "bf16", ld=ldk),
        Buffer("ST", (V, K), "bf16", ld=ldk),
        Buffer("dhT_hi", (V, K), "bf16", ld=ldk), Buffer("dhT_lo", (V, K), "bf16", ld=ldk),
        Buffer("dO", (C, V), "bf16", ld=ldv),
        *[Buffer(n, (V, C), "bf16", ld=ldc) for n in ("VnT", "XT", "dVnT", "bdXT")],
        Buffer("Mqk", (C, C), "bf16", ld=ldc), *[Buffer(n, (C, C), "f32") for n in ("dMqk", "dA", "T")],
        Buffer("dbeta_part", (warps, C), "f32"), Buffer("d_decay_total_part", (warps, K), "f32"),
    ]
    loads = ["k_decayed", "k_to_end", "v", "A", "A_f32", "beta", "decay_total", "q_decayed", "dO", "ST", "Mqk"]
    steps = [
        Step("dstate_in", "all", "vrows", global_reads=["ws_dstate_blocks"],
             note="dSᵀ rows of this warp from the block's checkpoint"),
        Step("load", "all", "tile", writes=loads, waits=["sync"], loop=True,
             global_reads=["ws_k_decayed", "ws_k_to_end", "v", "ws_A", "ws_beta", "ws_decay_total", "ws_q_decayed",
                           "dout", "ws_states", "ws_Mqk"],
             note="cp.async tiles (rows >= L zero-filled); A, Mqk masked to L×L; A also kept in fp32"),
        Step("dh_copy", "all", "vrows", writes=["dhT_hi", "dhT_lo"], loop=True,
             note="dhᵀ from the registers as bf16 hi + lo (its rounding alone would cost the decay gradient ~2x)"),
        Step("recompute", "all", "vrows", reads=["ST", "k_decayed", "v", "beta", "A"], waits=["sync"], loop=True,
             note="P = v − k_decayed·S, X = β⊙P, Vn = A·X (transposed, this warp's value rows)"),
        Step("dvn", "all", "vrows", reads=["dO", "Mqk", "k_to_end"], loop=True,
             note="dVnᵀ = dOᵀ·Mqk + (dh_hi + dh_lo)ᵀ·k_to_endᵀ"),
        Step("dx", "all", "vrows", reads=["A", "beta"], writes=["dbeta_part"], global_writes=["grad_v"], loop=True,
             note="dX = Aᵀ·dVn, dv = β⊙dX, this warp's Σ_v dX⊙P"),
        Step("d_decay_total_partial", "all", "vrows", reads=["ST"], writes=["d_decay_total_part"], loop=True,
             note="this warp's Σ_v S⊙dh"),
        Step("handover", "all", "vrows", writes=["VnT", "XT", "dVnT", "bdXT"], loop=True,
             note="Vnᵀ, Xᵀ, dVnᵀ, (β⊙dX)ᵀ for phase K"),
        Step("dstate", "all", "vrows", reads=["decay_total", "q_decayed", "k_decayed"], loop=True,
             note="dSᵀ ← dSᵀ⊙decay_total + dOᵀ·q_decayed − (β⊙dX)ᵀ·k_decayed"),
        Step("key_grads", "all", "kcols", reads=["dO", "bdXT", "VnT", "ST", "dhT_hi", "dhT_lo"], waits=["sync"],
             global_writes=["ws_d_q_decayed", "ws_d_k_decayed", "ws_d_k_to_end"], loop=True,
             note="this warp's key columns of dO·Sᵀ, −(β⊙dX)·Sᵀ, Vn·dhᵀ"),
        Step("cc_grads", "all", "warp01", reads=["dO", "VnT", "dVnT", "XT"], writes=["dMqk", "dA"], loop=True,
             note="warp 0: dMqk = tril₀(dO·Vnᵀ); warp 1: dA = dVn·Xᵀ"),
        Step("warp_sums", "all", "thread", reads=["dbeta_part", "d_decay_total_part", "decay_total"], loop=True,
             global_writes=["ws_dbeta", "ws_d_decay_total"],
             note="Σ over warps in warp order; d_decay_total = decay_total⊙Σ_v S⊙dh"),
        Step("dmkk_right", "all", "element", reads=["dA", "A_f32"], writes=["T"], waits=["sync"], loop=True,
             note="T = dA·Aᵀ (fp32)"),
        Step("dmkk", "all", "element", reads=["A_f32", "T", "dMqk"], waits=["sync"], loop=True,
             global_writes=["ws_dMkk", "ws_dMqk"], note="dMkk = −tril₋₁(Aᵀ·T)"),
        Step("dstate_out", "all", "vrows", global_writes=["grad_h0"], note="dh0 (fp32) when h0 was given: block 0"),
    ]
    dtypes = {w.name: w.dtype for w in ws}
    params = [Param("v", "ptr", io), Param("dout", "ptr", io)]
    params += [Param(n, "ptr", dtypes[n]) for n in CHAIN_WORKSPACES + ["ws_states", "ws_dstate_blocks"]]
    params += [Param(n, "ptr", dtypes[n], const=False) for n in RECURRENCE_GRADS]
    params += [Param("grad_v", "ptr", io, const=False), Param("grad_h0", "ptr", "f32", const=False),
               Param("cu_seqlens", "ptr", "i64"), Param("chunk_offsets", "ptr", "i32"), Param("N", "i32"),
               Param("HV", "i32")]
    return _at_cap(Kernel(
        name="recurrence_bwd", kind="recurrence_bwd", template="mma16/recurrence_bwd.cu.j2", direction="backward",
        grid=[BLOCK_SLOTS, "HV"], threads=threads, min_ctas_per_sm=1,
        roles=[Role("all", (0, warps), work=[s.name for s in steps])],
        buffers=buffers, barriers=[_sync(threads, 5, "__syncthreads: loop top, loads landed, after phases V and K, "
                                                    "inside phase A")],
        pipelines=[], steps=steps, params=params,
        options=RecurrenceBwdOptions(warps, state_layout, "reverse", BLOCK_CHUNKS, dvn_parts(K)),
        note="block-parallel, a block's chunks in reverse; dS in fp32 registers, the whole V per CTA (the V sums stay "
             "on chip); surplus CTAs exit"))


def prepare_bwd(*, C: int, K: int, f: Facts, ws: list[Workspace]) -> Kernel:
    threads = C * PREPARE_BWD_LANES_PER_ROW
    KD, decay_kind, head_params = f.KD, f.decay_kind, f.head_params
    scalar = decay_kind == "scalar"
    params, qk, qk_grads = prepare_bwd_io(f, RECURRENCE_GRADS, ws)
    buffers = [Buffer("q_hat", (C, K), "f32"), Buffer("k_hat", (C, K), "f32"), Buffer("gamma", (C, KD), "f32"),
               *([Buffer("F", (C, C), "f32")] if scalar else []), Buffer("dMqk", (C, C), "f32"),
               Buffer("dMkk", (C, C), "f32"), Buffer("beta", (C,), "f32"), Buffer("dgc", (C, K), "f32"),
               Buffer("kbr", (C, K), "f32")]
    steps = [
        Step("prologue_qk", "all", "row", writes=["q_hat", "k_hat"], global_reads=qk,
             note="emitted: q̂, k̂ of the q/k head (rows >= L zero)"),
        Step("prologue_v", "all", "row", writes=["gamma", "beta"], waits=["sync"], loop=True,
             global_reads=[p.name for p in f.leaves if p.name not in qk], note="emitted, per value head: a, β"),
        Step("load_grads", "all", "thread", writes=["dMqk", "dMkk"], global_reads=["ws_dMqk", "ws_dMkk"], loop=True),
        Step("cumsum", "all", "column", reads=["gamma"], writes=["gamma"], waits=["sync"], loop=True,
             note="Γ = in-chunk cumsum of a (rows >= L carry a = 0)"),
        *([Step("decay_pairs", "all", "thread", reads=["gamma"], writes=["F"], waits=["sync"], loop=True,
                note="F = e^(Γi−Γj) for j ≤ i < L, else 0 (per-head decay: C×C scalars)")] if scalar else []),
        Step("branch_grads", "all", "row",
             reads=["gamma", *(["F"] if scalar else []), "q_hat", "k_hat", "dMqk", "dMkk", "beta"],
             writes=["dgc", "kbr"], waits=["sync"], loop=True,
             global_reads=["ws_d_q_decayed", "ws_d_k_decayed", "ws_d_k_to_end", "ws_dbeta"],
             note="b_q, b_kd, b_ki, b_kr; dq̂ += b_q, dk̂ += Σb; dgc = q̂⊙b_q + k̂⊙(b_kd − b_ki − b_kr)"),
        Step("reverse_cumsum", "all", "column", reads=["dgc", "kbr"], writes=["dgc"], waits=["sync"], loop=True,
             global_reads=["ws_d_decay_total"], note="d_decay = suffix sum in the chunk + d_decay_total + Σ_rows k̂⊙b_kr"),
        Step("adjoint_v", "all", "row", reads=["dgc"], waits=["sync"], loop=True,
             global_writes=[p.name for p in params if p.name.startswith("grad_") and p.name not in qk_grads],
             note="emitted: the DSL backward graph per value head (gate, β, per-token head-parameter terms)"),
    ]
    for name, _ in head_params:
        steps += [Step(f"stage_{name}", "all", "row", writes=["dgc"], waits=["sync"], loop=True,
                       note=f"this head's per-token d{name} into the dgc tile"),
                  Step(f"sum_{name}", "all", "column", reads=["dgc"], waits=["sync"], loop=True,
                       global_writes=[f"ws_part_{name}"], note="the chunk's rows summed in row order")]
    steps.append(Step("adjoint_qk", "all", "row", reads=["q_hat", "k_hat"], global_writes=qk_grads,
                      note="emitted: the q/k adjoint (L2 norm) after the GVA sum of dq̂, dk̂"))
    params += [Param("cu_seqlens", "ptr", "i64"), Param("chunk_offsets", "ptr", "i32"), Param("N", "i32"),
               Param("H", "i32"), Param("G", "i32")]
    phases = 5 + scalar + 2 * len(head_params)
    return _at_cap(Kernel(
        name="prepare_bwd", kind="prepare_bwd", template="mma16/prepare_bwd.cu.j2", direction="backward",
        grid=["chunks", "H"], threads=threads, min_ctas_per_sm=PREPARE_BWD_CTAS_PER_SM[K],
        roles=[Role("all", (0, threads // WARP), work=[s.name for s in steps])],
        buffers=buffers,
        barriers=[_sync(threads, phases, "__syncthreads per value head: loop top, grads loaded, Γ, "
                                         + ("F, " if scalar else "") + "branch grads, d_decay, 2 per head parameter")],
        pipelines=[], steps=steps, params=params,
        options=PrepareBwdOptions(PREPARE_BWD_LANES_PER_ROW, K // PREPARE_BWD_LANES_PER_ROW, decay_kind),
        note="token-parallel over (chunk, q/k head); loops over the G value heads of the group; surplus CTAs exit"))


def param_reduce(*, K: int, head_params: list[tuple[str, bool]], seq: list[Param] | None = None,
                 chunk: int = 0) -> Kernel:
    """Each head parameter's per-chunk partials summed over chunks in a fixed order: one launch, blockIdx.y
    picks the parameter, 32 parameter elements per CTA. `seq`: how the family's kernels find sequences
    (base.seq_params; chunks of `chunk` tokens), mma16's packed-batch offsets when None."""
    threads = REDUCE_ROWS * WARP
    width = f"HV * {K}" if any(row for _, row in head_params) else "HV"
    grads = [grad_param(n) for n, _ in head_params]
    steps = [Step("row_sums", "all", "lanes", writes=["rows"], global_reads=[f"ws_part_{n}" for n, _ in head_params],
                  note="lane x takes element 32·blockIdx.x + x, row y the chunks y, y+8, ... in order"),
             Step("total", "all", "row0", reads=["rows"], waits=["sync"], global_writes=grads,
                  note="row 0 adds the 8 row sums in order")]
    params = [Param(f"ws_part_{n}", "ptr", "f32") for n, _ in head_params]
    params += [Param(g, "ptr", "f32", const=False) for g in grads]
    if seq is None:
        seq, chunks = [Param("chunk_offsets", "ptr", "i32"), Param("N", "i32")], "chunk_offsets[N]"
    else:
        names = {p.name for p in seq}
        chunks = "chunk_offsets[N]" if "chunk_offsets" in names else f"N * ((T + {chunk - 1}) / {chunk})"
    params += [*seq, Param("HV", "i32")]
    return _at_cap(Kernel(
        name="param_reduce", kind="param_reduce", template="mma16/param_reduce.cu.j2", direction="backward",
        grid=[f"({width} + {WARP - 1}) // {WARP}", str(len(head_params))], threads=threads, min_ctas_per_sm=1,
        roles=[Role("all", (0, REDUCE_ROWS), work=[s.name for s in steps])],
        buffers=[Buffer("rows", (REDUCE_ROWS, WARP), "f32")], barriers=[_sync(threads, 1, "rows written")],
        pipelines=[], steps=steps, params=params,
        options=ReduceOptions([{"name": n, "grad": grad_param(n), "row": row} for n, row in head_params], REDUCE_ROWS,
                              chunks),
        note="deterministic: per-chunk partials summed in chunk order, no atomics"))
