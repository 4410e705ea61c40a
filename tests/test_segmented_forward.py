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
    # head dim 128: the recurrence's value rows over two CTAs, so its maps pass runs (one launch, grid z doubled);
    # a log decay ≈ −1e-3 per token, so each segment's map M carries its incoming state to the end almost whole
    "kda_weak_k128": ("kda", dict(use_qk_l2norm_in_kernel=True), dict(B=1, T=128, H=1, K=128, V=128, weak=True)),
    "gdn_weak_vfirst_k128": ("gdn", dict(use_qk_l2norm_in_kernel=True, state_v_first=True),
                             dict(B=1, T=128, H=1, K=128, V=128, weak=True)),
    # an unbounded per-channel gate, state_v_first with an initial state, two q/k heads
    "kda_softplus_vfirst_h2": ("kda", dict(use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                                           state_v_first=True), dict(B=1, T=192, H=2, K=64, V=64)),
}


def run(name: str, family: str, tokens: int | None, monkeypatch, output_final_state=True):
    op, options, shape = CASES[name]
    shape = dict(shape)
    h0, weak = shape.pop("h0", True), shape.pop("weak", False)
    opt = Options(op=op, **options)
    xk, xr = kernel_inputs(opt, seed=5, **shape)
    if weak:
        g = (-1e-3 * torch.rand(xk["g"].shape, generator=torch.Generator().manual_seed(6))).to(xk["g"].dtype)
        xk["g"], xr["g"] = g, g.double()
    if not h0:
        xk.pop("initial_state", None)
        xr.pop("initial_state", None)
    monkeypatch.setenv("KDAGEN_CUT", str(tokens) if tokens else "off")
    call = make_call(op, initial_state=xk.get("initial_state"), output_final_state=output_final_state,
                     A_log=xk.get("A_log"), dt_bias=xk.get("dt_bias"), **options)
    kcall, tensors = kernel_call(call, xk, emulate=True, family=family)
    o, ht, saved = forward({**tensors, "initial_state": xk.get("initial_state"), "cu_seqlens": None}, kcall,
                           keep=False, poison=True)
    return o, ht, saved, xr, opt


@needs_emulation
@pytest.mark.parametrize("name, family", [(name, "wgmma64") for name in sorted(CASES)] + [("kda_lb", "mma16")])
def test_a_cut_forward_matches_float64_and_the_uncut_one(name, family, monkeypatch):
    grids = []
    real = segmented.run_kernels
    monkeypatch.setattr(segmented, "run_kernels", lambda launches, module, values, direction: grids.extend(
        (launch[0], tuple(launch[1])) for launch in launches) or real(launches, module, values, direction))
    o_cut, ht_cut, saved, xr, opt = run(name, family, 64, monkeypatch)     # a segment per chunk
    recurrences = [(kernel, grid) for kernel, grid in grids if kernel.startswith("recurrence")]
    if "k128" in name:      # the maps pass on the doubled grid, then the ordinary pass
        assert [k for k, _ in recurrences] == ["recurrence_maps", "recurrence"], recurrences
        assert recurrences[0][1][2] == 2 * recurrences[1][1][2]
    else:
        assert [k for k, _ in recurrences] == ["recurrence"] * 3, recurrences
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


@needs_emulation
@pytest.mark.parametrize("v_first, D, h0", [(False, 64, True), (True, 64, True), (False, 64, False), (True, 128, True),
                                            (False, 128, True)])
def test_the_chain_kernel_gives_the_op_level_combine(v_first, D, h0):
    """The chain kernel (templates/segments/chain.cu, emulated; uniform segments, fp32) against
    kdagen.ops.segments.combine in float64 (any segment counts)."""
    from kdagen.ops.segments import combine
    gen = torch.Generator().manual_seed(3 + D)
    N, S, HV = 2, 3, 2
    M = torch.randn(N * S, HV, D, D, generator=gen, dtype=torch.float64) / D ** 0.5
    B = torch.randn(N * S, HV, D, D, generator=gen, dtype=torch.float64)
    first = torch.randn(N, HV, D, D, generator=gen, dtype=torch.float64) if h0 else torch.zeros(N, HV, D, D,
                                                                                                 dtype=torch.float64)
    want = combine(M, B, first, [S] * N, v_first)
    got = segmented.chain(M.float(), B.float(), first.float() if h0 else None, S, v_first)
    assert got.dtype == torch.float32 and got.shape == B.shape
    assert torch.allclose(got.double(), want, rtol=1e-5, atol=1e-5), (got.double() - want).abs().max()
    assert torch.equal(got[::S], first.float())               # each sequence's first segment starts from h0
    assert torch.equal(segmented.chain(M.float(), B.float(), first.float() if h0 else None, S, v_first), got)


def test_the_chain_names_what_it_cannot_take():
    with pytest.raises(ValueError, match="D × D state"):
        segmented.chain(*(torch.zeros(2, 1, 48, 48) for _ in range(2)), None, 2, False)
    with pytest.raises(ValueError, match="3 segments per sequence"):
        segmented.chain(*(torch.zeros(4, 1, 64, 64) for _ in range(2)), None, 3, False)
    with pytest.raises(ValueError, match="contiguous float32"):
        segmented.chain(torch.zeros(4, 1, 64, 64, dtype=torch.float64), torch.zeros(4, 1, 64, 64), None, 2, False)
