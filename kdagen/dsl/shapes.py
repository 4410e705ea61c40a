"""The type system of DSL values: symbolic shapes over the dims, kinds, dtypes.

A value's `shape` is what it holds per token and head: () or one row dim. T is never written: a
value of kind "token" varies over tokens implicitly. `kind` orders what a value varies over; an
elementwise op's result varies over the most of its operands (a per-head param meeting a token value
broadcasts over tokens).
"""
from __future__ import annotations

from .errors import RuleError

DIMS = ("T", "K", "V")
ROW_DIMS = ("K", "V")
KINDS = ("const", "scalar", "head", "token")
DTYPES = ("f32", "bf16", "f16", "f64")
DEFAULT_DTYPE = "f32"


def join_kind(kinds) -> str:
    return max(kinds, key=KINDS.index)


def differentiable(kind: str) -> bool:
    """Token values and per-head values depend on inputs or parameters; scalars and consts do not."""
    return kind in ("head", "token")


def row_shape(dim, what: str) -> tuple:
    """The shape () or (dim,) of an input or parameter, checking the dim."""
    if dim is None:
        return ()
    if dim == "T":
        why = "T is implicit for token inputs" if what == "a token input" else "it does not vary over tokens"
        raise RuleError(f"{what} cannot have dim 'T': {why}")
    if dim not in ROW_DIMS:
        raise RuleError(f"unknown dim {dim!r} for {what} (known dims: {', '.join(DIMS)})")
    return (dim,)


def broadcast_shape(operands: list[dict]) -> tuple:
    """Elementwise ops take shapes that are equal or (); () broadcasts along the row."""
    rows = {tuple(a["shape"]) for a in operands} - {()}
    if len(rows) > 1:
        listing = ", ".join(f"{a['id']!r} has {tuple(a['shape'])}" for a in operands)
        raise RuleError(f"shape mismatch: {listing}")
    return rows.pop() if rows else ()
