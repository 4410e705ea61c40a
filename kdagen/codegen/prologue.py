"""The recurrence-specific part of a prepare kernel: the prologue block and the inputs it reads.

`forward_prologue(r, dtypes)` emits the forward graph from the leaves to the core operands (query,
key, decay, beta, scale) into the names prepare uses: q_hat[KPT], k_hat[KPT], decay[KPT] or decay,
beta_val, scale_val. `inputs` tells the template which pointer each leaf needs (its kernel parameter
`param`, the pointer `ptr` the block reads through, and its head space: q/k inputs live on the H q/k
heads, everything else on the HV value heads).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..plan.families.base import input_param
from ..plan.problem import head_space
from .expr import Block, emit

FORWARD_OUTPUTS = {"q_hat": "query", "k_hat": "key", "decay": "decay", "beta_val": "beta", "scale_val": "scale"}


@dataclass(frozen=True)
class Prologue:
    block: Block
    inputs: tuple          # dicts: name, kind ("token" | "head"), row (bool), heads ("H" | "HV"), dtype
    scalars: tuple


def forward_prologue(r, leaf_dtypes: dict) -> Prologue:
    """The prologue of recurrence r; leaf_dtypes maps each kernel parameter to its planned element type."""
    ops = r.core_operands()
    block = emit(r.graph, {out: ops[role] for out, role in FORWARD_OUTPUTS.items()})
    inputs = []
    for name in block.leaves:
        a = r.graph.nodes[name]
        param = input_param(name)
        inputs.append({"name": name, "param": param, "ptr": f"{param}_row", "kind": a["kind"], "row": bool(a["shape"]),
                       "heads": head_space(r, name), "dtype": leaf_dtypes[param]})
    return Prologue(block, tuple(inputs), tuple(r.scalars))
