"""The recurrence-specific part of prepare_bwd: four emitted blocks and the names that bind them.

`backward_prologue(r, ctypes)` is what both families' prepare_bwd templates read as `k1`:
  qk_fwd  q̂, k̂ of the q/k head (recomputed)
  v_fwd   the decay a and β of a value head (recomputed)
  v_bwd   the adjoint of the value head's inputs and head parameters, seeded with d_decay, d_beta
  qk_bwd  the adjoint of the q/k inputs, seeded with the GVA-summed dq̂, dk̂ (q̂, k̂ given from shared memory)
A head parameter's gradient leaves v_bwd as a per-token term; prepare_bwd sums it over the chunk's rows and
param_reduce over chunks. That is exact because an adjoint is linear in its seeds: whatever follows the
DSL's sum_tokens node (e.g. the factor e^A_log) distributes over the sum.
"""
from __future__ import annotations

import networkx as nx

from ..dsl import autodiff
from ..plan.families.base import grad_param, input_param, scalar_param
from ..plan.problem import qk_inputs as problem_qk_inputs
from .expr import CodegenError, c_float, emit


def _ancestors_of(graph: nx.DiGraph, nodes, op: str) -> list[str]:
    found = set()
    for n in nodes:
        found |= {a for a in nx.ancestors(graph, n) | {n} if graph.nodes[a]["op"] == op}
    return sorted(found)


def backward_prologue(r, ctypes: dict) -> dict:
    """The blocks, their bindings, the token gradients and head parameters of recurrence r; ctypes maps each
    kernel parameter to the C element type the plan gives it. The blocks' outputs are named d_<input>."""
    ops = r.core_operands()
    b = autodiff.backward(r, saved=())
    qk_inputs = problem_qk_inputs(r)
    v_inputs = [n for n in r.token_inputs if n not in qk_inputs and n != ops["value"]]
    for name in _ancestors_of(r.graph, (ops["query"], ops["key"]), "head_param"):
        raise CodegenError(f"node {name!r}: a head parameter feeding the query/key, which live on the q/k heads; "
                           "prepare_bwd binds head parameters per value head")
    for name in qk_inputs:
        if tuple(r.graph.nodes[name]["shape"]) != ("K",):
            raise CodegenError(f"node {name!r}: a token input feeding the query/key but not a K row")
    blocks = {
        "qk_fwd": emit(r.graph, {"qh_out": ops["query"], "kh_out": ops["key"]}),
        "v_fwd": emit(r.graph, {"a_out": ops["decay"], "beta_out": ops["beta"]}),
        "v_bwd": emit(b.graph, {f"d_{n}": b.outputs[n] for n in v_inputs + list(r.head_params)}),
        "qk_bwd": emit(b.graph, {f"d_{n}": b.outputs[n] for n in qk_inputs}, given=(ops["query"], ops["key"])),
    }
    for key in ("v_fwd", "v_bwd"):
        stray = set(blocks[key].leaves) & set(qk_inputs)
        if stray:
            raise CodegenError(f"node {sorted(stray)[0]!r}: the decay/β prologue reads it, but it lives on the "
                               "q/k heads")

    def row(name):
        return tuple(r.graph.nodes[name]["shape"]) == ("K",)

    def where(name):                      # this thread's element(s) of a leaf, as the kernel indexes it
        if name in qk_inputs:
            return "(tok * H + jh) * K + d0"
        if name in r.head_params:
            return "h * K + d0" if row(name) else "h"
        return "(tok * HV + h) * K + d0" if row(name) else "tok * HV + h"

    def bind(block):
        """Pointers to the leaves `block` reads, and the given arrays (q̂, k̂ from shared memory)."""
        lines = [f"const {ctypes[input_param(n)]}* {input_param(n)}_row = {input_param(n)} + {where(n)};"
                 for n in block.leaves]
        for node, tile in ((ops["query"], "q_hat"), (ops["key"], "k_hat")):
            if node in block.given:
                lines += [f"float given_{node}[KPT];",
                          f"for (int e = 0; e < KPT; ++e) given_{node}[e] = s_{tile}[i * ld_{tile} + d0 + e];"]
        return "\n".join(lines)

    def store(inputs):
        """The blocks' d_<input> into the input gradients, where `where` indexes the input: a row by its lanes, a
        per-token scalar by the row's first lane; rows past the chunk's end are not stored."""
        return "\n".join(f"if (valid) kdg::store_row({grad_param(n)} + {where(n)}, d_{n});" if row(n) else
                         f"if (valid && rl == 0) store_f32({grad_param(n)} + {where(n)}, d_{n});" for n in inputs)

    scale = r.graph.nodes[ops["scale"]]
    def names(n):
        return {"name": n, "grad": grad_param(n), "row": row(n)}

    return {
        "head_params": [names(n) for n in r.head_params],
        "scale": scalar_param(scale["name"]) if scale["op"] == "scalar" else c_float(scale["value"]),
        "blocks": {k: v.code.rstrip("\n") for k, v in blocks.items()},
        "bind": {k: bind(v) for k, v in blocks.items()},
        "store": {"v_bwd": store(v_inputs), "qk_bwd": store(qk_inputs)},
    }
