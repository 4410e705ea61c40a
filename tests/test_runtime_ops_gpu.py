"""The public ops end to end on a GPU: kdagen.chunk_kda / chunk_gated_delta_rule with autograd, every output and
gradient against the float64 chunked reference on the same bf16-rounded inputs.

Run on the device machine: `python -m pytest -m gpu tests/test_runtime_ops_gpu.py -q`.
Bounds (docs/math.md §10, relative L2): o, final state ≤ 0.005; dq, dk, dv ≤ 0.008; dg, dβ, dh0 ≤ 0.02; dA_log and
ddt_bias ≤ 0.02 relative to the sum of their per-token terms' magnitudes (a per-head sum over every token cancels
heavily: its error is bounded by its terms, not by the sum — one fresh seed gave dA_log 0.034 of the sum itself,
benchmarks/NOTES.md, session 5).
"""
from __future__ import annotations

import os
import random

import pytest
import torch

import importlib

import kdagen
from kdagen import reference
from kdagen.ops import reference_options
from kdagen.reference.inputs import make_inputs

gate_reference = importlib.import_module("kdagen.reference.prologue")   # (kdagen.reference.prologue is a function)

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

BOUNDS = {"o": 0.005, "final_state": 0.005, "q": 0.008, "k": 0.008, "v": 0.008, "g": 0.02, "beta": 0.02,
          "A_log": 0.02, "dt_bias": 0.02, "initial_state": 0.02}
IO = ("q", "k", "v", "g", "beta")
PARAMS = ("A_log", "dt_bias", "initial_state")


def rel_l2(got: torch.Tensor, want: torch.Tensor, scale: torch.Tensor | None = None) -> float:
    """‖got − want‖ / ‖scale‖ (scale: want itself by default)."""
    got = got.detach().double().cpu()
    if not torch.isfinite(got).all():
        return float("inf")
    return float((got - want).norm() / (want if scale is None else scale).norm().clamp_min(1e-30))


def grad_scales(x: dict, opt, grads_ref: dict) -> dict:
    """What each reference gradient's error is measured against: the gradient itself, except dA_log and ddt_bias
    (the in-kernel gate's parameters): the sum of their per-token terms' magnitudes."""
    if not opt.use_gate_in_kernel:
        return {}
    return gate_reference.gate_param_magnitudes(x["g"], x.get("A_log"), x.get("dt_bias"), opt.lower_bound,
                                                opt.per_channel, grads_ref["g"])


def case_inputs(op: str, options: dict, *, T: int, H: int, G: int, K: int, cu=None, seed: int = 0) -> dict:
    """FLA-style inputs drawn in float64, then q, k, v, g, beta rounded to bf16 (the reference sees the rounded ones)."""
    gate_params = {"A_log": "drawn below"} if options.get("use_gate_in_kernel") else {}
    opt = reference_options(op, **options, **gate_params)
    gen = torch.Generator().manual_seed(seed)
    x = make_inputs(opt, B=1 if cu else 2, T=T, H=H, G=G, K=K, V=K, cu_seqlens=cu, generator=gen)
    for name in IO:
        x[name] = x[name].to(torch.bfloat16).double()
    return x


def fla_ops():
    """flash-linear-attention's ops, where importable: their errors are printed beside ours."""
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
        from fla.ops.kda import chunk_kda
    except ImportError:
        return None
    return {"kda": chunk_kda, "gdn": chunk_gated_delta_rule}


def call_kdagen(op: str, x: dict, options: dict, fn=None, grad: bool = True):
    """(o, final state, the device inputs by name) of kdagen's op (or `fn`) on x moved to the GPU (bf16 tokens,
    fp32 parameters; leaves requiring grad with `grad`)."""
    dev = {n: x[n].to("cuda", torch.bfloat16 if n in IO else torch.float32).requires_grad_(grad)
           for n in (*IO, *PARAMS) if n in x}
    extra = {"cu_seqlens": x["cu_seqlens"].cuda()} if "cu_seqlens" in x else {}
    fn = fn or (kdagen.chunk_kda if op == "kda" else kdagen.chunk_gated_delta_rule)
    o, ht = fn(*(dev[n] for n in IO), **{n: dev[n] for n in PARAMS if n in dev}, **extra, **options)
    return o, ht, dev


