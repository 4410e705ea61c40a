"""Reverse-mode autodiff of a recurrence's prologue, around the chunked core's fixed adjoint.

The backward graph reads, as leaves: the forward leaves (same ids), the seeds "d_<role>" (the core's
adjoint for each core operand, see core.backward), and forward op nodes marked saved (op "saved",
`source_op` the forward op). Forward values it needs and that are not saved are recomputed: the
forward node is copied with its id and operands. Its outputs are "grad_<name>" (op "grad") for every
token input and head parameter. Gradients are summed over fan-out in a fixed order; a contribution
to a narrower operand is reduced explicitly: "rowsum" over the row dim, "sum_tokens" for per-head
values (per-head parameter gradients are sums over tokens).
"""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from . import core
from .errors import DSLError
from .expr import Value
from .graph import GraphBuilder
from .ops import GRAD_OP, LEAF_OPS, OPS
from .serialize import graph_to_dot, graph_to_json
from .shapes import differentiable


@dataclass
class Backward:
    """The backward graph of a recurrence's prologue and how it attaches to the core's adjoint."""

    graph: nx.DiGraph
    seeds: dict          # role -> seed node id ("d_<role>")
    outputs: dict        # input or parameter name -> gradient node id ("grad_<name>")
    saved: tuple         # forward op nodes read from the saved workspace
    core: dict           # {"op", "node", "operands": role -> forward id, "decay_kind"}

    def to_json(self) -> str:
        return graph_to_json(self.graph, name=self.graph.graph["name"], seeds=self.seeds, outputs=self.outputs,
                             saved=list(self.saved), core=self.core)

    def to_dot(self) -> str:
        return graph_to_dot(self.graph, self.graph.graph["name"])


class _Builder(GraphBuilder):
    """Backward graph under construction; forward values come in through forward_value."""

    def __init__(self, r, available: set):
        super().__init__(f"{r.name}_backward", first_id=r._next)
        self.r, self.available, self.imported = r, available, set()

    def forward_value(self, node_id: str) -> Value:
        """The forward value of node_id here: a leaf, a saved node, or recomputed from its operands."""
        if node_id not in self.graph:
            self.imported.add(node_id)
            a = {k: v for k, v in self.r.graph.nodes[node_id].items() if k not in ("args", "saved")}
            if a["op"] in LEAF_OPS:
                self._add_node(node_id, **a)
            elif node_id in self.available:
                self._add_node(node_id, **{**a, "op": "saved", "source_op": a["op"]})
            else:
                args = [self.forward_value(x).id for x in self.r.graph.nodes[node_id]["args"]]
                self._add_node(node_id, args, **a)
        return self.value(node_id)

    def reduce_to(self, contribution: Value, target: dict) -> Value:
        """Sum a contribution down to the target's shape and kind (the adjoint of broadcasting)."""
        if contribution.shape != target["shape"]:
            contribution = self.add_op("rowsum", (contribution,))
        if contribution.kind == "token" and target["kind"] == "head":
            contribution = self.add_op("sum_tokens", (contribution,))
        return contribution


class _Adjoint:
    """What an op's adjoint rule sees: dy, its forward operands and output, its attributes."""

    def __init__(self, b: _Builder, node_id: str, dy: Value):
        self.b, self.node_id, self.dy = b, node_id, dy
        self.attrs = b.r.graph.nodes[node_id]

    def arg(self, i: int) -> Value:
        return self.b.forward_value(self.attrs["args"][i])

    @property
    def out(self) -> Value:
        return self.b.forward_value(self.node_id)


def _build(r, available: set) -> tuple[Backward, set]:
    """The backward graph with `available` forward nodes readable; also the forward ids it reads."""
    b = _Builder(r, available)
    fwd = r.graph
    pending: dict[str, list[Value]] = {}

    def contribute(target: str, c: Value):
        pending.setdefault(target, []).append(b.reduce_to(c, fwd.nodes[target]))

    operands = r.core_operands()
    seeds = {}
    for role in core.GRAD_ROLES:
        target = fwd.nodes[operands[role]]
        if differentiable(target["kind"]):
            shape = target["shape"]
            seeds[role] = b._add_node(f"d_{role}", op="seed", role=role, shape=shape, kind="token",
                                      dtype="f32").id
            contribute(operands[role], b.value(seeds[role]))
    outputs = {}
    for node_id in reversed(list(nx.lexicographical_topological_sort(fwd))):
        if node_id not in pending:
            continue
        total = _sum(b, pending.pop(node_id))
        a = fwd.nodes[node_id]
        if a["op"] in LEAF_OPS:
            outputs[a["name"]] = b._add_node(f"grad_{a['name']}", [total.id], op=GRAD_OP, name=a["name"],
                                             shape=a["shape"], kind=a["kind"], dtype="f32").id
            continue
        ctx = _Adjoint(b, node_id, total)
        for i, x in enumerate(a["args"]):
            if differentiable(fwd.nodes[x]["kind"]):
                contribute(x, OPS[a["op"]].adjoint(ctx, i))
    saved = tuple(sorted(n for n, a in b.graph.nodes(data=True) if a["op"] == "saved"))
    info = {"op": core.CORE_OP, "node": r.core, "operands": operands, "decay_kind": r.decay_kind}
    return Backward(b.graph, seeds, outputs, saved, info), b.imported


def _sum(b: _Builder, terms: list[Value]) -> Value:
    total = terms[0]
    for t in terms[1:]:
        total = b.add_op("add", (total, t))
    return total


def mark_saved(r) -> None:
    """Set `saved` on every forward node: save what is O(T·D), recompute the rest.

    An op node is saved when the backward (the prologue adjoint or the core's) reads it and it is a
    per-token row (shape (D,), kind token); per-token scalars, per-head and constant values are
    recomputed. An input, parameter or scalar is marked saved when the backward reads it (the op
    must keep that argument); consts never are.
    """
    _, needed = _build(r, available=set(r.graph))
    needed |= set(r.core_operands().values())
    for node_id, a in r.graph.nodes(data=True):
        if a["op"] in LEAF_OPS:
            a["saved"] = node_id in needed and a["op"] != "const"
        else:
            a["saved"] = node_id in needed and a["kind"] == "token" and bool(a["shape"])
    r.graph.nodes[r.core]["saved"] = False


def backward(r, saved=None) -> Backward:
    """The backward graph of r; `saved` (forward op ids) overrides the marks, e.g. () to recompute all."""
    r.check()
    if saved is None:
        saved = [n for n, a in r.graph.nodes(data=True) if a["saved"] and a["op"] in OPS]
    for n in saved:
        if n not in r.graph or r.graph.nodes[n]["op"] not in OPS:
            raise DSLError(n, "only forward op nodes can be saved (leaves are always available)")
    return _build(r, available=set(saved))[0]
