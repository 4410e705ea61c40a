"""Handles on graph nodes with Python operators, and the op functions of the DSL surface.

A `Value` is a node id plus the builder that owns the graph; arithmetic on it adds nodes through
`builder.add_op`, which applies the op's shape rule. Python numbers become const nodes. The same
handles write the forward prologue (in a Recurrence) and the adjoint rules (in the backward graph).
"""
from __future__ import annotations

from numbers import Real

from .errors import DSLError


class Value:
    __slots__ = ("builder", "id")

    def __init__(self, builder, node_id: str):
        self.builder, self.id = builder, node_id

    @property
    def attrs(self) -> dict:
        return self.builder.graph.nodes[self.id]

    @property
    def shape(self) -> tuple:
        return self.attrs["shape"]

    @property
    def kind(self) -> str:
        return self.attrs["kind"]

    def __repr__(self):
        return f"Value({self.id!r}, op={self.attrs['op']}, shape={self.shape}, kind={self.kind})"

    def __bool__(self):
        raise TypeError(f"DSL value {self.id!r} has no truth value: it is symbolic")

    def __add__(self, other):
        return self.builder.add_op("add", (self, other))

    def __radd__(self, other):
        return self.builder.add_op("add", (other, self))

    def __sub__(self, other):
        return self.builder.add_op("sub", (self, other))

    def __rsub__(self, other):
        return self.builder.add_op("sub", (other, self))

    def __mul__(self, other):
        return self.builder.add_op("mul", (self, other))

    def __rmul__(self, other):
        return self.builder.add_op("mul", (other, self))

    def __truediv__(self, other):
        return self.builder.add_op("div", (self, other))

    def __rtruediv__(self, other):
        return self.builder.add_op("div", (other, self))

    def __neg__(self):
        return self.builder.add_op("neg", (self,))


def apply(op: str, *args, **attrs) -> Value:
    """Add `op` on args to the graph of the first DSL value among them."""
    owner = next((a for a in args if isinstance(a, Value)), None)
    if owner is None:
        bad = ", ".join(type(a).__name__ if not isinstance(a, Real) else repr(a) for a in args)
        raise DSLError(op, f"{op}({bad}) needs at least one DSL value among its operands")
    return owner.builder.add_op(op, args, **attrs)


def _op(name: str, doc: str):
    def fn(*args):
        return apply(name, *args)
    fn.__name__, fn.__doc__ = name, doc
    return fn


add = _op("add", "x + y (elementwise, () broadcasts along the row)")
sub = _op("sub", "x − y")
mul = _op("mul", "x · y")
div = _op("div", "x / y")
neg = _op("neg", "−x")
exp = _op("exp", "e^x")
log = _op("log", "natural log")
sigmoid = _op("sigmoid", "1 / (1 + e^−x)")
softplus = _op("softplus", "log(1 + e^x), = x above FLA's threshold 20")
square = _op("square", "x²")
rsqrt = _op("rsqrt", "x^−1/2")
rowsum = _op("rowsum", "Σ over the row dim: (D,) → ()")
l2norm = _op("l2norm", "x·(Σx² + ε)^−1/2 over the row (FLA's ε = 1e-6)")


def expand(x: Value, dim: str) -> Value:
    """() → (dim,): the row-broadcast that rowsum's adjoint needs."""
    return apply("expand", x, dim=dim)
