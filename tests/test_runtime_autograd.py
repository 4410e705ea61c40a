"""The autograd.Function's plumbing on CPU, with the float64 DSL interpreter standing in for the kernels.

The stand-in is what the kernels must compute (kdagen.dsl.interpret, forward and backward of the call's
recurrence); the test checks what the Function adds around them: every gradient reaches its input, dht
comes from the final state, unused outputs give None or zeros, inputs not requiring grad get None, and the
result equals torch.autograd through the token recurrence (kdagen.reference.recurrent).
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from kdagen import dsl, reference
from kdagen.ops import autograd, make_call
from kdagen.ops.config import call_spec
from kdagen.ops.run import Call, apply
from kdagen.reference.inputs import make_inputs

C = 16
TENSORS = ("q", "k", "v", "g", "beta", "A_log", "dt_bias", "initial_state")
CALL_KEYS = ("initial_state", "cu_seqlens")


@pytest.fixture
def reference_kernels(monkeypatch):
    """Replace the kernels by the interpreter; record what the Function passes them."""
    seen = {}

    def inputs(x):
        return {k: v for k, v in x.items() if v is not None and k not in CALL_KEYS}

    def kv(call, state):        # the interpreter's states are [.., K, V]; state_v_first ones [.., V, K]
        return state.transpose(-1, -2) if state is not None and call.state_layout == "vk" else state

    def forward(x, call, keep):
        seen["keep"] = keep
        r = call.spec.recurrence
        o, S = dsl.interpret.forward(r, {**inputs(x), **call.scalars}, chunk_size=C,
                                     initial_state=kv(call, x.get("initial_state")), cu_seqlens=x.get("cu_seqlens"))
        nothing = {"plan": SimpleNamespace(saved=[]), "workspace": {}}     # the interpreter keeps no workspace
        return o, kv(call, S) if call.output_final_state else None, nothing if keep else None

    def backward(x, call, workspace, do, dht):
        seen["dht"] = dht
        grads = dsl.interpret.backward(call.spec.recurrence, {**inputs(x), **call.scalars}, do, kv(call, dht),
                                       chunk_size=C, initial_state=kv(call, x.get("initial_state")),
                                       cu_seqlens=x.get("cu_seqlens"))
        return {**grads, "initial_state": kv(call, grads["initial_state"])}

    monkeypatch.setattr(autograd, "kernel_forward", forward)
    monkeypatch.setattr(autograd, "kernel_backward", backward)
    return seen


def run(x: dict, op: str, **options):
    """The chunk_kda / chunk_gated_delta_rule call of these options, past the input checks (CPU tensors)."""
    options.setdefault("output_final_state", True)
    gate = {n: x[n] for n in ("A_log", "dt_bias") if n in x}
    call = make_call(op, initial_state=x.get("initial_state"), cu_seqlens=x.get("cu_seqlens"), **gate, **options)
    spec = call_spec(call)
    r = spec.recurrence
    K = x["q"].shape[-1]
    scale = {"scale": K ** -0.5 if call.opt.scale is None else call.opt.scale}
    op_call = Call(spec, scale, call.output_final_state, "vk" if call.opt.state_v_first else "kv", x.get("cu_seqlens"))
    tensors = {n: x[n] for n in (*r.token_inputs, *r.head_params)}
    return apply(op_call, tensors, x.get("initial_state")), call


def leaves(x: dict) -> dict:
    return {n: x[n].clone().requires_grad_() for n in TENSORS if x.get(n) is not None}


CASES = [
    ("kda-softplus-gate-gva-h0", "kda", dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True,
                                             use_beta_sigmoid_in_kernel=True), dict(B=2, G=2)),
    ("kda-lower-bound-no-A_log", "kda", dict(use_gate_in_kernel=True, lower_bound=-5.0), dict(drop=("A_log",))),
    ("kda-state-v-first-neg-eigval", "kda", dict(state_v_first=True, use_beta_sigmoid_in_kernel=True,
                                                 allow_neg_eigval=True), {}),
    ("gdn-gate-varlen-empty-and-length-1", "gdn", dict(use_gate_in_kernel=True),
     dict(cu_seqlens=[0, 0, 1, 17, 33])),
    ("gdn-precomputed-gate-gva", "gdn", dict(use_qk_l2norm_in_kernel=True), dict(G=2)),
]


@pytest.mark.parametrize("op, options, shape", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_gradients_reach_every_input(reference_kernels, op, options, shape):
    shape = dict(shape)
    drop = shape.pop("drop", ())
    gen = torch.Generator().manual_seed(1)
    opt = reference.Options(op=op, **{k: v for k, v in options.items() if k in reference.Options.__dataclass_fields__})
    x = make_inputs(opt, T=shape.pop("T", 33), H=2, K=8, V=6, generator=gen, **shape)
    for name in drop:
        x.pop(name)
    ours, theirs = leaves(x), leaves(x)
    extra = {"cu_seqlens": x["cu_seqlens"]} if "cu_seqlens" in x else {}
    (o, S), call = run({**ours, **extra}, op, **options)
    assert call.opt == opt
    o_ref, S_ref = reference.recurrent({**theirs, **extra}, opt)
    do, dht = torch.randn_like(o), torch.randn_like(S)
    got = torch.autograd.grad((o * do).sum() + (S * dht).sum(), list(ours.values()))
    want = torch.autograd.grad((o_ref * do).sum() + (S_ref * dht).sum(), list(theirs.values()))
    assert torch.allclose(o, o_ref, atol=1e-10) and torch.allclose(S, S_ref, atol=1e-10)
    for name, a, b in zip(ours, got, want):
        assert a.shape == b.shape and a.dtype == ours[name].dtype, name
        assert torch.allclose(a, b, atol=1e-9, rtol=1e-7), f"d{name}: max error {(a - b).abs().max():.3g}"
    assert reference_kernels["keep"] is True


def test_unused_final_state_passes_no_dht(reference_kernels):
    x = leaves(make_inputs(reference.Options(op="kda"), T=20, H=1, K=8, V=8, generator=torch.Generator().manual_seed(2)))
    (o, S), _ = run(x, "kda")
    o.sum().backward()
    assert reference_kernels["dht"] is None
    assert all(x[n].grad is not None for n in x)


def test_only_final_state_used_gets_zero_do(reference_kernels):
    x = leaves(make_inputs(reference.Options(op="gdn"), T=20, H=1, K=8, V=8, generator=torch.Generator().manual_seed(3)))
    (o, S), _ = run(x, "gdn")
    S.sum().backward()
    assert x["q"].grad is not None and torch.count_nonzero(x["q"].grad) == 0   # q only reaches o
    assert torch.count_nonzero(x["initial_state"].grad) > 0


def test_without_final_state_it_is_none(reference_kernels):
    x = leaves(make_inputs(reference.Options(op="kda"), T=20, H=1, K=8, V=8, generator=torch.Generator().manual_seed(4)))
    (o, S), _ = run(x, "kda", output_final_state=False)
    assert S is None
    o.sum().backward()
    assert x["initial_state"].grad is not None


def test_inputs_without_grad_get_none_and_inference_keeps_nothing(reference_kernels):
    x = make_inputs(reference.Options(op="kda"), T=20, H=1, K=8, V=8, generator=torch.Generator().manual_seed(5))
    q = x["q"].clone().requires_grad_()
    (o, _), _ = run({**x, "q": q}, "kda")
    o.sum().backward()
    assert q.grad is not None and x["k"].grad is None
    with torch.no_grad():
        run(x, "kda")
    assert reference_kernels["keep"] is False


def test_in_place_edit_between_forward_and_backward_is_caught(reference_kernels):
    x = leaves(make_inputs(reference.Options(op="kda"), T=20, H=1, K=8, V=8, generator=torch.Generator().manual_seed(6)))
    v = x["v"] * 1.0
    (o, _), _ = run({**x, "v": v}, "kda")
    v.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        o.sum().backward()


def test_a_missing_gradient_is_an_error(reference_kernels, monkeypatch):
    x = leaves(make_inputs(reference.Options(op="kda"), T=20, H=1, K=8, V=8, generator=torch.Generator().manual_seed(7)))
    monkeypatch.setattr(autograd, "kernel_backward", lambda x_, call, ws, do, dht: {"q": torch.zeros_like(x["q"])})
    (o, _), _ = run(x, "kda")
    with pytest.raises(RuntimeError, match="no gradient for k"):
        o.sum().backward()
