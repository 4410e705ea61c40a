"""The float64 references agree: chunked forward = recurrence, hand backward = autograd (issue 2)."""
import itertools
import zlib

import pytest
import torch

from kdagen.reference import Options, chunked, chunked_backward, recurrent
from kdagen.reference.inputs import make_inputs


def seed(*key):
    """A fixed seed per test case, so a failure reproduces."""
    torch.manual_seed(zlib.crc32(repr(key).encode()))


def rel(x, ref):
    return ((x - ref).norm() / ref.norm().clamp_min(1e-300)).item()


SHAPES = {
    "T_not_multiple": dict(B=2, T=37),
    "T_is_1": dict(B=2, T=1),
    "T_multiple_of_64": dict(B=1, T=64),
    "varlen_empty_and_len1": dict(cu_seqlens=[0, 0, 1, 18, 18, 19, 52]),
    "gva_2": dict(B=2, T=29, G=2),
    "K_ne_V": dict(B=1, T=33, K=12, V=5),
}


@pytest.mark.parametrize("op", ["kda", "gdn"])
@pytest.mark.parametrize("chunk", [16, 32, 64])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_chunked_forward_matches_recurrence(op, chunk, shape):
    seed((op, chunk, shape))
    opt = Options(op=op, use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)
    x = make_inputs(opt, **SHAPES[shape])
    o_ref, s_ref = recurrent(x, opt)
    o, s = chunked(x, opt, chunk)
    assert torch.isfinite(o).all()
    assert rel(o, o_ref) <= 1e-12
    assert rel(s, s_ref) <= 1e-12


def test_varlen_empty_sequence_passes_state_through():
    opt = Options(op="kda")
    x = make_inputs(opt, cu_seqlens=[0, 5, 5, 9])
    _, s = chunked(x, opt, 16)
    assert torch.equal(s[1], x["initial_state"][1])


def _autograd_grads(x, opt):
    leaves = {k: v.clone().requires_grad_(True) for k, v in x.items() if k != "cu_seqlens"}
    o, s = recurrent({**x, **leaves}, opt)
    do, dht = torch.randn_like(o), torch.randn_like(s)
    ((o * do).sum() + (s * dht).sum()).backward()
    return {k: v.grad for k, v in leaves.items()}, do, dht


GATES = {  # (op, use_gate_in_kernel, lower_bound, with A_log)
    "kda_softplus": ("kda", True, None, True),
    "kda_softplus_no_A_log": ("kda", True, None, False),
    "kda_lower_bound": ("kda", True, -5.0, True),
    "kda_lower_bound_no_A_log": ("kda", True, -5.0, False),
    "kda_given_decay": ("kda", False, None, False),
    "gdn_softplus": ("gdn", True, None, True),
    "gdn_given_decay": ("gdn", False, None, False),
}


@pytest.mark.parametrize("gate", list(GATES))
@pytest.mark.parametrize("l2norm", [False, True])
def test_hand_backward_matches_autograd(gate, l2norm):
    op, use_gate, lb, with_A_log = GATES[gate]
    seed((gate, l2norm))
    for beta_sigmoid, neg in [(False, False), (True, False), (True, True)]:
        opt = Options(op=op, use_gate_in_kernel=use_gate, lower_bound=lb, use_qk_l2norm_in_kernel=l2norm,
                      use_beta_sigmoid_in_kernel=beta_sigmoid, allow_neg_eigval=neg, state_v_first=neg)
        x = make_inputs(opt, B=2, T=21, G=2)
        if not with_A_log:
            x.pop("A_log", None)
        ref, do, dht = _autograd_grads(x, opt)
        got = chunked_backward(x, opt, do, dht, chunk_size=16)
        assert set(ref) <= set(got)
        for name, r in ref.items():
            assert got[name] is not None, name
            err = rel(got[name], r)
            assert err <= 1e-10, f"{gate} l2norm={l2norm} beta_sigmoid={beta_sigmoid}: d{name} rel err {err:.2e}"


@pytest.mark.parametrize("op", ["kda", "gdn"])
@pytest.mark.parametrize("chunk,shape", list(itertools.product([32, 64], ["varlen_empty_and_len1", "K_ne_V"])))
def test_hand_backward_varlen_and_chunk_sizes(op, chunk, shape):
    seed((op, chunk, shape))
    opt = Options(op=op, use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True)
    x = make_inputs(opt, **SHAPES[shape])
    ref, do, dht = _autograd_grads(x, opt)
    got = chunked_backward(x, opt, do, dht, chunk_size=chunk)
    for name, r in ref.items():
        assert rel(got[name], r) <= 1e-10, name


