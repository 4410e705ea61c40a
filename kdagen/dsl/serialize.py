"""Graphs as text for people and tools: stable JSON and Graphviz dot (no graphviz dependency)."""
from __future__ import annotations

import json
import math

import networkx as nx


def _plain(v):
    """JSON-safe attribute values: tuples as lists, ±inf as null (an unbounded side)."""
    if isinstance(v, (tuple, list)):
        return [_plain(x) for x in v]
    if isinstance(v, float) and math.isinf(v):
        return None
    return v


def graph_to_json(graph: nx.DiGraph, **header) -> str:
    """Nodes in a stable topological order, edges sorted, keys sorted: equal graphs give equal text."""
    nodes = [{"id": n, **{k: _plain(v) for k, v in graph.nodes[n].items()}}
             for n in nx.lexicographical_topological_sort(graph)]
    edges = sorted(({"src": u, "dst": v, **{k: _plain(x) for k, x in a.items()}}
                    for u, v, a in graph.edges(data=True)), key=lambda e: (e["dst"], e["arg"], e["src"]))
    doc = {**{k: _plain(v) for k, v in header.items()}, "nodes": nodes, "edges": edges}
    return json.dumps(doc, sort_keys=True, indent=1, allow_nan=False)


def _quote(s) -> str:
    return '"' + str(s).replace('"', '\\"') + '"'


def _label(node_id: str, a: dict) -> str:
    """id, op, type, and the value (consts) or role (seeds); lines joined by dot's \\n escape."""
    kind = f"({', '.join(a['shape'])}) {a['kind']}"
    extra = a.get("value", a.get("role", ""))
    return "\\n".join(str(x) for x in (node_id, a["op"], kind, extra) if x != "")


_SHAPES = {"token_input": "box", "head_param": "box", "scalar": "box", "const": "plaintext",
           "seed": "invhouse", "grad": "house", "saved": "box3d", "delta_rule": "doubleoctagon"}


def graph_to_dot(graph: nx.DiGraph, name: str) -> str:
    lines = [f"digraph {_quote(name)} {{", "  rankdir=TB;"]
    for n in nx.lexicographical_topological_sort(graph):
        a = graph.nodes[n]
        style = ", style=filled, fillcolor=lightblue" if a.get("saved") else ""
        lines.append(f"  {_quote(n)} [shape={_SHAPES.get(a['op'], 'ellipse')}, "
                     f"label={_quote(_label(n, a))}{style}];")
    for u, v, a in sorted(graph.edges(data=True), key=lambda e: (e[1], e[2]["arg"], e[0])):
        lines.append(f"  {_quote(u)} -> {_quote(v)} [label={_quote(a.get('role', a['arg']))}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