def run_kdagen(op: str, x: dict, options: dict, do, dht, fn=None):
    o, ht, dev = call_kdagen(op, x, options, fn)
    loss = (o.float() * do.cuda()).sum()
    if ht is not None:
        loss = loss + (ht * dht.cuda()).sum()
    loss.backward()
    return o, ht, {n: t.grad for n, t in dev.items()}


CASES = [
    # id, op, options, shape
    ("kda-softplus-l2-bsig", "kda", dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True,
                                         use_beta_sigmoid_in_kernel=True), dict(T=77, H=2, G=1, K=128)),
    ("kda-lb5-safe-gate-gva2", "kda", dict(use_gate_in_kernel=True, lower_bound=-5.0, safe_gate=True,
                                           use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True),
     dict(T=64, H=1, G=2, K=128)),
    ("kda-precomputed-gate-k64", "kda", dict(), dict(T=50, H=2, G=1, K=64)),
    ("kda-varlen-empty-len1-vfirst", "kda", dict(use_gate_in_kernel=True, state_v_first=True,
                                                 use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True),
     dict(T=0, H=2, G=1, K=64, cu=[0, 0, 1, 40, 40, 97])),
    ("gdn-gate-l2-bsig", "gdn", dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True,
                                     use_beta_sigmoid_in_kernel=True), dict(T=70, H=2, G=1, K=128)),
    ("gdn-precomputed-gva2-varlen", "gdn", dict(), dict(T=0, H=1, G=2, K=64, cu=[0, 1, 17, 17, 60])),
]


@pytest.mark.parametrize("op, options, shape", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_outputs_and_every_gradient_match_float64(op, options, shape):
    options = {"output_final_state": True, **options}
    seed = int(os.environ.get("KDAGEN_TEST_SEED", random.randrange(2**31)))   # fresh inputs every run
    x = case_inputs(op, options, **shape, seed=seed)
    opt = reference_options(op, **options, **{n: x[n] for n in ("A_log", "dt_bias") if n in x})
    o_ref, ht_ref = reference.chunked(x, opt, 16)
    do, dht = torch.randn_like(o_ref), torch.randn_like(ht_ref)
    grads_ref = reference.chunked_backward(x, opt, do, dht, 16)
    scales = grad_scales(x, opt, grads_ref)
    o, ht, grads = run_kdagen(op, x, options, do, dht)
    fla = fla_ops()
    fla_errors = "FLA not importable"
    if fla is not None:
        try:
            fo, fht, fgrads = run_kdagen(op, x, options, do, dht, fn=fla[op])
            fla_errors = {"o": rel_l2(fo, o_ref), "final_state": rel_l2(fht, ht_ref)}
            fla_errors.update({n: rel_l2(fgrads[n], w, scales.get(n)) for n, w in grads_ref.items()
                               if w is not None and fgrads.get(n) is not None})
        except Exception as exc:            # FLA refuses some configurations (e.g. GDN backward on Triton 3.6)
            fla_errors = f"refused by FLA: {type(exc).__name__}: {str(exc)[:120]}"
    assert o.dtype == torch.bfloat16 and o.shape == o_ref.shape and ht.dtype == torch.float32
    errors = {"o": rel_l2(o, o_ref), "final_state": rel_l2(ht, ht_ref)}
    for name, want in grads_ref.items():
        if want is not None:
            assert grads[name] is not None, f"no gradient for {name}"
            assert grads[name].shape == x[name].shape and grads[name].dtype == (
                torch.bfloat16 if name in IO else torch.float32), name
            errors[name] = rel_l2(grads[name], want, scales.get(name))
    fmt = lambda e: e if isinstance(e, str) else " ".join(f"{n}={v:.2e}" for n, v in e.items())  # noqa: E731
    print(f"\n[{op} {options} {shape} seed={seed}]\n  kdagen: {fmt(errors)}\n  FLA:    {fmt(fla_errors)}")
    bad = {n: e for n, e in errors.items() if not e <= BOUNDS[n]}
    assert not bad, f"seed {seed}: relative L2 over bounds: {bad}; all: {errors}"


def test_deterministic_and_on_the_current_stream():
    options = dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                   output_final_state=True)
    x = case_inputs("kda", options, T=100, H=2, G=2, K=64, seed=3)
    do = torch.randn(2, 100, 4, 64, dtype=torch.float64)
    dht = torch.randn(2, 4, 64, 64, dtype=torch.float64)
    s = torch.cuda.Stream()
    runs = []
    for _ in range(2):
        with torch.cuda.stream(s):
            torch.cuda._sleep(20_000_000)            # a launch on another stream would race with this work
            runs.append(run_kdagen("kda", x, options, do, dht))
        s.synchronize()
    (o1, h1, g1), (o2, h2, g2) = runs
    assert torch.equal(o1, o2) and torch.equal(h1, h2)
    for name in g1:
        assert torch.equal(g1[name], g2[name]), f"d{name} differs between two runs"