def test_backward_without_final_state_gradient():
    opt = Options(op="kda", use_gate_in_kernel=True, lower_bound=-5.0)
    x = make_inputs(opt, B=1, T=19, initial_state=False)
    leaves = {k: v.clone().requires_grad_(True) for k, v in x.items()}
    o, _ = recurrent({**x, **leaves}, opt)
    do = torch.randn_like(o)
    (o * do).sum().backward()
    got = chunked_backward(x, opt, do, None, chunk_size=16)
    assert got["initial_state"] is None
    for name, leaf in leaves.items():
        assert rel(got[name], leaf.grad) <= 1e-10, name


def test_options_reject_meaningless_combinations():
    with pytest.raises(ValueError, match="allow_neg_eigval"):
        Options(allow_neg_eigval=True)
    with pytest.raises(ValueError, match="lower_bound"):
        Options(op="gdn", lower_bound=-5.0)
    with pytest.raises(ValueError, match="op"):
        Options(op="gla")


@pytest.mark.parametrize("op", ["kda", "gdn"])
def test_strong_decay_is_masked_by_select(op):
    """Some channels (KDA) or heads (GDN) decay by about e^-13.5 a step, so e^(Γj−Γi) above the diagonal
    overflows float64 within a 64-chunk: the masks must select, not multiply. The other channels decay
    slowly, so the gradients stay well above the rounding floor of the strong ones."""
    seed(("strong", op))
    opt = Options(op=op, use_gate_in_kernel=True)
    x = make_inputs(opt, B=1, T=64)
    x["A_log"] = torch.full_like(x["A_log"], 1.5)
    x.pop("dt_bias")
    strong = x["g"][..., : x["g"].shape[-1] // 2]
    x["g"] = torch.cat([torch.full_like(strong, 3.0), torch.full_like(strong, -4.0)], dim=-1)
    o_ref, s_ref = recurrent(x, opt)
    o, s = chunked(x, opt, 64)
    assert rel(o, o_ref) <= 1e-12 and rel(s, s_ref) <= 1e-12
    ref, do, dht = _autograd_grads(x, opt)
    got = chunked_backward(x, opt, do, dht, chunk_size=64)
    for name, r in ref.items():
        assert rel(got[name], r) <= 1e-10, name


@pytest.mark.parametrize("per_channel, lower_bound", [(True, None), (True, -5.0), (False, None), (False, -3.0)])
def test_gate_param_magnitudes_are_the_terms_of_the_parameter_gradients(per_channel, lower_bound):
    """gate_param_magnitudes bounds dA_log and ddt_bias for any da, and equals them where every token's term has
    one sign (da chosen against the sign of ∂a/∂A_log): so its terms are exactly the gradients' terms.
    tests/test_runtime_ops_gpu.py measures those gradients' errors against these magnitudes."""
    import importlib
    P = importlib.import_module("kdagen.reference.prologue")       # kdagen.reference.prologue is also a function
    g = torch.Generator().manual_seed(0)
    shape = (2, 30, 3, 4) if per_channel else (2, 30, 3)
    x, r = (torch.randn(shape, generator=g, dtype=torch.float64) for _ in range(2))
    A_log = torch.randn(3, generator=g, dtype=torch.float64)
    dt_bias = torch.randn(12 if per_channel else 3, generator=g, dtype=torch.float64)
    dg, dA_log, ddt_bias = P.gate_bwd(x, A_log, dt_bias, lower_bound, per_channel, r)
    got = P.gate_param_magnitudes(x, A_log, dt_bias, lower_bound, per_channel, dg)
    assert (got["A_log"] >= dA_log.abs()).all() and (got["dt_bias"] >= ddt_bias.abs()).all()
    assert (got["A_log"] > 1.5 * dA_log.abs()).any()          # random signs cancel: the bound is not the sum
    # ∂a/∂A_log is a < 0 (softplus form) or lb·σ'(z)·z, of the sign of −x (lower-bound form); ∂a/∂g < 0 in both
    xb = x + (dt_bias.view(3, -1) if per_channel else dt_bias.view(3))
    da_A = -r.abs() if lower_bound is None else -torch.sign(xb) * r.abs()
    dg, dA_log, _ = P.gate_bwd(x, A_log, dt_bias, lower_bound, per_channel, da_A)
    assert torch.allclose(P.gate_param_magnitudes(x, A_log, dt_bias, lower_bound, per_channel, dg)["A_log"], dA_log)
    dg, _, ddt_bias = P.gate_bwd(x, A_log, dt_bias, lower_bound, per_channel, -r.abs())
    assert torch.allclose(P.gate_param_magnitudes(x, A_log, dt_bias, lower_bound, per_channel, dg)["dt_bias"],
                          ddt_bias)
