"""The expression emitter: a DSL graph (forward prologue or backward adjoint) as a block of CUDA.

The block is straight-line code for one token row as one thread sees it: values with a row dim are
`float n_<id>[KPT]` arrays (this thread's KPT channels of the row, filled by unrolled loops); per-token
and per-head scalars are `float n_<id>`. A reduction over the row (l2norm, rowsum) sums the thread's
slice and then calls `row_sum(x)`, which the kernel defines for its thread layout (a shuffle over the
threads sharing a row). Leaves are read through names the kernel defines before the block:

  token input X       in_X_row  pointer to this thread's first element of the current token (on X's head)
                      and `valid` (false on a chunk's tail rows: inputs read as 0)
  per-head param X    in_X_row  pointer to this thread's slice (row params) or the head's value
  scalar X            sc_X      the kernel argument
  seed d_<role>       seed_<role>     (backward: the core's adjoint for that operand)
  saved / given node  given_<id>      (a value the kernel already holds)

The block ends by copying the requested outputs into the names the caller chose (`float out[KPT]` or
`float out`). Nothing here knows about a particular kernel: prepare and prepare_bwd bind the same way.
Every name derived from a user's choice carries a prefix (`in_`, `sc_`, `n_`, `seed_`, `given_`) that no
kernel uses for its own variables, so any valid identifier works as an input name.
"""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from ..plan.families.base import input_param, scalar_param


ROW_DIM = "K"            # rows the kernels hold per thread; prologues on V rows are not planned
LEAVES = ("token_input", "head_param", "scalar", "const")

_ELEMENTWISE = {
    "add": "({0} + {1})",
    "sub": "({0} - {1})",
    "mul": "({0} * {1})",
    "div": "({0} / {1})",
    "neg": "(-{0})",
    "exp": "expf({0})",
    "log": "logf({0})",
    "sigmoid": "kdg::sigmoid({0})",
    "softplus": "kdg::softplus({0}, {threshold})",
    "square": "kdg::square({0})",
    "rsqrt": "rsqrtf({0})",
}


class CodegenError(ValueError):
    """A graph the emitter cannot turn into CUDA (the message names the node)."""


@dataclass(frozen=True)
class Block:
    """Emitted code and what it reads: leaf names (for the kernel's pointers) and given nodes."""
    code: str
    leaves: tuple
    given: tuple


def var(node_id: str) -> str:
    return f"n_{node_id}"


def c_float(x: float) -> str:
    s = repr(float(x))
    if "e" not in s and "." not in s:
        s += ".0"
    return s + "f"


def needed_nodes(graph: nx.DiGraph, outputs, given=()) -> list[str]:
    """The nodes the outputs depend on, stopping at given nodes, in a stable topological order."""
    given = set(given)
    need, stack = set(), list(outputs)
    while stack:
        n = stack.pop()
        if n in need:
            continue
        if n not in graph:
            raise CodegenError(f"node {n!r}: not in graph {graph.graph.get('name', '?')!r}")
        need.add(n)
        if n not in given:
            stack.extend(graph.nodes[n]["args"])
    return [n for n in nx.lexicographical_topological_sort(graph) if n in need]


def _is_row(a: dict, node_id: str) -> bool:
    shape = tuple(a["shape"])
    if shape and shape != (ROW_DIM,):
        raise CodegenError(f"node {node_id!r}: a row of dim {shape[0]!r}; kernels emit prologue rows over "
                           f"{ROW_DIM!r} only (the value operand must be a plain token input)")
    return bool(shape)


def _at(graph, node_id: str) -> str:
    """The element of node_id that goes with channel slot j (a scalar broadcasts)."""
    return f"{var(node_id)}[j]" if _is_row(graph.nodes[node_id], node_id) else var(node_id)


def _loop(body: str) -> str:
    return f"#pragma unroll\nfor (int j = 0; j < KPT; ++j) {body}"


