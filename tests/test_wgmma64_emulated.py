"""The wgmma64 forward family (chunk 64: TMA, mbarrier transaction counts, wgmma, named barriers, setmaxnreg),
rendered exactly as for an H200, run on the CPU through kdagen.codegen.emulate against the float64 references:
o and the final state, and the prepare workspace term by term (rows past a chunk's end zero). Outputs and
workspaces are poisoned with NaN first. This is where a change to templates/wgmma64/ is first checked without a
GPU; tests/gpu/test_forward_kernels.py repeats it on the device."""
from __future__ import annotations

import pytest
import torch

from kdagen.codegen import emulate
from kdagen.ops.api import kernel_call, make_call
from kdagen.ops.forward import forward
from kdagen.reference import Options, chunked
from kdagen.reference.workspace import workspace_errors
from test_codegen_emulated import kernel_inputs, rel

pytestmark = pytest.mark.skipif(emulate.unavailable() is not None, reason=f"no emulation: {emulate.unavailable()}")

# bf16 terms at bf16 rounding; fp32 ones exact up to fp32 arithmetic
TOL = {"bf16": 5e-3, "f32": 1e-3, "ws_decay_total": 1e-5, "ws_beta": 1e-6}

CASES = {
    # per-channel decay, lower-bound gate; varlen with an empty and a length-1 sequence and one of two chunks; GVA 2
    "kda_lb_varlen_gva2_k64": ("kda", dict(use_gate_in_kernel=True, lower_bound=-5.0, use_qk_l2norm_in_kernel=True,
                                           use_beta_sigmoid_in_kernel=True),
                               dict(H=1, G=2, K=64, V=64, cu_seqlens=[0, 0, 1, 90, 90, 101])),
    # per-head decay (GDN), K = V = 128, a partial chunk
    "gdn_softplus_k128": ("gdn", dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True,
                                      use_beta_sigmoid_in_kernel=True), dict(T=70, H=1, K=128, V=128)),
    # per-head decay given precomputed (strong and unbounded), varlen across a chunk boundary, GVA 2
    "gdn_precomputed_varlen_gva2_k64": ("gdn", {}, dict(H=1, G=2, K=64, V=64, cu_seqlens=[0, 3, 3, 80, 97])),
    # an unbounded per-channel gate (softplus), state_v_first: the running products keep every factor ≤ 1
    "kda_softplus_vfirst_k64": ("kda", dict(use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                                            state_v_first=True), dict(B=2, T=65, H=1, K=64, V=64)),
    # K = 128 (the bench's head dim: the prepare's row inputs staged at the right-hand halves of its fp32 tiles'
    # rows), GVA 2, varlen with an empty and a length-1 sequence
    "kda_lb_varlen_gva2_k128": ("kda", dict(use_gate_in_kernel=True, lower_bound=-5.0, use_qk_l2norm_in_kernel=True,
                                            use_beta_sigmoid_in_kernel=True),
                                dict(H=1, G=2, K=128, V=128, cu_seqlens=[0, 130, 130, 131, 260])),
}


def emulated_forward(op: str, options: dict, shape: dict, seed: int, **forward_kwargs):
    """(o, final state, prepare workspaces, float64 inputs) of the emulated wgmma64 forward on one case's inputs,
    outputs and workspaces NaN-poisoned first (benchmarks/probe/emulated_bits.py runs it too)."""
    xk, xr = kernel_inputs(Options(op=op, **options), seed=seed, **shape)
    call = make_call(op, initial_state=xk.get("initial_state"), output_final_state=True,
                     cu_seqlens=xk.get("cu_seqlens"), A_log=xk.get("A_log"), dt_bias=xk.get("dt_bias"), **options)
    kcall, tensors = kernel_call(call, xk, emulate=True, family="wgmma64")
    ws = {}
    o, ht, _ = forward({**tensors, "initial_state": xk.get("initial_state"), "cu_seqlens": xk.get("cu_seqlens")},
                       kcall, keep=False, poison=True, debug=ws, **forward_kwargs)
    return o, ht, ws, xr


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    op, options, shape = CASES[request.param]
    o, ht, ws, xr = emulated_forward(op, options, shape, seed=11)
    return request.param, o, ht, ws, xr, Options(op=op, **options)


def test_forward_matches_the_reference(case):
    name, o, ht, _, xr, opt = case
    o_ref, ht_ref = chunked(xr, opt, 16)
    assert not torch.isnan(o).any() and not torch.isnan(ht).any(), f"{name}: NaN left in the outputs"
    assert rel(o, o_ref) <= 0.005 and rel(ht, ht_ref) <= 0.005, f"{name}: o {rel(o, o_ref):.2e}, state {rel(ht, ht_ref):.2e}"


def test_prepare_workspace_term_by_term(case):
    name, _, _, ws, xr, opt = case
    errors = workspace_errors(ws, xr, opt, 64)
    tail = errors.pop("tail_max")
    tol = {n: TOL.get(n, TOL["bf16" if n in ws and ws[n].dtype == torch.bfloat16 else "f32"]) for n in errors}
    bad = {k: f"{e:.2e}" for k, e in errors.items() if not e <= tol[k]}
    assert tail == 0 and not bad, f"{name}: workspace errors {bad}, tail rows max |x| {tail}"


def test_value_rows_split_over_ctas(monkeypatch):
    """SPLIT_VALUE: a CTA per 64 value rows (one consumer warp group each) gives the one-CTA kernel's outputs bit for
    bit — each value row's products and sums are the same, only the CTA that runs them differs."""
    from kdagen.ops import config as ops_config, launcher
    from kdagen.plan.families.wgmma64 import forward as wgmma64_forward
    op, options, shape = CASES["gdn_softplus_k128"]
    slices = []

    def loader(config, device, direction):
        slices.append(config.planned()[0].kernel("recurrence").options.slices)
        return ops_config.load_emulated(config, device, direction)

    outputs = []
    try:
        for split in (False, True):
            monkeypatch.setattr(wgmma64_forward, "SPLIT_VALUE", split)
            launcher.forget_plans()
            outputs.append(emulated_forward(op, options, shape, seed=11, loader=loader)[:2])
    finally:
        launcher.forget_plans()
    one, split = outputs
    assert slices == [1, 2]
    assert torch.equal(one[0], split[0]) and torch.equal(one[1], split[1])
