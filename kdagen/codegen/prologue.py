"""The recurrence-specific part of a prepare kernel: the prologue block and the inputs it reads.

`forward_prologue(r, dtypes)` emits the forward graph from the leaves to the core operands (query,
key, decay, beta, scale) into the names prepare uses: q_hat[KPT], k_hat[KPT], decay[KPT] or decay,
beta_val, scale_val. With `row_scaled` (query and key each a row input x or l2norm(x):
Facts.qk_row_scaled), q_hat and k_hat are x as loaded and each l2norm's number per row,
(Σx² + ε)^−1/2, is emitted as q_rs / k_rs (`row_scaled_outputs`; `row_scales` names those emitted;
a query without l2norm has none: its number is 1). `inputs` tells the template which pointer each
leaf needs (its kernel parameter `param`, the pointer `ptr` the block reads through, and its head
space: q/k inputs live on the H q/k heads, everything else on the HV value heads).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

from ..dsl import rowsum, rsqrt, square
from ..dsl.expr import Value
from ..plan.families.base import input_param, l2norm_split
from ..plan.problem import head_space
from .expr import Block, emit

FORWARD_OUTPUTS = {"q_hat": "query", "k_hat": "key", "decay": "decay", "beta_val": "beta", "scale_val": "scale"}


@dataclass(frozen=True)
class Prologue:
    block: Block
    inputs: tuple          # dicts: name, kind ("token" | "head"), row (bool), heads ("H" | "HV"), dtype
    scalars: tuple
    row_scales: tuple = ()  # the emitted row numbers (q_rs, k_rs) of a row_scaled prologue


def core_outputs(r) -> dict:
    """The prologue's output names -> recurrence r's core operand nodes."""
    ops = r.core_operands()
    return {out: ops[role] for out, role in FORWARD_OUTPUTS.items()}


def row_scaled_outputs(r) -> tuple:
    """(a copy of r, the outputs to emit, the row numbers among them) for a row-scaled prologue: an l2norm(x)
    query or key becomes x as loaded (q_hat, k_hat) and rsqrt(rowsum(square(x)) + ε) (q_rs, k_rs), nodes added to
    the copy; l2norm's own form, so q_hat·q_rs is what l2norm emits."""
    outputs = core_outputs(r)
    r, row_scales = copy.deepcopy(r), ()
    for out in ("q", "k"):
        x, eps = l2norm_split(r.graph, outputs[f"{out}_hat"])
        if eps is not None:
            outputs[f"{out}_hat"] = x
            outputs[f"{out}_rs"] = rsqrt(rowsum(square(Value(r, x))) + eps).id
            row_scales += (f"{out}_rs",)
    return r, outputs, row_scales


def forward_prologue(r, leaf_dtypes: dict, row_scaled: bool = False) -> Prologue:
    """The prologue of recurrence r; leaf_dtypes maps each kernel parameter to its planned element type."""
    r, outputs, row_scales = row_scaled_outputs(r) if row_scaled else (r, core_outputs(r), ())
    block = emit(r.graph, outputs)
    inputs = []
    for name in block.leaves:
        a = r.graph.nodes[name]
        param = input_param(name)
        inputs.append({"name": name, "param": param, "ptr": f"{param}_row", "kind": a["kind"], "row": bool(a["shape"]),
                       "heads": head_space(r, name), "dtype": leaf_dtypes[param]})
    return Prologue(block, tuple(inputs), tuple(r.scalars), row_scales)