def _leaf(node_id: str, a: dict, given: set) -> str:
    row = _is_row(a, node_id)
    v = var(node_id)
    if node_id in given or a["op"] in ("seed", "saved"):
        src = f"seed_{a['role']}" if a["op"] == "seed" else f"given_{node_id}"
        return f"const float (&{v})[KPT] = {src};" if row else f"const float {v} = {src};"
    op = a["op"]
    if op == "const":
        return f"const float {v} = {c_float(a['value'])};"
    if op == "scalar":
        return f"const float {v} = {scalar_param(a['name'])};"
    ptr = f"{input_param(a['name'])}_row"
    if op == "token_input":
        if row:
            return f"float {v}[KPT];\nkdg::load_row({v}, {ptr}, valid);"
        return f"const float {v} = valid ? kdg::to_f32(*{ptr}) : 0.f;"
    if op == "head_param":
        if row:
            return f"float {v}[KPT];\nkdg::load_row({v}, {ptr}, true);"
        return f"const float {v} = *{ptr};"
    raise CodegenError(f"node {node_id!r}: op {op!r} has no value in a kernel (not a leaf, seed or saved node)")


def _op(graph, node_id: str, a: dict) -> str:
    op, args, v = a["op"], a["args"], var(node_id)
    row = _is_row(a, node_id)
    if op in _ELEMENTWISE:
        attrs = {"threshold": c_float(a["threshold"])} if op == "softplus" else {}
        expr = _ELEMENTWISE[op].format(*(_at(graph, x) for x in args), **attrs)
        return f"float {v}[KPT];\n" + _loop(f"{v}[j] = {expr};") if row else f"const float {v} = {expr};"
    if op == "l2norm":
        x = var(args[0])
        return (f"float {v}[KPT];\n{{\n  float ss = 0.f;\n  " + _loop(f"ss += {x}[j] * {x}[j];").replace("\n", "\n  ")
                + f"\n  const float r = rsqrtf(row_sum(ss) + {c_float(a['eps'])});\n  "
                + _loop(f"{v}[j] = {x}[j] * r;").replace("\n", "\n  ") + "\n}")
    if op == "rowsum":
        x = var(args[0])
        return (f"float {v};\n{{\n  float s = 0.f;\n  " + _loop(f"s += {x}[j];").replace("\n", "\n  ")
                + f"\n  {v} = row_sum(s);\n}}")
    if op == "expand":
        return f"float {v}[KPT];\n" + _loop(f"{v}[j] = {var(args[0])};")
    if op in ("sum_tokens", "grad"):
        # per-token value of a token sum (the kernel reduces over tokens) / a named gradient
        src = var(args[0])
        return f"const float (&{v})[KPT] = {src};" if row else f"const float {v} = {src};"
    known = ", ".join(sorted([*_ELEMENTWISE, "l2norm", "rowsum", "expand", "sum_tokens", "grad"]))
    raise CodegenError(f"node {node_id!r}: op {op!r} has no CUDA form (emitter knows: {known})")


def emit(graph: nx.DiGraph, outputs: dict, given=()) -> Block:
    """CUDA for the nodes `outputs` (C name -> node id) depend on; `given` nodes are read, not computed."""
    given = set(given)

    def is_leaf(n: str) -> bool:
        return n in given or graph.nodes[n]["op"] in LEAVES or graph.nodes[n]["op"] in ("seed", "saved")

    # leaves first (a stable sort keeps the topological order otherwise): every global load is issued before the
    # first arithmetic waits on one, so a block's loads share one memory latency instead of one each
    nodes = sorted(needed_nodes(graph, outputs.values(), given), key=lambda n: not is_leaf(n))
    lines, leaves = [], []
    for n in nodes:
        a = graph.nodes[n]
        if is_leaf(n):
            lines.append(f"// {n}: {a['op']}")
            lines.append(_leaf(n, a, given))
            if a["op"] in ("token_input", "head_param") and n not in given:
                leaves.append(a["name"])
        elif a["op"] == "delta_rule":
            raise CodegenError(f"node {n!r}: the core is not part of an emitted block (ask for its operands)")
        else:
            lines.append(f"// {n} = {a['op']}({', '.join(a['args'])})")
            lines.append(_op(graph, n, a))
    for name, n in outputs.items():
        a = graph.nodes[n]
        if _is_row(a, n):
            lines.append(f"float {name}[KPT];\n" + _loop(f"{name}[j] = {var(n)}[j];"))
        else:
            lines.append(f"const float {name} = {var(n)};")
    return Block("\n".join(lines) + "\n", tuple(sorted(set(leaves))), tuple(sorted(given & set(nodes))))
