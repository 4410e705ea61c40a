"""The shipped KDA and GDN recurrences against kdagen.reference, over every option combination.

Point 1: the interpreter's forward equals the reference token recurrence (≤ 1e-12 relative L2).
Point 2: the derived backward equals torch.autograd through the interpreter's forward (≤ 1e-10)
for every input, parameter and the initial state; it also matches the hand-written chunked backward.
"""
import itertools

import pytest
import torch

from kdagen import dsl, recurrences
from kdagen import reference as R
from kdagen.recurrences import gdn, kda
from kdagen.reference.inputs import make_inputs

CHUNK = 8


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def _configs():
    """(op, gate, lower_bound, A_log?, dt_bias?, l2norm, beta map) for every FLA option combination."""
    params = ((True, True), (False, True), (True, False))      # (A_log, dt_bias) with the in-kernel gate
    gates = {
        "kda": [(False, None, False, False), (False, -5.0, False, False)]
        + [(True, lb, a, d) for lb in (None, -5.0) for a, d in params],
        "gdn": [(False, None, False, False)] + [(True, None, a, d) for a, d in params],
    }
    betas = [(False, False), (True, False), (True, True)]     # (sigmoid in kernel, allow_neg_eigval)
    return [(op, *gate, l2, *beta) for op in ("kda", "gdn")
            for gate, l2, beta in itertools.product(gates[op], (False, True), betas)]


CONFIGS = _configs()


def _ids(c):
    op, gate, lb, a, d, l2, sig, neg = c
    g = "gate" + ("_lb" if lb else "_sp") + ("" if a else "_noA") + ("" if d else "_nobias") if gate else \
        ("g_lb" if lb else "g")
    return "-".join([op, g, "l2" if l2 else "nol2", ("sig2" if neg else "sig") if sig else "nosig"])


def _case(i, c):
    """Options, recurrence and inputs; shapes rotate through GVA G=2, varlen (with a length-1 sequence)
    and B=2; every fifth case has no initial state."""
    op, gate, lb, has_a, has_d, l2, sig, neg = c
    opt = R.Options(op=op, use_gate_in_kernel=gate, lower_bound=lb, use_qk_l2norm_in_kernel=l2,
                    use_beta_sigmoid_in_kernel=sig, allow_neg_eigval=neg)
    shape = [dict(B=1, T=20, H=2, G=2), dict(cu_seqlens=[0, 1, 13, 22]), dict(B=2, T=19, H=2)][i % 3]
    x = make_inputs(opt, K=8, V=6, generator=torch.Generator().manual_seed(i), initial_state=i % 5 != 4, **shape)
    for name, keep in (("A_log", has_a), ("dt_bias", has_d)):
        if gate and not keep:
            del x[name]
    return opt, recurrences.from_options(opt, has_A_log=has_a, has_dt_bias=has_d), x


@pytest.mark.parametrize("i", range(len(CONFIGS)), ids=[_ids(c) for c in CONFIGS])
def test_forward_matches_reference(i):
    opt, r, x = _case(i, CONFIGS[i])
    o, ht = dsl.interpret.forward(r, x, chunk_size=CHUNK)
    o_ref, ht_ref = R.recurrent(x, opt)
    assert rel(o, o_ref) <= 1e-12 and rel(ht, ht_ref) <= 1e-12, (rel(o, o_ref), rel(ht, ht_ref))
    assert r.decay_kind == ("vector" if opt.op == "kda" else "scalar")


@pytest.mark.parametrize("i", range(len(CONFIGS)), ids=[_ids(c) for c in CONFIGS])
def test_backward_matches_autograd(i):
    opt, r, x = _case(i, CONFIGS[i])
    gen = torch.Generator().manual_seed(100 + i)
    names = [n for n in (*r.token_inputs, *r.head_params, "initial_state") if n in x]
    leaves = {n: x[n].clone().requires_grad_(True) for n in names}
    o, ht = dsl.interpret.forward(r, {**x, **leaves}, chunk_size=CHUNK)
    do = torch.randn(o.shape, generator=gen, dtype=o.dtype)
    dht = torch.randn(ht.shape, generator=gen, dtype=ht.dtype)
    auto = dict(zip(names, torch.autograd.grad((o * do).sum() + (ht * dht).sum(), list(leaves.values()))))
    derived = dsl.interpret.backward(r, x, do, dht, chunk_size=CHUNK)
    hand = R.chunked_backward(x, opt, do, dht, chunk_size=CHUNK)
    assert set(derived) == set(names) | {"initial_state"}
    assert (derived["initial_state"] is None) == ("initial_state" not in x)
    for n in names:
        assert derived[n].shape == x[n].shape, n
        assert rel(derived[n], auto[n]) <= 1e-10, (n, rel(derived[n], auto[n]))
        assert rel(derived[n], hand[n]) <= 1e-12, (n, rel(derived[n], hand[n]))


def test_sweep_covers_the_options():
    """Every option takes each of its values somewhere in the sweep, for both ops."""
    for op in ("kda", "gdn"):
        cs = [c for c in CONFIGS if c[0] == op]
        for field in range(1, 8):
            assert len({c[field] for c in cs}) == 2 or (op == "gdn" and field == 2), (op, field)


def test_builders_follow_the_options():
    r = kda.build(lower_bound=-5.0, use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True,
                  use_beta_sigmoid_in_kernel=True)
    ops = {a["op"] for _, a in r.graph.nodes(data=True)}
    assert {"l2norm", "sigmoid", "exp", "mul", "add"} <= ops and "softplus" not in ops
    assert set(r.head_params) == {"A_log", "dt_bias"} and r.graph.nodes["dt_bias"]["shape"] == ("K",)
    r = gdn.build(use_gate_in_kernel=True, use_A_log=False)
    assert r.head_params == ["dt_bias"] and r.graph.nodes["dt_bias"]["shape"] == ()
    assert r.decay_kind == "scalar" and r.decay_interval() == (-float("inf"), 0.0)
    r = kda.build()
    assert r.core_operands()["decay"] == "g" and r.head_params == [] and "l2norm" not in str(r.to_json())
    assert kda.build(lower_bound=-3.0).decay_interval() == (-3.0, 0.0)   # FLA: a precomputed g ≥ lb


def test_builders_reject_bad_options():
    with pytest.raises(ValueError, match="allow_neg_eigval"):
        kda.build(allow_neg_eigval=True)
    with pytest.raises(ValueError, match="'gdn'"):
        kda.from_options(R.Options(op="gdn"))
    with pytest.raises(TypeError):
        gdn.build(lower_bound=-5.0)
