"""Closed-interval arithmetic on floats with ±inf, for the ops' interval rules.

Intervals are (lo, hi) with lo ≤ hi; an unbounded side is ±inf. Products use 0·inf = 0, the
convention that keeps bounds sound for values that are exactly zero.
"""
from __future__ import annotations

import math

INF = math.inf
UNBOUNDED = (-INF, INF)


def _mul(x: float, y: float) -> float:
    return 0.0 if x == 0 or y == 0 else x * y


def _safe(lo: float, hi: float) -> tuple[float, float]:
    return (-INF if math.isnan(lo) else lo, INF if math.isnan(hi) else hi)


def add(a, b):
    return _safe(a[0] + b[0], a[1] + b[1])


def neg(a):
    return (-a[1], -a[0])


def sub(a, b):
    return add(a, neg(b))


def mul(a, b):
    products = [_mul(x, y) for x in a for y in b]
    return (min(products), max(products))


def div(a, b):
    if b[0] <= 0 <= b[1]:
        return UNBOUNDED
    return mul(a, (1 / b[1], 1 / b[0]))


def increasing(f, a):
    """Image of a monotone increasing f (defined at ±inf)."""
    return (f(a[0]), f(a[1]))


def exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return INF


def log(x: float) -> float:
    return math.log(x) if x > 0 else -INF


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


def softplus(x: float, threshold: float) -> float:
    return x if x > threshold else math.log1p(math.exp(x))


def rsqrt(a):
    """Image of x^-1/2 on the positive part of a (decreasing)."""
    lo = 1 / math.sqrt(a[1]) if a[1] > 0 else INF
    hi = 1 / math.sqrt(a[0]) if a[0] > 0 else INF
    return (lo, hi)


def square(a):
    lo, hi = a
    if lo >= 0:
        return (lo * lo, hi * hi)
    if hi <= 0:
        return (hi * hi, lo * lo)
    return (0.0, max(lo * lo, hi * hi))


def unit_row(a):
    """Each entry of x/‖x‖ lies in [-1, 1], keeping the sign when x's entries share one."""
    return (-1.0 if a[0] < 0 else 0.0, 1.0 if a[1] > 0 else 0.0)


def row_sum(a, n: int | None):
    """Sum of n ≥ 1 terms in a; n unknown (None) leaves unbounded any side that can grow."""
    if n is not None:
        return (_mul(n, a[0]), _mul(n, a[1]))
    return (a[0] if a[0] >= 0 else -INF, a[1] if a[1] <= 0 else INF)
