"""A training step cut into segments on the mma16 and the wgmma64 kernels (kdagen.ops.segmented, docs/segments.md §6),
run on the CPU through the emulator: the forward on the view keeping its workspaces and the segments' states, then
the C pass (the dS chain's entry point dstate_starts from dht = 0), the reverse chain and the backward on the view.
Every gradient against float64 and against the uncut step; the custom op's fake implementation against the
kernels' saved shapes."""
from __future__ import annotations

import dataclasses

import pytest
import torch
from backward_cases import FULL, Case, call_options, case_inputs, check_grads, poisoned, reference, rel_l2

from kdagen.codegen import emulate
from kdagen.ops import backward as bw
from kdagen.ops import forward as fw
from kdagen.ops import library, segmented
from kdagen.ops.api import kernel_call, make_call
from kdagen.reference.options import Options

needs_emulation = pytest.mark.skipif(emulate.unavailable() is not None, reason=f"no emulation: {emulate.unavailable()}")

CASES = [
    # the lower-bound gate, two sequences, h0 and dht: 3 segments of 64 tokens each (4 chunks, a block cut short)
    Case("kda_lb_h0", Options(**FULL), 64, dict(B=2, T=192, H=1)),
    # a per-head log decay ≈ −0.02·|N(0, 1)| per token, state_v_first, GVA 2: each segment's map M carries most of
    # its dS_out back to its start
    Case("gdn_vfirst_gva2_weak", Options(op="gdn", use_qk_l2norm_in_kernel=True, state_v_first=True), 64,
         dict(B=1, T=128, H=1, G=2), g_scale=0.02),
    # a weak per-channel decay, the [K, V] layout, no initial state but a dht
    Case("kda_weak_no_h0", Options(op="kda", use_qk_l2norm_in_kernel=True), 64,
         dict(B=1, T=128, H=1, initial_state=False), g_scale=0.02),
    # an unbounded per-channel gate, two heads, neither h0 nor dht: the call's dht is zero and it has no dh0
    Case("kda_softplus_no_state", Options(op="kda", use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True), 64,
         dict(B=1, T=128, H=2, initial_state=False), dht=False),
]


# wgmma64 (chunk 64; its C pass is dstate's entry point dstate_starts): at K = V = 64 the recurrence has one CTA per
# pair and no maps pass (B and M by two ordinary passes); at K = V = 128 two, and the maps pass computes both
WGMMA64_CASES = [
    # the lower-bound gate, h0 and dht, state_v_first: 3 segments of one chunk each
    Case("wgmma64_kda_lb_vfirst_k64", Options(**FULL, state_v_first=True), 64, dict(B=1, T=192, H=1), g_scale=0.02),
    # a per-head decay, K = V = 128 (the maps pass), no h0, a dht: 2 segments
    Case("wgmma64_gdn_k128", Options(op="gdn", use_qk_l2norm_in_kernel=True), 128,
         dict(B=1, T=128, H=1, initial_state=False), g_scale=0.02),
]


def step(case: Case, seed: int, segments: int, monkeypatch, launched: list | None = None, family: str | None = None):
    """(gradients, saved) of the forward + backward of the case, the forward cut into `segments` (1: uncut), on
    `family`'s kernels (None: the planner's choice)."""
    x, do, dht = case_inputs(case, seed)
    call = make_call(case.opt.op, initial_state=x.get("initial_state"), output_final_state=True,
                     A_log=x.get("A_log"), dt_bias=x.get("dt_bias"), **call_options(case.opt))
    kcall, tensors = kernel_call(call, x, emulate=True, family=family)
    kcall = dataclasses.replace(kcall, segments=segments)
    if launched is not None:
        real = segmented.run_kernels
        monkeypatch.setattr(segmented, "run_kernels", lambda launches, module, values, direction: launched.extend(
            launch[0] for launch in launches) or real(launches, module, values, direction))
    _, _, saved = fw.forward({**tensors, "initial_state": x.get("initial_state"), "cu_seqlens": None}, kcall,
                             poison=True)
    return bw.backward(saved, do, dht, alloc=poisoned), saved, (x, do, dht)


@needs_emulation
@pytest.mark.parametrize("case, family", [(c, None) for c in CASES] + [(c, "wgmma64") for c in WGMMA64_CASES],
                         ids=str)
