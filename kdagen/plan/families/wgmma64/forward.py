"""wgmma64 forward kernels: a token-parallel "prepare" at chunk 64 and a head-parallel "recurrence" on
bulk tensor copies and wgmma. docs/kernels.md §3, docs/math.md §6.

prepare, per (64-token chunk, value head), 8 warps, two CTAs per SM (16 warps: the steps are chains of
dependent shared-memory reads and products, so latency hiding needs warps):
  prologue   16 channels per thread (K/16 lanes per row), 256/(K/16) rows per pass: the emitted DSL block ->
             q̂, k̂, α = e^a, β, stored to shared memory in 16-byte pieces in the blocks' operand form
             (operand_form: fp32, bf16 hi + lo, or q and k as loaded with a number per row); the row inputs copied
             first by cp.async into those same tiles' rows (staging_form)
  diagonal   ("running" only) the four 16×16 diagonal blocks of Mqk and Mkk per pair on CUDA cores, a thread
             per (row, quarter of the channels): row i walks j = i..start of its block, the decay factor a
             running product of α (exact for any decay, nothing overflows)
  decay_columns, factors   a thread per (16-row block, 4K/256 adjacent channels): the block's totals D
             (shared), then (not "scalar") in place q̂ -> q̂·E (E = e^(Γi−Γ_in)), k̂ -> k̂·E (both rounded to
             tf32 once: the blocks' row side), k_out = k̂·F (F = e^(Γ_out−Γj)); the outputs q_decayed, k_decayed,
             k_to_end (bf16 pairs at K = 128), decay_total; with the recurrence's q and k "raw" (qk_form) a
             number per token for each instead (ws_row_factors), the tiles only where a backward keeps them
  blocks     the 16×16 blocks on tensor cores: the six off-diagonal ones, the key side scaled by the totals of
             the blocks in between, and the four diagonal ones where the form allows (diagonal_form); tf32 from
             fp32 tiles, or (a per-head decay) bf16 from bf16 tiles by ldmatrix: q and k as loaded, each result
             scaled by the rows' numbers, or bf16x3 from hi + lo tiles
  inverse    A = (I + Mkk)⁻¹ by 16-row blocks: forward substitution on the diagonal, then block products (bf16x3)
The C×C steps (Mqk's and A's zero blocks, Mkk's assembly, A's store) give a thread one 16-column row segment.
The workspace is bf16 (A and Mqk too: the recurrence's tensor cores read bf16) in row-major tiles a bulk
tensor copy can load; rows past a chunk's end are zero, β too.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...model import DTYPE_BYTES, Barrier, Buffer, Kernel, Param, Role, Step, Workspace, kernel_options
from ...problem import PlanError
from ..base import Facts, form_of, input_param, seq_params, token_parallel, workspace_params

CHUNK = 64
BLOCK = 16                   # sub-block rows: the diagonal blocks and the inverse's blocks
PREPARE_WARPS = 8
PREPARE_REGS = 128           # 2 CTAs × 256 threads × 128 registers = the register file
PREPARE_KPT = 16             # prologue channels per thread: K/16 lanes per row
DECAY_TOTAL_MIN = 4          # floats per (chunk, head) of decay_total: a bulk copy moves multiples of 16 bytes
BETWEEN = 3                  # block pairs with blocks in between: (2,0), (3,1), (3,0)
# a per-head decay's operand buffers by operand form: bf16 hi + lo tiles ("split"), or q and k as loaded (bf16) and
# their rows' numbers ("raw")
PER_HEAD = {"split": ("q_hi", "q_lo", "k_hi", "k_lo"), "raw": ("q_hi", "k_hi", "q_rs", "k_rs")}


@kernel_options
@dataclass
class Prepare64Options:
    lanes_per_row: int       # prologue threads per token row
    kpt: int                 # prologue channels per thread
    decay_kind: str
    varlen: bool
    decay_width: int         # floats per (chunk, head) in ws_decay_total
    diagonal: str            # how the pair factors reach the products: "scalar" | "factored" | "running"
    operands: str            # what the blocks' products read: "raw" | "split" | "tf32" (operand_form)
    staging: str             # where the row inputs wait for the prologue: "tiles" | "registers" (staging_form)
    row_factors: bool        # writes ws_row_factors (the recurrence's q and k "raw"); the decayed tiles then only
                             # where a backward keeps them (non-null)


def diagonal_form(f: Facts) -> str:
    """How the prepare's C×C products get their decay factors e^(Γi−Γj):
    "scalar" — a per-head decay: one factor per pair, so every block (the diagonal ones too) is a raw tensor-core
      product of q̂, k̂ scaled afterwards by 2^(γi−γj) (any decay; exact up to the fp32 rounding of γ);
    "factored" — a per-channel decay proven bounded enough for the factored form over one 16-row block
      (k̂·e^(Γ_in−Γj) stays in the normal fp32 range: the exponent-form rule at chunk 16): the diagonal blocks are
      tensor-core tiles like the others;
    "running" — otherwise: the diagonal blocks by exact running products of α on CUDA cores."""
    if f.decay_kind == "scalar":
        return "scalar"
    return "factored" if form_of(f, BLOCK) == "factored" else "running"


def operand_form(f: Facts, diagonal: str) -> str:
    """What the blocks' tensor-core products read:
    "raw" — a per-head decay, and q̂, k̂ each a bf16 row input x or l2norm(x) (Facts.qk_row_scaled): the bf16
      tiles hold q and k exactly as loaded, one bf16 product (exact products, fp32 sums) per block, each result
      scaled by the rows' numbers (their 1/‖x‖) with the decay: a third of "split"'s tensor-core work, no
      rounding of q̂, k̂ before the sums;
    "split" — another per-head decay: q̂, k̂ as bf16 hi + lo tiles, three bf16 products per block (≈ fp32);
    "tf32" — a per-channel decay: the decayed fp32 tiles, read as tf32."""
    if diagonal != "scalar":
        return "tf32"
    return "raw" if f.qk_row_scaled else "split"


def qk_form(operands: str) -> str:
    """What the recurrence's products with q and k read:
    "raw" — where the prepare's operands are "raw" (a per-head decay; q̂, k̂ bf16 row inputs or their l2norms): q
      and k as the inputs hold them, by bulk tensor copies, each product's token columns scaled afterwards by a
      number per token (ws_row_factors: scale·q_rs·e^Γ, k_rs·e^Γ, k_rs·e^(Γl−Γ); 0 past the chunk's end). The
      prepare then writes 0.75 KB per (chunk, head) for them where the three decayed tiles took 48 KB (those only
      for a backward), and the recurrence reads two 16 KB tiles where it read three;
    "decayed" — otherwise: q_decayed, k_decayed and k_to_end from the workspace."""
    return "raw" if operands == "raw" else "decayed"


def staging_form(f: Facts, operands: str) -> str:
    """Where the prologue's row inputs wait between their load (cp.async or plain) and their use:
    "tiles" — in the operand tiles the prologue writes (q̂, k̂, α in fp32; bf16 hi + lo; for "raw" the two bf16
      tiles), input i's row r at the right-hand end of row r of tile i, read back by that row's own lanes before
      its outputs overwrite it: the loads hold no registers and land without the threads waiting on each;
    "registers" — more row inputs than tiles, or an input wider than a tile's element."""
    tiles, width = {"raw": (2, 2), "split": (4, 2), "tf32": (3, 4)}[operands]
    fits = len(f.row_dtypes) <= tiles and all(DTYPE_BYTES[d] <= width for d in f.row_dtypes)
    return "tiles" if fits else "registers"


def decay_width(KD: int) -> int:
    return max(KD, DECAY_TOTAL_MIN)


def forward_workspaces(K: int, KD: int, backward: bool, qk: str = "decayed") -> list[Workspace]:
    """prepare -> recurrence (and, planned with a `backward`, its dstate and chunk_bwd), per (64-token chunk, value
    head); rows >= the chunk's length are zero. With the recurrence's q and k "raw" (qk_form) the decayed tiles are
    the backward's alone (kept_only: null, and not written, in a call that keeps nothing), and the recurrence reads
    the numbers per token instead."""
    C = CHUNK
    to = ["recurrence", "dstate", "chunk_bwd"] if backward else ["recurrence"]
    raw = qk == "raw"
    key_to = [k for k in to if not (raw and k == "recurrence")]
    q_to = [k for k in key_to if k != "chunk_bwd"]
    tile = ("chunks", "HV", C, K)
    decayed = [Workspace("ws_q_decayed", tile, "bf16", "prepare", q_to, "scale·q̂⊙e^Γ", kept_only=raw),
               Workspace("ws_k_decayed", tile, "bf16", "prepare", key_to, "k̂⊙e^Γ", kept_only=raw),
               Workspace("ws_k_to_end", tile, "bf16", "prepare", key_to, "k̂⊙e^(Γl−Γ)", kept_only=raw)]
    factors = [Workspace("ws_row_factors", ("chunks", "HV", len(ROW_FACTORS), C), "f32", "prepare", ["recurrence"],
                         "per token: " + ", ".join(ROW_FACTORS.values()))] if raw else []
    return [
        *decayed, *factors,
        Workspace("ws_decay_total", ("chunks", "HV", decay_width(KD)), "f32", "prepare", to,
                  "e^Γl (per channel, or per head in entry 0)"),
        Workspace("ws_A", ("chunks", "HV", C, C), "bf16", "prepare", to, "(I + Mkk)⁻¹"),
        Workspace("ws_Mqk", ("chunks", "HV", C, C), "bf16", "prepare", to, "scale·tril₀(q̂ k̂ᵀ ⊙ e^(Γi−Γj))"),
        Workspace("ws_beta", ("chunks", "HV", C), "f32", "prepare", to, "β after the prologue"),
    ]


def states_workspace(K: int, V: int) -> Workspace:
    """S entering each chunk, written by the forward's recurrence when a backward follows (chunk_bwd's S_c)."""
    return Workspace("ws_states", ("chunks", "HV", V, K), "bf16", "recurrence", ["chunk_bwd"],
                     "Sᵀ entering each chunk (bf16: the backward's wgmma operand)", kept_only=True)


PREPARE_OUTPUTS = ["ws_q_decayed", "ws_k_decayed", "ws_k_to_end", "ws_decay_total", "ws_A", "ws_Mqk", "ws_beta"]
# ws_row_factors' rows (qk "raw"): the numbers per token the recurrence scales its q, k products' columns by
ROW_FACTORS = {"q_factor": "scale·q_rs·e^Γ", "k_factor": "k_rs·e^Γ", "to_end_factor": "k_rs·e^(Γl−Γ)"}


def prepare(*, K: int, varlen: bool, f: Facts, ws: list[Workspace]) -> Kernel:
    C, KD, NB = CHUNK, f.KD, CHUNK // BLOCK
    diagonal = diagonal_form(f)
    operands = operand_form(f, diagonal)
    # Two CTAs fit an SM at K = 128: A takes q̂'s tile once the products are done; α, the key-side operand k_out
    # and Mkk take turns in one region (α is read into registers before k_out is written). Mkk and A rows are
    # padded by 8 floats: the inverse's fragment loads then meet each bank at most twice.
    by_form = {"scalar": [Buffer("gamma", (C,), "f32")],
               "factored": [Buffer("between", (BETWEEN, KD), "f32"), Buffer("inv_D", (NB, KD), "f32")],
               "running": [Buffer("between", (BETWEEN, KD), "f32"), Buffer("Mkk_diag", (NB, BLOCK, BLOCK), "f32")]}
    # a per-head decay: q̂ and k̂ only feed the tensor cores (as they are, scaled afterwards) and the decayed outputs,
    # so they are stored as bf16 tiles, rows padded by 8 (ldmatrix without bank conflicts): hi + lo, or (operands
    # "raw") q and k as loaded in q_hi, k_hi beside their rows' numbers; A takes q_hi's region. Otherwise fp32
    # tiles read as tf32 fragments, rows padded by 4 (no bank conflicts).
    tiles = ([Buffer(n, (C,), "f32") if n.endswith("_rs") else
              Buffer(n, (C, K), "bf16", ld=K + 8, alias="q_then_A" if n == "q_hi" else None)
              for n in PER_HEAD[operands]] if operands in PER_HEAD else
             [Buffer("q_hat", (C, K), "f32", ld=K + 4, alias="q_then_A"), Buffer("k_hat", (C, K), "f32", ld=K + 4)])
    buffers = [*tiles, Buffer("alpha", (C, KD), "f32", ld=KD + 4 if KD > 1 else KD, alias="rows"),
               Buffer("beta", (C,), "f32"),
               Buffer("D", (NB, KD), "f32"), *by_form[diagonal],
               *([] if diagonal == "scalar" else [Buffer("k_out", (C, K), "f32", ld=K + 4, alias="rows")]),
               Buffer("Mkk", (C, C), "f32", ld=C + 8, alias="rows"),
               Buffer("A", (C, C), "f32", ld=C + 8, alias="q_then_A")]
    row_factors = any(w.name == "ws_row_factors" for w in ws)
    steps = _prepare_steps(f, diagonal, operands, NB, row_factors)
    outputs = PREPARE_OUTPUTS + (["ws_row_factors"] if row_factors else [])
    return token_parallel(template="wgmma64/prepare.cu.j2", f=f, varlen=varlen, ws=ws, outputs=outputs,
                          warps=PREPARE_WARPS, min_ctas_per_sm=2, regs=PREPARE_REGS, buffers=buffers, steps=steps,
                          options=Prepare64Options(K // PREPARE_KPT, PREPARE_KPT, f.decay_kind,
                                                   varlen, decay_width(KD), diagonal, operands,
                                                   staging_form(f, operands), row_factors),
                          # __syncthreads after the prologue, (the diagonal blocks,) decay_columns, factors, blocks and
                          # assemble; after the inverse's diagonal blocks; after each of its NB − 1 levels
                          barrier_phases=5 + (diagonal == "running") + 1 + (NB - 1))


def _prepare_steps(f: Facts, diagonal: str, operands: str, NB: int, row_factors: bool) -> list[Step]:
    scalar, running, raw = diagonal == "scalar", diagonal == "running", operands == "raw"
    per_head = PER_HEAD.get(operands, ())
    if scalar:
        factors = Step("factors", "all", "column", reads=[*per_head, "D"] + (["alpha"] if row_factors else []),
                       waits=["sync"],
                       global_writes=["ws_q_decayed", "ws_k_decayed", "ws_k_to_end", "ws_decay_total", "ws_beta"]
                       + (["ws_row_factors"] if row_factors else []),
                       note=("the numbers per token of the recurrence's raw q and k (" + ", ".join(ROW_FACTORS)
                             + "); where a backward keeps them, " if row_factors else "")
                            + "the decayed outputs (q̂ = " + ("q_hi·q_rs" if raw else "q_hi + q_lo") + ", k̂ likewise)")
        blocks = Step("blocks", "all", "mma:block_pairs", reads=[*per_head, "gamma", "beta"], waits=["sync"],
                      global_writes=["ws_Mqk"],
                      note="every 16×16 block (I ≥ J), " + ("one bf16 mma of q, k as loaded, each result × the "
                                                            "rows' q_rs/k_rs and" if raw else
                                                            "bf16x3 mma of raw q̂, k̂,") + " from ldmatrix, × "
                           "2^(γi−γj), masked")
    else:
        factors = Step("factors", "all", "column", reads=["q_hat", "k_hat", "D"],
                       writes=["q_hat", "k_hat", "k_out", "between"] + ([] if running else ["inv_D"]), waits=["sync"],
                       global_writes=["ws_q_decayed", "ws_k_decayed", "ws_k_to_end", "ws_decay_total", "ws_beta"],
                       note="in place q̂ ← q̂·E, k̂ ← k̂·E (E = e^(Γi−Γ_in), both rounded to tf32 once); k_out = "
                            "k̂·F (F = e^(Γ_out−Γj)); the decayed outputs" + ("" if running else "; 1/D per block"))
        blocks = Step("blocks", "all", "mma:block_pairs", reads=["q_hat", "k_hat", "k_out", "beta", "between"]
                      + ([] if running else ["inv_D"]), waits=["sync"], global_writes=["ws_Mqk"],
                      note="the off-diagonal 16×16 blocks, tf32 mma; the key side scaled by the blocks in between"
                           + ("" if running else "; the diagonal blocks too (factored at the block start: the key "
                                                 "side k_out·(1/D), masked j ≤ i)"))
    return [
        Step("prologue", "all", "row", writes=[*(per_head if scalar else ["q_hat", "k_hat"]), "alpha", "beta"]
             + (["gamma"] if scalar else []),
             global_reads=[p.name for p in f.leaves],
             note="emitted from the DSL graph, 16 channels per thread: q̂, k̂, α = e^a (tail rows: 0, 0, 1), β"
                  + ({"raw": ", log2 α; q, k as loaded (bf16) and their rows' numbers q_rs, k_rs (1/‖x‖ or 1)",
                      "split": ", log2 α; q̂, k̂ as bf16 hi + lo"}.get(operands, ""))),
        *([Step("diagonal", "all", "pair_rows", reads=["q_hat", "k_hat", "alpha", "beta"], writes=["Mkk_diag"],
                waits=["sync"], global_writes=["ws_Mqk"],
                note="the diagonal 16×16 blocks per pair, a thread per (row, quarter of K): j from i down, "
                     "f ← f·α_j")] if running else []),
        Step("decay_columns", "all", "column", reads=["alpha"] + (["gamma"] if scalar else []),
             writes=["D"] + (["gamma"] if scalar else []), waits=["sync"],
             note="a thread per (block, 4K/256 adjacent channels): the block's α into registers, its totals D"
                  + ("; γ = Γ·log2 e, the running sum of log2 α" if scalar else "")),
        factors,
        blocks,
        Step("assemble", "all", "mma:block_pairs", reads=["Mkk_diag"] if running else [], writes=["Mkk"],
             waits=["sync"], note="Mkk from the accumulators" + (", the diagonal blocks copied beside them"
                                                                 if running else "")),
        # the inverse waits at its start, after its diagonal blocks and after each level but the last (whose
        # barrier store_inverse waits on)
        Step("inverse", "all", "blocks16", reads=["Mkk"], writes=["A"], waits=["sync"] * NB,
             note="diagonal blocks by forward substitution, then A_IJ = −A_II·Σ_M Mkk_IM·A_MJ level by level "
                  "(bf16x3 mma, a 16×8 tile per warp)"),
        Step("store_inverse", "all", "thread", reads=["A"], waits=["sync"], global_writes=["ws_A"],
             note="A as bf16, rows and columns past the chunk's end zero"),
    ]


@kernel_options
@dataclass
class Recurrence64Options:
    consumers: int           # consumer warp groups per CTA, each owning 64 value rows of the state
    slices: int              # CTAs per (sequence, value head), each owning consumers·64 value rows (blockIdx.z)
    stages: int
    state_layout: str
    varlen: bool
    decay_width: int
    keeps_states: bool       # writes S_c for a backward (ws_states): a CTA of one consumer group (shared memory)
    qk: str                  # what the products with q and k read: "decayed" | "raw" (qk_form)


def keeps_states(V: int) -> bool:
    """Whether the recurrence can write S_c for the backward: its staging fits beside the ring only in a CTA of
    one consumer group (SPLIT_VALUE, the default, or V = 64); the family plans a backward only then."""
    return SPLIT_VALUE or V == V_ROWS


STAGES = 2
# The value rows of the state evolve independently, so they can be split over CTAs: SPLIT_VALUE gives each 64
# rows a CTA of its own (one consumer warp group, V/64 CTAs per (sequence, head), each reading the chunk's key-side
# tiles) instead of V/64 consumer warp groups sharing one SM's tensor cores, whose interleaved rounds bound the
# step. Measured on the H200 (benchmarks/NOTES.md, session 9): the recurrence 1.3-1.7x faster at 4, 16 and 64
# (sequence, head) pairs. False keeps one CTA per (sequence, head); the tests compare the two bit for bit.
SPLIT_VALUE = True
PRODUCER_REGS = 40
CONSUMER_REGS = 232
V_ROWS = 64                  # wgmma's M: the value rows a consumer warp group owns


def tile_map(name: str, tensor: str, K: int, rows: str, buffer: str) -> Param:
    """A [rows][K] bf16 workspace seen as 2-D boxes of 64 rows × 64 columns (one 128-byte swizzle span)."""
    from ...model import TensorMapSpec
    return Param(name, "tensor_map", "bf16",
                 tensor_map=TensorMapSpec(tensor=tensor, dtype="bf16", dims=[K, rows], strides=[K], box=[64, 64],
                                          swizzle=128, buffer=buffer))


QK_TILES = {"decayed": ("q_decayed", "k_decayed", "k_to_end"), "raw": ("q", "k")}


def chunk_ring(K: int, dw: int, consumers: int, rows: str, qk: str = "decayed") -> list[Buffer]:
    """One stage of a chunk ring (the recurrence's and the backward's dS chain's): the chunk's key-side tiles as
    64×64 bf16 boxes with the 128-byte swizzle (QK_TILES by qk_form: the decayed workspace tiles, or q and k as
    the inputs hold them), A and Mqk likewise, `rows` (v or dO: each consumer group's 64 value columns of the
    chunk's tokens), decay_total and β, and for "raw" q and k the numbers per token (ws_row_factors)."""
    C, atoms = CHUNK, K // 64        # atoms: 128-byte swizzle spans along a K row
    tile = dict(stages=STAGES, align=1024, swizzle=128)
    return [*[Buffer(name, (atoms, C, 64), "bf16", **tile) for name in QK_TILES[qk]],
            Buffer("A", (C, C), "bf16", **tile), Buffer("Mqk", (C, C), "bf16", **tile),
            Buffer(rows, (consumers, C, V_ROWS), "bf16", **tile),
            Buffer("decay_total", (dw,), "f32", stages=STAGES), Buffer("beta", (C,), "f32", stages=STAGES),
            *([Buffer("row_factors", (len(ROW_FACTORS), C), "f32", stages=STAGES)] if qk == "raw" else [])]


def token_map(buffer: str, tensor: str, width: int, heads: str) -> Param:
    """The tensor map of a token tensor ([B·T, heads, width] seen 3-D as [width, heads, T]: v, dO, or q and k as
    loaded), a box of 64 columns × 1 head × 64 tokens into `buffer`."""
    from ...model import TensorMapSpec
    return Param(f"map_{buffer}", "tensor_map", "bf16",
                 tensor_map=TensorMapSpec(tensor=tensor, dtype="bf16", dims=[width, heads, "T"],
                                          strides=[width, f"{heads} * {width}"], box=[V_ROWS, 1, CHUNK],
                                          swizzle=128, buffer=buffer))


def rows_map(V: int, rows: str, tensor: str) -> Param:
    """The tensor map of a token tensor's value rows (v, dO) into the buffer `rows`."""
    return token_map(rows, tensor, V, "HV")


def ring_maps(K: int, V: int, rows: str, tensor: str, qk_maps: list[Param] | None = None) -> list[Param]:
    """The tensor maps of chunk_ring's boxes: the key-side tiles (the decayed workspace tiles, or `qk_maps`), A and
    Mqk, and `rows` from the token tensor `tensor`."""
    C, ws_rows = CHUNK, "chunks * HV * 64"
    qk = qk_maps or [tile_map(f"map_{name}", f"ws_{name}", K, ws_rows, name) for name in QK_TILES["decayed"]]
    return [*qk, tile_map("map_A", "ws_A", C, ws_rows, "A"), tile_map("map_Mqk", "ws_Mqk", C, ws_rows, "Mqk"),
            rows_map(V, rows, tensor)]


def recurrence(*, K: int, V: int, KD: int, varlen: bool, state_layout: str, ws: list[Workspace],
               qk: str = "decayed", f: Facts | None = None) -> Kernel:
    """Head-parallel: one CTA per (sequence, value head) — or per 64 value rows of it (SPLIT_VALUE) — with a
    producer warp group (one elected thread issues the copies) and consumer warp groups, each owning 64 value rows
    of Sᵀ as wgmma accumulators. `qk` (qk_form): what the products with q and k read; "raw" takes the query's and
    key's token inputs from `f`."""
    from ...model import Pipeline
    slices = V // V_ROWS if SPLIT_VALUE else 1
    consumers = V // V_ROWS // slices
    threads = 128 * (1 + consumers)
    dw = decay_width(KD)
    raw = qk == "raw"
    if raw and f is None:
        raise PlanError("recurrence: q and k \"raw\" need the recurrence's facts (f: the query's and key's inputs)")
    ring = chunk_ring(K, dw, consumers, "v", qk)
    stage_bytes = sum(b.stage_bytes for b in ring)
    states = keeps_states(V)
    # o staged for 16-byte stores, and (a call that keeps its workspaces) S_c for one thread's bulk tensor stores,
    # each two tiles in turn
    buffers = ring + [Buffer("o", (consumers, CHUNK, V_ROWS + 8), "bf16", stages=2)]
    buffers += [Buffer("states", (K // 64, V_ROWS, 64), "bf16", stages=2, align=1024, swizzle=128)] if states else []
    # "raw": q and k from the inputs under query and key, on the q/k heads where they live there (hq = h / G)
    qk_maps = [token_map(buffer, input_param(name), K, "H" if name in f.qk_inputs else "HV")
               for buffer, name in zip(QK_TILES["raw"], f.qk_rows)] if raw else None
    maps = ring_maps(K, V, "v", "v", qk_maps)
    q_tile, k_tile, to_end_tile = ("q", "k", "k") if raw else QK_TILES["decayed"]
    key_reads = [m.tensor_map.tensor for m in maps[:len(QK_TILES[qk])]]
    steps = [
        Step("load", "producer", "tma", writes=[b.name for b in ring], waits=["free"], arrives=["ready"], loop=True,
             global_reads=[*key_reads, "ws_A", "ws_Mqk", "v", "ws_decay_total", "ws_beta",
                           *(["ws_row_factors"] if raw else [])],
             note="one elected thread: expect the stage's bytes, then its tensor boxes and bulk copies"),
        Step("state_in", "consumer", "wgmma_acc", global_reads=["h0"],
             note="Sᵀ rows of this warp group from h0 or 0 (recurrence_maps: 0, or I in the second half of the grid)"),
        Step("state_products", "consumer", "wgmma_acc", reads=[k_tile, q_tile], waits=["ready"], loop=True,
             note=f"Pᵀ = Sᵀ·{k_tile}ᵀ, Qᵀ = Sᵀ·{q_tile}ᵀ: wgmma with Sᵀ as the register operand (bf16)"
                  + ("; q and k as loaded, each result's token columns scaled later" if raw else "")),
        *([Step("states_out", "consumer", "wgmma_acc", writes=["states"], loop=True,
                note="a call that keeps its workspaces: Sᵀ entering the chunk, bf16 (chunk_bwd's S_c), staged")]
          if states else []),
        Step("delta", "consumer", "wgmma_acc", reads=["v", "beta", *(["row_factors"] if raw else [])], loop=True,
             note="Xᵀ = β⊙(vᵀ − Pᵀ" + ("·diag(k_factor))" if raw else ")")),
        Step("solve", "consumer", "wgmma_acc", reads=["A", "decay_total", *(["row_factors"] if raw else [])],
             loop=True, note="Vnᵀ = Xᵀ·Aᵀ, Xᵀ split bf16 hi + lo; while it runs, Sᵀ ← Sᵀ⊙decay_total"
                             + (" and Qᵀ ← Qᵀ·diag(q_factor)" if raw else "")),
        Step("output", "consumer", "wgmma_acc", reads=["Mqk"], loop=True,
             note="Oᵀ = Qᵀ + Vnᵀ·Mqkᵀ, Vnᵀ split bf16 hi + lo"),
        Step("update", "consumer", "wgmma_acc", reads=[to_end_tile, *(["row_factors"] if raw else [])],
             arrives=["free"], loop=True,
             note="Sᵀ += " + ("(Vnᵀ·diag(to_end_factor))·k, its operand made while the output's products run"
                              if raw else "Vnᵀ·k_to_end") + f" ({to_end_tile} read N-major); the stage is released"),
        Step("store_o", "consumer", "rows", reads=["o", *(["states"] if states else [])], writes=["o"],
             waits=["o_staged"], loop=True, global_writes=["o", *(["ws_states"] if states else [])],
             note="Oᵀ transposed through one of two shared tiles, 16-byte stores of the valid rows"
                  + ("; S_c by one thread's bulk tensor stores" if states else "")),
        Step("state_out", "consumer", "wgmma_acc", global_writes=["ht"], note="the final state, if requested"),
    ]
    params = maps + workspace_params(["ws_decay_total", "ws_beta", *(["ws_row_factors"] if raw else [])], True, ws)
    params += [Param("h0", "ptr", "f32")]
    params += seq_params(varlen) + [Param("o", "ptr", "bf16", const=False), Param("ht", "ptr", "f32", const=False)]
    params += [Param("ws_states", "ptr", "bf16", const=False),
               tile_map("map_states", "ws_states", K, f"chunks * HV * {V}", "states")] if states else []
    # the roles share the register file by setmaxnreg quotas; a CTA of SPLIT_VALUE (one producer and one consumer
    # group, 256 threads) has 255 registers per thread at entry already, so it moves none
    quotas = slices == 1
    return Kernel(
        name="recurrence", kind="recurrence", template="wgmma64/recurrence.cu.j2", direction="forward",
        grid=["N", "HV", slices], threads=threads, min_ctas_per_sm=1,
        roles=[Role("producer", (0, 4), work=["load"], regs=PRODUCER_REGS if quotas else None, setmaxnreg=quotas),
               Role("consumer", (4, 4 + 4 * consumers), work=[s.name for s in steps if s.role == "consumer"],
                    regs=CONSUMER_REGS if quotas else None, setmaxnreg=quotas)],
        buffers=buffers,
        barriers=[Barrier("ready", "mbarrier", 1, [("producer", "elected")], ["consumer"], stages=STAGES,
                          tx_bytes=stage_bytes, note="arrive.expect_tx by the elected producer thread"),
                  Barrier("free", "mbarrier", 128 * consumers, [("consumer", "thread")], ["producer"], stages=STAGES),
                  Barrier("o_staged", "named", 128, [("consumer", "thread")], ["consumer"], id=1, copies=consumers,
                          note="one per consumer warp group: O staged (two tiles in turn, so no second barrier "
                               "before a tile is rewritten)" + ("; with S_c kept, its staging too, and the issuing "
                                                               "thread's wait for the stores of the chunk before to "
                                                               "have read theirs" if states else ""))],
        pipelines=[Pipeline("chunk_ring", STAGES, "producer", ["consumer"], "ready", "free", [b.name for b in ring],
                            copy="tma")],
        steps=steps, params=params,
        options=Recurrence64Options(consumers, slices, STAGES, state_layout, varlen, dw, states, qk),
        # the maps pass of a cut forward (docs/segments.md §4): grid z doubled, the maps as final states, no o
        entries=["recurrence_maps"] if slices > 1 else [],
        note="head-parallel: one CTA per (sequence, value head" + (", 64 value rows" if slices > 1 else "") +
             "); the state stays in registers for the whole sequence")
