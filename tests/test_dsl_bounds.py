"""Interval analysis: the decay bounds the planner reads, and soundness of every op's interval rule."""
import math

import pytest
import torch

from kdagen import dsl
from kdagen.dsl import bounds
from kdagen.recurrences import gdn, kda

INF = math.inf


def _in(r, name, b=None):
    return r.token_input(name, "K", bounds=b)


def _decay(decay_fn):
    """The decay interval of a recurrence whose decay is decay_fn(r)."""
    def rec(r):
        q, v, beta = r.token_input("q", "K"), r.token_input("v", "V"), r.token_input("beta")
        r.delta_rule(query=q, key=q, value=v, beta=beta, decay=decay_fn(r), scale=1.0)
    return dsl.build(rec).decay_interval()


def test_lower_bound_gate_is_bounded():
    gate = lambda r: -5.0 * dsl.sigmoid(dsl.exp(r.head_param("A_log")) * (_in(r, "x") + r.head_param("b", "K")))  # noqa
    assert _decay(gate) == (-5.0, 0.0)
    assert kda.build(lower_bound=-5.0, use_gate_in_kernel=True).decay_interval() == (-5.0, 0.0)
    assert kda.build(lower_bound=-2.5, use_gate_in_kernel=True, use_A_log=False).decay_interval() == (-2.5, 0.0)


def test_softplus_gate_is_unbounded_below():
    assert _decay(lambda r: -dsl.exp(r.head_param("A_log")) * dsl.softplus(_in(r, "x"))) == (-INF, 0.0)
    assert kda.build(use_gate_in_kernel=True).decay_interval() == (-INF, 0.0)
    assert gdn.build(use_gate_in_kernel=True, use_dt_bias=False).decay_interval() == (-INF, 0.0)


def test_products_of_bounded_terms():
    assert _decay(lambda r: _in(r, "x", (-2, 3)) * _in(r, "y", (-1, 4))) == (-8.0, 12.0)
    assert _decay(lambda r: _in(r, "x", (0.5, 2)) * _in(r, "y", (-3, -1))) == (-6.0, -0.5)
    assert _decay(lambda r: -3.0 * dsl.sigmoid(_in(r, "x")) * dsl.sigmoid(_in(r, "y"))) == (-3.0, 0.0)
    assert _decay(lambda r: dsl.sigmoid(_in(r, "x")) * _in(r, "y", (-4, -1))) == (-4.0, 0.0)
    assert _decay(lambda r: _in(r, "x", (-2, 3)) * _in(r, "y")) == (-INF, INF)    # one unbounded factor
    assert _decay(lambda r: _in(r, "x", (0, 0)) * _in(r, "y")) == (0.0, 0.0)      # 0·inf = 0: exactly zero


def test_more_rules():
    assert _decay(lambda r: dsl.log(dsl.sigmoid(_in(r, "x")))) == (-INF, 0.0)               # logsigmoid
    assert _decay(lambda r: -dsl.exp(_in(r, "x", (-INF, 0.0)))) == (-1.0, 0.0)
    assert _decay(lambda r: _in(r, "x", (1, 2)) / _in(r, "y", (-4, -1))) == (-2.0, -0.25)
    assert _decay(lambda r: _in(r, "x") / _in(r, "y", (-1, 1))) == (-INF, INF)
    assert _decay(lambda r: -dsl.square(_in(r, "x", (-3, 2)))) == (-9.0, 0.0)
    assert _decay(lambda r: dsl.l2norm(_in(r, "x")) - 1) == (-2.0, 0.0)
    assert _decay(lambda r: dsl.l2norm(_in(r, "x", (0, INF)))) == (0.0, 1.0)
    assert _decay(lambda r: dsl.rsqrt(1 + dsl.square(_in(r, "x")))) == (0.0, 1.0)


def test_row_sums_use_dims_when_given():
    r = dsl.Recurrence("rowsum")
    q, v, beta = _in(r, "q", (-1, 0.5)), r.token_input("v", "V"), r.token_input("beta")
    r.delta_rule(query=q, key=q, value=v, beta=beta, decay=dsl.rowsum(q), scale=1.0)
    assert r.check().decay_interval() == (-INF, INF) and r.decay_kind == "scalar"
    assert r.decay_interval(dims={"K": 4}) == (-4.0, 2.0)


def test_unknown_node():
    with pytest.raises(dsl.DSLError, match="node 'nope': no such node"):
        bounds.interval(kda.build(), "nope")


SAMPLE = [-1e3, -30.0, -3.0, -0.5, 0.0, 0.25, 2.0, 25.0, 1e3]


@pytest.mark.parametrize("op", ["exp", "log", "sigmoid", "softplus", "square", "rsqrt", "neg"])
@pytest.mark.parametrize("lo, hi", [(-INF, INF), (-3.0, 2.0), (0.25, 25.0), (-30.0, -0.5), (0.0, INF)])
def test_unary_rules_are_sound(op, lo, hi):
    """Every value of the op on points of [lo, hi] lies in the op's interval (checked by evaluation)."""
    spec = dsl.ops.OPS[op]
    out_lo, out_hi = spec.interval([(lo, hi)], dict(spec.defaults), None)
    pts = torch.tensor([p for p in SAMPLE if lo <= p <= hi], dtype=torch.float64)
    with torch.no_grad():
        vals = spec.evaluate([pts], dict(spec.defaults), {})
    vals = vals[~vals.isnan()]
    assert bool((vals >= out_lo - 1e-12 * abs(out_lo if math.isfinite(out_lo) else 0)).all()), (vals, out_lo)
    assert bool((vals <= out_hi + 1e-12 * abs(out_hi if math.isfinite(out_hi) else 0)).all()), (vals, out_hi)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_binary_rules_are_sound(op):
    spec = dsl.ops.OPS[op]
    boxes = [(-2.0, 3.0), (0.5, 4.0), (-5.0, -1.0), (0.0, 0.0), (-INF, 1.0)]
    for a in boxes:
        for b in boxes:
            lo, hi = spec.interval([a, b], {}, None)
            xs = [p for p in SAMPLE + list(a) if a[0] <= p <= a[1] and math.isfinite(p)]
            ys = [p for p in SAMPLE + list(b) if b[0] <= p <= b[1] and math.isfinite(p)]
            for x in xs:
                for y in ys:
                    if op == "div" and y == 0:
                        continue
                    v = spec.evaluate([torch.tensor(x), torch.tensor(y)], {}, {}).item()
                    assert lo <= v <= hi, (op, a, b, x, y, v, lo, hi)
