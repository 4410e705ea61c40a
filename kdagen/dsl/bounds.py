"""Interval analysis: sound (lo, hi) bounds of every node from its op's interval rule.

The planner reads the decay's bounds to choose the chunk size and the exponent form: a decay
proven in [lb, 0] allows the factored 2^(±Γ) form; an unbounded one needs relative masks.
Leaves are unbounded unless declared (token_input(..., bounds=(lo, hi))); consts are exact.
`dims` (e.g. {"K": 128}) makes sums over a dim exact; without it a sum of ≥ 1 terms is assumed.
"""
from __future__ import annotations

import networkx as nx

from .errors import DSLError
from .interval_math import UNBOUNDED
from .ops import GRAD_OP, OPS


def intervals(graph: nx.DiGraph, dims: dict | None = None) -> dict:
    """node id -> (lo, hi) for every node of a forward or backward graph."""
    out = {}
    for node_id in nx.lexicographical_topological_sort(graph):
        a = graph.nodes[node_id]
        if a["op"] == "const":
            out[node_id] = (a["value"], a["value"])
        elif a["op"] in OPS:
            out[node_id] = OPS[a["op"]].interval([out[x] for x in a["args"]], a, dims)
        elif a["op"] == GRAD_OP:
            out[node_id] = out[a["args"][0]]
        else:   # leaves (declared or unbounded), seeds, saved values, the core's output
            out[node_id] = a.get("bounds") or UNBOUNDED
    return out


def interval(r, node: str, dims: dict | None = None) -> tuple[float, float]:
    """Bounds of one node of r (a Recurrence or a Backward: anything with .graph)."""
    if node not in r.graph:
        raise DSLError(node, "no such node")
    return intervals(r.graph, dims)[node]
