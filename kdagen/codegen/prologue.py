"""The recurrence-specific part of K1: the prologue block and the inputs it reads.

`forward_prologue(r, dtypes)` emits the forward graph from the leaves to the core operands (query,
key, decay, beta, scale) into the names K1 uses: q_hat[KPT], k_hat[KPT], decay[KPT] or decay,
beta_val, scale_val. `inputs` tells the template which pointer each leaf needs (its head space:
q/k inputs live on the H q/k heads, everything else on the HV value heads).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..plan.problem import head_space
from .expr import Block, CodegenError, emit

# Names the kernels declare themselves: an input or scalar with one of these names would be shadowed.
RESERVED = {"tid", "lane", "warp", "chunk", "h", "HV", "hq", "lo", "hi", "bos", "eos", "t0", "L", "ws_ch", "row", "sub",
            "ch0", "valid", "tok", "row_sum", "C", "K", "KD", "G", "V", "N", "T", "LANES", "KPT", "THREADS", "LOG2E",
            "cu_seqlens", "chunk_offsets", "n", "v0", "o", "ht", "h0", "j", "s", "c", "smem_raw"}
FORWARD_OUTPUTS = {"q_hat": "query", "k_hat": "key", "decay": "decay", "beta_val": "beta", "scale_val": "scale"}


@dataclass(frozen=True)
class Prologue:
    block: Block
    inputs: tuple          # dicts: name, kind ("token" | "head"), row (bool), heads ("H" | "HV"), dtype
    scalars: tuple


def forward_prologue(r, leaf_dtypes: dict) -> Prologue:
    """The K1 prologue of recurrence r; leaf_dtypes maps each input name to its planned element type."""
    ops = r.core_operands()
    for name in [*r.token_inputs, *r.head_params, *r.scalars]:
        if name in RESERVED or name.startswith(("ws_", "s_", "ld_", "stride_", "bar_", "n_")) or name.endswith("_row"):
            raise CodegenError(f"node {name!r}: this input name collides with a name the kernels declare; rename it")
    block = emit(r.graph, {out: ops[role] for out, role in FORWARD_OUTPUTS.items()})
    inputs = []
    for name in block.leaves:
        a = r.graph.nodes[name]
        inputs.append({"name": name, "kind": a["kind"], "row": bool(a["shape"]), "heads": head_space(r, name),
                       "dtype": leaf_dtypes[name]})
    return Prologue(block, tuple(inputs), tuple(r.scalars))