def test_a_cut_training_step_matches_float64_and_the_uncut_one(case, family, monkeypatch):
    seed = 11
    T = case.shape["T"]
    launched = []
    grads, saved, (x, do, dht) = step(case, seed, T // 64, monkeypatch, launched, family)
    # forward: the prepare, then B and M (one maps pass, or two ordinary ones) and the ordinary pass; backward: the
    # C pass alone
    maps_pass = segmented.has_maps_pass(saved["plan"])
    assert saved["plan"].family == (family or "mma16")
    assert launched.count("recurrence") == (1 if maps_pass else 3), launched
    assert launched.count("recurrence_maps") == maps_pass and launched[-1] == "dstate_starts", launched
    assert saved["segments"] == T // 64 and set(saved["segment_states"]) == {"segment_h0", "segment_maps"}
    uncut, _, _ = step(case, seed, 1, monkeypatch, family=family)
    ref = reference(case, x, do, dht)
    check_grads(grads, ref, f"{case.name} cut into {T // 64} segments")
    for name, r in ref.items():
        if r is None:
            continue
        cut_err, uncut_err = rel_l2(grads[name], r), rel_l2(uncut[name], r)
        # the cut changes roundings only (the states and dS crossing a segment boundary in fp32 through the maps)
        assert cut_err <= 1.5 * uncut_err + 1e-4, f"{case.name}: {name} {cut_err:.3e} cut, {uncut_err:.3e} uncut"


@needs_emulation
@pytest.mark.parametrize("final_state", [True, False])
def test_the_op_saves_what_its_fake_says_and_its_gradients_are_the_direct_ones(monkeypatch, final_state):
    """Through the custom op (the path of every training call): the key carries the segments, the fake
    implementation gives the outputs' and saved workspaces' shapes (the view's checkpoint slots and the segments'
    states; with and without the final state), and the op's backward returns the gradients the direct path gives,
    bit for bit."""
    case = dataclasses.replace(CASES[0], shape=dict(B=2, T=128, H=1))      # two segments of 64 tokens each
    x, do, dht = case_inputs(case, 3)
    call = make_call(case.opt.op, initial_state=x.get("initial_state"), output_final_state=True,
                     A_log=x.get("A_log"), dt_bias=x.get("dt_bias"), **call_options(case.opt))
    kcall, tensors = kernel_call(call, x, emulate=True)
    spec = kcall.spec
    key = library.call_key(spec, kcall.state_layout, None, True, 2)
    inputs = [tensors[n] for n in spec.inputs]
    args = (key, inputs, x["initial_state"], None, [kcall.scalars[n] for n in spec.scalars], final_state, True)
    o, ht, saved = library.recurrence_forward(*args)
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
        fake = library.recurrence_forward(*(mode.from_tensor(a) if isinstance(a, torch.Tensor) else
                                            [mode.from_tensor(t) for t in a] if isinstance(a, list) and a and
                                            isinstance(a[0], torch.Tensor) else a for a in args))
    assert tuple(fake[1].shape) == tuple(ht.shape) and (ht.numel() > 0) == final_state
    assert [tuple(t.shape) for t in fake[2]] == [tuple(t.shape) for t in saved]
    assert [t.dtype for t in fake[2]] == [t.dtype for t in saved]
    # without the final state there is no dht: the direct step of the same inputs without one
    direct, _, _ = step(case if final_state else dataclasses.replace(case, dht=False), 3, 2, monkeypatch)
    grads = library.recurrence_backward(key, inputs, x["initial_state"], None, args[4], saved, do,
                                        dht if final_state else None)
    for name, g in zip([*spec.inputs, "initial_state"], grads):
        assert torch.equal(g, direct[name]), name


def test_a_training_call_decides_its_segments_before_the_op(monkeypatch):
    """run.apply puts the cut in the op's key (what the fake implementation reads) from the planner's training
    model: a long sequence with few heads is cut, KDAGEN_CUT=off and a varlen batch are not."""
    from kdagen.ops import run as run_module
    case = CASES[0]
    x, _, _ = case_inputs(case, 0)
    call = make_call(case.opt.op, initial_state=x.get("initial_state"), A_log=x.get("A_log"),
                     dt_bias=x.get("dt_bias"), **call_options(case.opt))
    kcall, tensors = kernel_call(call, x, emulate=True)
    inputs = [tensors[n] for n in kcall.spec.inputs]
    monkeypatch.setenv("KDAGEN_CUT", "64")
    assert run_module.training_segments(kcall, inputs) == 3
    monkeypatch.setenv("KDAGEN_CUT", "off")
    assert run_module.training_segments(kcall, inputs) == 1
    monkeypatch.setenv("KDAGEN_CUT", "auto")
    assert run_module.training_segments(kcall, inputs) == 1          # 192 tokens: no segment length fits
    long = {n: t.new_zeros((1, 65536, *t.shape[2:])) if n in ("q", "k", "v", "g", "beta") else t
            for n, t in tensors.items()}
    S = run_module.training_segments(kcall, [long[n] for n in kcall.spec.inputs])
    assert S > 1 and 65536 % (S * 1024) == 0, S          # one pair of 65536 tokens: cut, into 1024·2^i tokens
    varlen = dataclasses.replace(kcall, cu_seqlens=torch.tensor([0, 100, 192]))
    monkeypatch.setenv("KDAGEN_CUT", "64")
    assert run_module.training_segments(varlen, inputs) == 1
