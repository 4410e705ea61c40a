"""wgmma64 backward kernels (templates/wgmma64/), being built: docs/kernels.md §4 has the design and what exists.

dstate — the backward's serial part at chunk 64: the reverse recurrence of the state gradient (docs/math.md §7.2)
alone, one CTA per (sequence, value head, 64 value rows), chunks last to first. It is the forward recurrence's
structure run backwards: a producer warp group fills a two-stage ring with each chunk's workspace tiles and dO
rows by bulk tensor copies; one consumer warp group holds dSᵀ (its 64 value rows × K) as fp32 wgmma accumulators
for the whole sequence and, per chunk, in the transposed form (value rows are wgmma's M):

  dVnᵀ = dOᵀ·Mqk + dhᵀ·k_to_endᵀ        dh (the registers) as bf16 hi + lo; dOᵀ by ldmatrix.trans
  dXᵀ  = dVnᵀ·A                         dVnᵀ as bf16 hi + lo
  dSᵀ ← dSᵀ⊙decay_total + dOᵀ·q_decayed − (β⊙dX)ᵀ·k_decayed

Before a chunk's step it writes dh, the gradient of the state leaving the chunk (as dhᵀ [V, K], bf16 hi + lo), to
ws_dstate_hi / _lo: what the chunk-parallel gradient kernels read, so that nothing but this chain is serial. After
the first chunk, dh0.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...model import Barrier, Kernel, Param, Pipeline, Role, Step, Workspace, kernel_options
from ..base import seq_params
from .forward import STAGES, V_ROWS, chunk_ring, decay_width, ring_maps

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


def backward_workspaces(K: int, V: int) -> list[Workspace]:
    """dh, the gradient of the state leaving each chunk (dht, or zero, for a sequence's last), as dhᵀ [V, K] in bf16
    hi + lo (dh ≈ hi + lo to ~16 bits): fp32's bytes in the form the products that read it take — bf16 operand
    tiles a bulk tensor copy loads, nothing to convert."""
    return [Workspace(f"ws_dstate_{part}", ("chunks", "HV", V, K), "bf16", "dstate", [], f"dhᵀ, bf16 {part} part")
            for part in ("hi", "lo")]


def dstate(*, K: int, V: int, KD: int, varlen: bool, state_layout: str, ws: list[Workspace]) -> Kernel:
    slices = V // V_ROWS
    dw = decay_width(KD)
    ring = chunk_ring(K, dw, 1, "dO")
    stage_bytes = sum(b.stage_bytes for b in ring)
    dtypes = {w.name: w.dtype for w in ws}
    steps = [
        Step("load", "producer", "tma", writes=list(CHAIN_RING), waits=["free"], arrives=["ready"], loop=True,
             global_reads=[*CHAIN_WORKSPACES, "dout"],
             note="one elected thread, chunks last to first: expect the stage's bytes, then its boxes and copies"),
        Step("dstate_in", "consumer", "wgmma_acc", global_reads=["dht"], note="dSᵀ rows of this group from dht or 0"),
        Step("dh_out", "consumer", "wgmma_acc", global_writes=["ws_dstate_hi", "ws_dstate_lo"], waits=["ready"],
             loop=True, note="dhᵀ, the gradient of the state leaving the chunk, split bf16 hi + lo: the dvn step's "
                             "register operands, and ws_dstate_hi / _lo"),
        Step("dvn", "consumer", "wgmma_acc", reads=["dO", "Mqk", "k_to_end"], loop=True,
             note="dVnᵀ = dOᵀ·Mqk + (dh_hi + dh_lo)ᵀ·k_to_endᵀ: dOᵀ by ldmatrix.trans, Mqk read N-major"),
        Step("dx", "consumer", "wgmma_acc", reads=["A", "beta"], loop=True,
             note="(β⊙dX)ᵀ = (dVnᵀ·A)⊙β: A read N-major, dVnᵀ split bf16 hi + lo"),
        Step("dstate_update", "consumer", "wgmma_acc", reads=["decay_total", "q_decayed", "k_decayed"],
             arrives=["free"], loop=True,
             note="dSᵀ ← dSᵀ⊙decay_total + dOᵀ·q_decayed − (β⊙dX)ᵀ·k_decayed (both read N-major); the stage is "
                  "released"),
        Step("dstate_out", "consumer", "wgmma_acc", global_writes=["grad_h0"],
             note="dh0: dS after the first chunk (dht, or zero, for an empty sequence)"),
    ]
    params = ring_maps(K, V, "dO", "dout") + [Param(n, "ptr", dtypes[n]) for n in ("ws_decay_total", "ws_beta")]
    params += [Param("dht", "ptr", "f32"), Param("ws_dstate_hi", "ptr", "bf16", const=False),
               Param("ws_dstate_lo", "ptr", "bf16", const=False),
               Param("grad_h0", "ptr", "f32", const=False), *seq_params(varlen)]
    return Kernel(
        name="dstate", kind="dstate", template="wgmma64/dstate.cu.j2", direction="backward",
        grid=["N", "HV", slices], threads=256, min_ctas_per_sm=1,
        roles=[Role("producer", (0, 4), work=["load"]),
               Role("consumer", (4, 8), work=[s.name for s in steps if s.role == "consumer"])],
        buffers=ring,
        barriers=[Barrier("ready", "mbarrier", 1, [("producer", "elected")], ["consumer"], stages=STAGES,
                          tx_bytes=stage_bytes, note="arrive.expect_tx by the elected producer thread"),
                  Barrier("free", "mbarrier", 128, [("consumer", "thread")], ["producer"], stages=STAGES)],
        pipelines=[Pipeline("chunk_ring", STAGES, "producer", ["consumer"], "ready", "free", list(CHAIN_RING),
                            copy="tma")],
        steps=steps, params=params, options=Dstate64Options(slices, STAGES, state_layout, varlen, dw),
        note="head-parallel, chunks in reverse: the backward's only serial pass, dS in fp32 registers")