def test_without_final_state_and_with_the_deprecated_layout_alias():
    import warnings
    options = dict(use_gate_in_kernel=True, lower_bound=-5.0)
    x = case_inputs("kda", options, T=33, H=1, G=1, K=64, seed=5)
    opt = reference_options("kda", **options, state_v_first=True, A_log=x["A_log"], dt_bias=x["dt_bias"])
    x["initial_state"] = x["initial_state"].transpose(-1, -2).contiguous()
    o_ref, ht_ref = reference.chunked(x, opt, 16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        o, ht, _ = run_kdagen("kda", x, {**options, "transpose_state_layout": True, "output_final_state": True},
                              torch.zeros_like(o_ref), torch.zeros_like(ht_ref))
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    assert rel_l2(ht, ht_ref) <= BOUNDS["final_state"] and rel_l2(o, o_ref) <= BOUNDS["o"]
    o, ht, grads = run_kdagen("kda", x, options | {"state_v_first": True}, torch.randn_like(o_ref), None)
    assert ht is None and grads["initial_state"] is not None


@pytest.mark.parametrize("op, options, shape", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_inference_outputs_match_float64(op, options, shape):
    """Without gradients the ops may use a forward-only family (wgmma64 on sm_90a): o and the final state
    against float64, FLA's errors on the same inputs beside ours, two calls bitwise equal."""
    options = {"output_final_state": True, **options}
    seed = int(os.environ.get("KDAGEN_TEST_SEED", random.randrange(2**31)))
    x = case_inputs(op, options, **shape, seed=seed)
    opt = reference_options(op, **options, **{n: x[n] for n in ("A_log", "dt_bias") if n in x})
    o_ref, ht_ref = reference.chunked(x, opt, 16)
    dev = {n: x[n].to("cuda", torch.bfloat16 if n in IO else torch.float32) for n in (*IO, *PARAMS) if n in x}
    extra = {"cu_seqlens": x["cu_seqlens"].cuda()} if "cu_seqlens" in x else {}

    def call(fn):
        with torch.no_grad():
            return fn(*(dev[n] for n in IO), **{n: dev[n] for n in PARAMS if n in dev}, **extra, **options)

    mine = kdagen.chunk_kda if op == "kda" else kdagen.chunk_gated_delta_rule
    (o, ht), (o2, ht2) = call(mine), call(mine)
    errors = {"o": rel_l2(o, o_ref), "final_state": rel_l2(ht, ht_ref)}
    fla = fla_ops()
    fla_errors = "FLA not importable"
    if fla is not None:
        try:
            fo, fht = call(fla[op])
            fla_errors = {"o": rel_l2(fo, o_ref), "final_state": rel_l2(fht, ht_ref)}
        except Exception as exc:
            fla_errors = f"refused by FLA: {type(exc).__name__}: {str(exc)[:120]}"
    print(f"\n[inference {op} {options} {shape} seed={seed}]\n  kdagen: {errors}\n  FLA:    {fla_errors}")
    assert torch.equal(o, o2) and torch.equal(ht, ht2), f"seed {seed}: two calls differ"
    bad = {n: e for n, e in errors.items() if not e <= BOUNDS[n]}
    assert not bad, f"seed {seed}: relative L2 over bounds: {bad}"
