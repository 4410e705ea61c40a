"""GraphBuilder: adds typed nodes to a networkx DiGraph, applying each op's shape rule.

Node attributes: op, shape, kind, dtype, args (the ordered operand ids; authoritative when an
operand repeats, as in x*x), plus op-specific ones (value, name, eps, threshold, dim, ...). Edge
attribute `arg` is the operand position (the first one, for a repeated operand). Op nodes are named
"<op>_<n>" with one counter per builder, so ids are unique and stable for a given build order.
"""
from __future__ import annotations

import math
from numbers import Real

import networkx as nx

from .errors import DSLError, RuleError
from .expr import Value
from .ops import OPS
from .shapes import DEFAULT_DTYPE


class GraphBuilder:
    """Owns a graph; Values from it build nodes through add_op."""

    allow_backward_ops = True

    def __init__(self, name: str, first_id: int = 0):
        self.name = name
        self.graph = nx.DiGraph(name=name)
        self._next = first_id
        self._consts: dict[float, str] = {}

    def value(self, node_id: str) -> Value:
        return Value(self, node_id)

    def _fresh(self, op: str) -> str:
        node_id = f"{op}_{self._next}"
        self._next += 1
        return node_id

    def _add_node(self, node_id: str, args=(), **attrs) -> Value:
        if node_id in self.graph:
            raise DSLError(node_id, "a node with this id already exists")
        self.graph.add_node(node_id, args=tuple(args), **attrs)
        for pos, arg in enumerate(args):
            if not self.graph.has_edge(arg, node_id):
                self.graph.add_edge(arg, node_id, arg=pos)
        self._changed()
        return self.value(node_id)

    def _changed(self):
        """Hook: a Recurrence forgets that it was checked."""

    def const(self, value) -> Value:
        """A constant node; one node per distinct value."""
        if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
            raise DSLError(f"const_{self._next}", f"a constant must be a finite real number, got {value!r}")
        value = float(value)
        if value not in self._consts:
            self._consts[value] = self._add_node(self._fresh("const"), op="const", shape=(), kind="const",
                                                 dtype=DEFAULT_DTYPE, value=value).id
        return self.value(self._consts[value])

    def lift(self, x, node_id: str, pos) -> Value:
        """Operand `pos` of node_id as a Value of this graph, from a Value or a Python number."""
        if isinstance(x, Value):
            if x.builder is not self:
                raise DSLError(node_id, f"operand {pos} ({x.id!r}) belongs to graph {x.builder.name!r}, "
                                        f"not {self.name!r}")
            return x
        if isinstance(x, Real) and not isinstance(x, bool):
            return self.const(x)
        raise DSLError(node_id, f"operand {pos} must be a DSL value or a number, got {type(x).__name__}")

    def add_op(self, op_name: str, args, **attrs) -> Value:
        op = OPS.get(op_name)
        if op is None:
            raise DSLError(op_name, f"unknown op {op_name!r} (known: {', '.join(sorted(OPS))})")
        node_id = self._fresh(op_name)
        if not (op.prologue or self.allow_backward_ops):
            raise DSLError(node_id, f"{op_name} exists only in backward graphs")
        if len(args) != op.arity:
            raise DSLError(node_id, f"{op_name} takes {op.arity} operand(s), got {len(args)}")
        values = [self.lift(a, node_id, pos) for pos, a in enumerate(args)]
        attrs = {**op.defaults, **attrs}
        derived = self.infer(node_id, op_name, [v.id for v in values], attrs)
        return self._add_node(node_id, [v.id for v in values], op=op_name, dtype=DEFAULT_DTYPE,
                              **attrs, **derived)

    def infer(self, node_id: str, op_name: str, args, attrs) -> dict:
        """The op's shape rule on these operands, as a DSLError naming node_id when it fails."""
        operands = [dict(self.graph.nodes[a], id=a) for a in args]
        try:
            return OPS[op_name].shape(operands, attrs)
        except RuleError as e:
            raise DSLError(node_id, f"{op_name}: {e}") from None
