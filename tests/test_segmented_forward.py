"""The inference forward cut into segments on the family's own kernels (kdagen.ops.segmented), run on the CPU
through the emulator: o and the final state against the float64 reference and against the uncut forward —
wgmma64 in both state layouts, a per-channel and a per-head decay, with and without an initial state; mma16
(whose forward also writes what only a backward reads) once."""
from __future__ import annotations

import pytest
import torch

from kdagen.codegen import emulate
from kdagen.ops import segmented
from kdagen.ops.api import kernel_call, make_call
from kdagen.ops.forward import forward
from kdagen.reference import Options, chunked
from test_codegen_emulated import kernel_inputs, rel

needs_emulation = pytest.mark.skipif(emulate.unavailable() is not None, reason=f"no emulation: {emulate.unavailable()}")

CASES = {
    # strong lower-bound gate, two sequences, an initial state
    "kda_lb": ("kda", dict(use_gate_in_kernel=True, lower_bound=-5.0, use_qk_l2norm_in_kernel=True,
                           use_beta_sigmoid_in_kernel=True), dict(B=2, T=256, H=1, K=64, V=64)),
    # a per-head decay, state_v_first, GVA 2, no initial state
    "gdn_vfirst_gva2": ("gdn", dict(use_gate_in_kernel=True, use_qk_l2norm_in_kernel=True, state_v_first=True),
                        dict(B=1, T=256, H=1, G=2, K=64, V=64, h0=False)),
    # an unbounded per-channel gate, state_v_first with an initial state, two q/k heads
    "kda_softplus_vfirst_h2": ("kda", dict(use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                                           state_v_first=True), dict(B=1, T=192, H=2, K=64, V=64)),
}


def run(name: str, family: str, tokens: int | None, monkeypatch, output_final_state=True):
    op, options, shape = CASES[name]
    shape = dict(shape)
    h0 = shape.pop("h0", True)
    opt = Options(op=op, **options)
    xk, xr = kernel_inputs(opt, seed=5, **shape)
    if not h0:
        xk.pop("initial_state", None)
        xr.pop("initial_state", None)
    monkeypatch.setattr(segmented, "SEGMENT_TOKENS", tokens)
    call = make_call(op, initial_state=xk.get("initial_state"), output_final_state=output_final_state,
                     A_log=xk.get("A_log"), dt_bias=xk.get("dt_bias"), **options)
    kcall, tensors = kernel_call(call, xk, emulate=True, family=family)
    o, ht, saved = forward({**tensors, "initial_state": xk.get("initial_state"), "cu_seqlens": None}, kcall,
                           keep=False, poison=True)
    return o, ht, saved, xr, opt


@needs_emulation
@pytest.mark.parametrize("name, family", [(name, "wgmma64") for name in sorted(CASES)] + [("kda_lb", "mma16")])
def test_a_cut_forward_matches_float64_and_the_uncut_one(name, family, monkeypatch):
    o_cut, ht_cut, saved, xr, opt = run(name, family, 64, monkeypatch)     # four segments of one chunk each
    o, ht, *_ = run(name, family, None, monkeypatch)
    o_ref, ht_ref = chunked(xr, opt, 16)
    assert saved is None and ht_cut.is_contiguous() and ht_cut.shape == ht.shape
    assert not torch.isnan(o_cut).any() and not torch.isnan(ht_cut).any(), f"{name} on {family}: NaN left"
    for label, got, ref in (("o", o_cut, o_ref), ("final state", ht_cut, ht_ref)):
        assert rel(got, ref) <= 0.005, f"{name} on {family}: {label} {rel(got, ref):.2e} against float64"
    # the cut changes only roundings: within a small multiple of the uncut call's own error
    assert rel(o_cut, o_ref) <= 1.5 * rel(o, o_ref) + 1e-4, (rel(o_cut, o_ref), rel(o, o_ref))
    assert rel(ht_cut, ht_ref) <= 1.5 * rel(ht, ht_ref) + 1e-4, (rel(ht_cut, ht_ref), rel(ht, ht_ref))


@needs_emulation
def test_a_cut_forward_without_the_final_state(monkeypatch):
    o_cut, ht_cut, *_ = run("kda_lb", "wgmma64", 64, monkeypatch, output_final_state=False)
    o, *_ = run("kda_lb", "wgmma64", 64, monkeypatch)
    assert ht_cut is None and torch.equal(o_cut, o)


@pytest.mark.parametrize("T, HV, varlen, keep, K, V, tokens, expected", [
    (256, 1, False, False, 64, 64, 64, 4),
    (256, 1, False, False, 64, 64, None, 1),     # off
    (256, 1, False, True, 64, 64, 64, 1),        # a training call keeps the uncut forward's workspaces
    (256, 1, True, False, 64, 64, 64, 1),        # varlen: the lengths would need a host read
    (256, 1, False, False, 64, 128, 64, 1),      # K ≠ V: no K × K identity state
    (256, 1, False, False, 64, 64, 96, 1),       # not a multiple of the chunk alignment
    (200, 1, False, False, 64, 64, 64, 1),       # T not a multiple of the segment
    (64, 1, False, False, 64, 64, 64, 1),        # one segment would hold the whole sequence
    (256, 34, False, False, 64, 64, 64, 1),      # 2·34 pairs: over half of the H200’s 132 SMs busy uncut
    (256, 16, False, False, 128, 128, 64, 4),    # 2·16 pairs × 2 CTAs: 64 of 132 SMs
    (256, 17, False, False, 128, 128, 64, 1),
])
def test_which_calls_are_cut(T, HV, varlen, keep, K, V, tokens, expected):
    v = torch.empty(2, T, HV, V)
    assert segmented.segments_of(v, varlen, keep, K, V, tokens) == expected


@pytest.mark.parametrize("v_first", [False, True])
def test_the_chain_gives_the_op_level_combine(v_first):
    """chain (uniform segments, float64) against kdagen.ops.segments.combine (any segment counts, the maps' dtype)."""
    from kdagen.ops.segments import combine
    gen = torch.Generator().manual_seed(3)
    N, S, HV, K = 2, 3, 2, 4
    M = 0.5 * torch.randn(N * S, HV, K, K, generator=gen, dtype=torch.float64)
    B = torch.randn(N * S, HV, K, K, generator=gen, dtype=torch.float64)
    first = torch.randn(N, HV, K, K, generator=gen, dtype=torch.float64)
    want = combine(M, B, first, [S] * N, v_first)
    got = segmented.chain(M.float(), B.float(), first.float(), S, v_first)
    assert got.dtype == torch.float32 and torch.allclose(got.double(), want, rtol=1e-5, atol=1e-5)
    assert torch.equal(got[::S], first.float())               # each sequence's first segment starts from h0
