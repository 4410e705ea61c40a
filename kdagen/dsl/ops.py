"""The op vocabulary: each op carries its shape rule, adjoint rule, interval rule and evaluation.

- shape(operands, attrs) -> {"shape", "kind"[, derived attrs]}: operands are the operand nodes'
  attribute dicts (with "id"); raises RuleError on a malformed use.
- adjoint(ctx, i) -> Value: the contribution to operand i's gradient, written with DSL values in the
  backward graph (ctx.dy is the incoming gradient, ctx.arg(j) and ctx.out the forward values). It is
  asked only for operands that need a gradient, so it pulls in only the forward values it uses.
- interval(ivs, attrs, dims) -> (lo, hi): bounds of the result from the operands' bounds.
- evaluate(tensors, attrs, dims) -> tensor (float64 torch, the interpreter's layout).

`elementwise` ops get their operands broadcast to the result's layout before evaluate. `prologue`
ops may appear in a forward recurrence; the others exist only in backward graphs (sum_tokens: the
reduction of a per-head parameter's gradient over tokens).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

from ..reference.prologue import L2_EPS, SOFTPLUS_THRESHOLD
from . import interval_math as im
from .expr import expand, rowsum, rsqrt, sigmoid, square
from .errors import RuleError
from .shapes import ROW_DIMS, broadcast_shape, join_kind


@dataclass(frozen=True)
class Op:
    name: str
    arity: int
    shape: Callable
    adjoint: Callable | None
    interval: Callable
    evaluate: Callable
    elementwise: bool = True
    prologue: bool = True
    defaults: dict = field(default_factory=dict)


def _same(operands, attrs):
    return {"shape": operands[0]["shape"], "kind": operands[0]["kind"]}


def _broadcast(operands, attrs):
    return {"shape": broadcast_shape(operands), "kind": join_kind(a["kind"] for a in operands)}


def _row(operands, attrs):
    x = operands[0]
    if not x["shape"]:
        raise RuleError(f"needs a row (shape ('K',) or ('V',)), but operand {x['id']!r} has shape ()")
    return {"shape": x["shape"], "kind": x["kind"]}


def _rowsum_shape(operands, attrs):
    x = _row(operands, attrs)
    return {"shape": (), "kind": x["kind"], "dim": x["shape"][0]}


def _expand_shape(operands, attrs):
    x, dim = operands[0], attrs.get("dim")
    if x["shape"]:
        raise RuleError(f"expands a value of shape (), but operand {x['id']!r} has shape {x['shape']}")
    if dim not in ROW_DIMS:
        raise RuleError(f"unknown row dim {dim!r} (known: {', '.join(ROW_DIMS)})")
    return {"shape": (dim,), "kind": x["kind"]}


def _sum_tokens_shape(operands, attrs):
    x = operands[0]
    if x["kind"] != "token":
        raise RuleError(f"sums over tokens, but operand {x['id']!r} is of kind {x['kind']!r}")
    return {"shape": x["shape"], "kind": "head"}


def _sum_interval(dim_of):
    """Bounds of a sum over a dim; exact when `dims` gives its size, else any size ≥ 1."""
    def rule(ivs, attrs, dims):
        return im.row_sum(ivs[0], (dims or {}).get(dim_of(attrs)))
    return rule


def _l2norm(x, attrs, dims):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + attrs["eps"])


def _l2norm_adjoint(c, i):
    x, y, dy = c.arg(0), c.out, c.dy
    r = rsqrt(rowsum(square(x)) + c.attrs["eps"])
    return r * (dy - y * rowsum(dy * y))


def _binary(name, evaluate, interval, adjoint):
    return Op(name, 2, _broadcast, adjoint, lambda ivs, a, d: interval(*ivs), lambda t, a, d: evaluate(*t))


def _unary(name, evaluate, interval, adjoint, **kw):
    return Op(name, 1, _same, adjoint, interval, lambda t, a, d: evaluate(t[0], a), **kw)


_OPS = [
    _binary("add", torch.add, im.add, lambda c, i: c.dy),
    _binary("sub", torch.sub, im.sub, lambda c, i: c.dy if i == 0 else -c.dy),
    _binary("mul", torch.mul, im.mul, lambda c, i: c.dy * c.arg(1 - i)),
    _binary("div", torch.div, im.div, lambda c, i: c.dy / c.arg(1) if i == 0 else -(c.dy * c.out) / c.arg(1)),
    _unary("neg", lambda x, a: -x, lambda ivs, a, d: im.neg(ivs[0]), lambda c, i: -c.dy),
    _unary("exp", lambda x, a: x.exp(), lambda ivs, a, d: im.increasing(im.exp, ivs[0]),
           lambda c, i: c.dy * c.out),
    _unary("log", lambda x, a: x.log(), lambda ivs, a, d: im.increasing(im.log, ivs[0]),
           lambda c, i: c.dy / c.arg(0)),
    _unary("sigmoid", lambda x, a: torch.sigmoid(x), lambda ivs, a, d: im.increasing(im.sigmoid, ivs[0]),
           lambda c, i: c.dy * c.out * (1 - c.out)),
    _unary("softplus", lambda x, a: F.softplus(x, threshold=a["threshold"]),
           lambda ivs, a, d: im.increasing(lambda x: im.softplus(x, a["threshold"]), ivs[0]),
           lambda c, i: c.dy * sigmoid(c.arg(0)), defaults={"threshold": SOFTPLUS_THRESHOLD}),
    _unary("square", lambda x, a: x * x, lambda ivs, a, d: im.square(ivs[0]),
           lambda c, i: c.dy * (2 * c.arg(0))),
    _unary("rsqrt", lambda x, a: torch.rsqrt(x), lambda ivs, a, d: im.rsqrt(ivs[0]),
           lambda c, i: c.dy * (-0.5 * c.out * c.out * c.out)),
    Op("l2norm", 1, _row, _l2norm_adjoint, lambda ivs, a, d: im.unit_row(ivs[0]),
       lambda t, a, d: _l2norm(t[0], a, d), elementwise=False, defaults={"eps": L2_EPS}),
    Op("rowsum", 1, _rowsum_shape, lambda c, i: expand(c.dy, c.attrs["dim"]),
       _sum_interval(lambda a: a["dim"]), lambda t, a, d: t[0].sum(-1), elementwise=False),
    Op("expand", 1, _expand_shape, lambda c, i: rowsum(c.dy), lambda ivs, a, d: ivs[0],
       lambda t, a, d: t[0].unsqueeze(-1).expand(*t[0].shape, d[a["dim"]]), elementwise=False),
    Op("sum_tokens", 1, _sum_tokens_shape, None, _sum_interval(lambda a: "T"),
       lambda t, a, d: t[0].sum((0, 1)), elementwise=False, prologue=False),
]

OPS: dict[str, Op] = {op.name: op for op in _OPS}

# Leaves of forward graphs (their values come from the call). Backward graphs add the leaves "seed"
# (the core's adjoints) and "saved" (saved forward values), and the named outputs GRAD_OP.
LEAF_OPS = ("token_input", "head_param", "scalar", "const")
GRAD_OP = "grad"
