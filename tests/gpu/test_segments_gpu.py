"""Sequence parallelism inside one GPU (KDAGEN_SEGMENTS, docs/segments.md) on long sequences: o, the final state
and every gradient against the float64 chunked reference, with segments and without, for a decay that barely
fades (log decay ≈ −1e-3 per token: the state entering a segment matters to its last token) and a strong one;
two segmented runs bitwise equal. Bounds as tests/test_runtime_ops_gpu.py.
Run: python -m pytest -m gpu tests/gpu/test_segments_gpu.py -q (the float64 references take a minute).
"""
from __future__ import annotations

import pytest
import torch

import test_runtime_ops_gpu as ops_gpu
from kdagen import reference
from kdagen.ops import reference_options

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

CASES = {
    "weak-decay": ("kda", dict(use_qk_l2norm_in_kernel=True), dict(T=0, H=1, G=2, K=64, cu=[0, 70000, 70001])),
    "strong-decay-gate": ("kda", dict(use_gate_in_kernel=True, lower_bound=-5.0, safe_gate=True,
                                      use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True),
                          dict(T=65536, H=1, G=1, K=64)),
    "gdn-weak-vfirst": ("gdn", dict(state_v_first=True), dict(T=0, H=2, G=1, K=64, cu=[0, 5, 65541])),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("setting", ["off", "4096"])
def test_long_sequences_match_float64(monkeypatch, name, setting):
    op, options, shape = CASES[name]
    options = {"output_final_state": True, **options}
    x = ops_gpu.case_inputs(op, options, **shape, seed=11)
    if "weak" in name:                               # log decay ≈ −1e-3 per token (as bf16 the kernels read)
        x["g"] = (-1e-3 * torch.rand(x["g"].shape, dtype=torch.float64)).to(torch.bfloat16).double()
    if options.get("state_v_first"):
        x["initial_state"] = x["initial_state"].transpose(-1, -2).contiguous()
    opt = reference_options(op, **options, **{n: x[n] for n in ("A_log", "dt_bias") if n in x})
    o_ref, ht_ref = reference.chunked(x, opt, 64)
    do, dht = torch.randn_like(o_ref), torch.randn_like(ht_ref)
    grads_ref = reference.chunked_backward(x, opt, do, dht, 64)
    scales = ops_gpu.grad_scales(x, opt, grads_ref)
    monkeypatch.setenv("KDAGEN_SEGMENTS", setting)
    runs = [ops_gpu.run_kdagen(op, x, options, do, dht) for _ in range(2)]
    (o, ht, grads), (o2, ht2, grads2) = runs
    errors = {"o": ops_gpu.rel_l2(o, o_ref), "final_state": ops_gpu.rel_l2(ht, ht_ref)}
    errors.update({n: ops_gpu.rel_l2(grads[n], w, scales.get(n)) for n, w in grads_ref.items() if w is not None})
    print(f"\n[{name} segments={setting}] " + " ".join(f"{n}={e:.2e}" for n, e in errors.items()))
    bad = {n: e for n, e in errors.items() if not e <= ops_gpu.BOUNDS[n]}
    assert not bad, f"over bounds: {bad}; all: {errors}"
    assert torch.equal(o, o2) and torch.equal(ht, ht2) and all(torch.equal(grads[n], grads2[n]) for n in grads)


# fixed-length cases for the inference forward cut on the family's own kernels (kdagen.ops.segmented): head dim
# 128 (wgmma64's value-row split) with a barely fading decay, head dim 64 with a strong gate
CUT_CASES = {
    "weak-decay-k128": ("kda", dict(use_qk_l2norm_in_kernel=True), dict(T=65536, H=1, G=2, K=128)),
    "strong-decay-gate": CASES["strong-decay-gate"],
}


def fixed_length_case(name: str, op: str, options: dict, shape: dict, seed: int):
    """(options with the final state asked, inputs, reference options, float64 (o, final state)) of a fixed-length
    case; a "weak" one gets log decays ≈ −1e-3 per token (as bf16 the kernels read)."""
    options = {"output_final_state": True, **options}
    x = ops_gpu.case_inputs(op, options, **shape, seed=seed)
    if "weak" in name:
        x["g"] = (-1e-3 * torch.rand(x["g"].shape, dtype=torch.float64)).to(torch.bfloat16).double()
    opt = reference_options(op, **options, **{n: x[n] for n in ("A_log", "dt_bias") if n in x})
    return options, x, opt, reference.chunked(x, opt, 64)


@pytest.mark.parametrize("name, setting", [(name, "4096") for name in sorted(CUT_CASES)] + [("weak-decay-k128", "auto")])
def test_an_inference_forward_cut_on_the_kernels_matches_float64(monkeypatch, name, setting):
    """kdagen.ops.segmented: o and the final state of an inference call cut every 4096 tokens (KDAGEN_CUT), or
    where the planner's model puts the cuts (the default), against float64 within today's bounds; two runs bitwise
    equal; the cut did run."""
    from kdagen.ops import segmented
    op, options, shape = CUT_CASES[name]
    options, x, opt, (o_ref, ht_ref) = fixed_length_case(name, op, options, shape, 13)
    cuts = []
    monkeypatch.setenv("KDAGEN_CUT", setting)
    monkeypatch.setattr(segmented, "launch_cut", lambda *a, _cut=segmented.launch_cut, **k: cuts.append(a[5]) or
                        _cut(*a, **k))
    with torch.no_grad():
        (o, ht, _), (o2, ht2, _) = [ops_gpu.call_kdagen(op, x, options, grad=False) for _ in range(2)]
    errors = {"o": ops_gpu.rel_l2(o, o_ref), "final_state": ops_gpu.rel_l2(ht, ht_ref)}
    print(f"\n[{name} KDAGEN_CUT={setting}: {cuts}] " + " ".join(f"{n}={e:.2e}" for n, e in errors.items()))
    # both runs cut, alike: every 4096 tokens as asked, or as the planner put it (the model's own choice is
    # tests/test_plan_cut.py's)
    assert len(cuts) == 2 and cuts[0] == cuts[1] > 1 and (setting != "4096" or cuts[0] == shape["T"] // 4096), cuts
    assert all(e <= ops_gpu.BOUNDS[n] for n, e in errors.items()), errors
    assert torch.equal(o, o2) and torch.equal(ht, ht2) and ht.is_contiguous()


# fixed-length cases for the training step cut on the family's kernels (kdagen.ops.segmented, docs/segments.md §6)
TRAINING_CASES = {
    "weak-decay-k128": CUT_CASES["weak-decay-k128"],
    "strong-decay-gate": CASES["strong-decay-gate"],
}


@pytest.mark.parametrize("family", ["mma16", "wgmma64"])
@pytest.mark.parametrize("name, setting", [("weak-decay-k128", "auto"), ("strong-decay-gate", "4096")])
def test_a_training_step_cut_on_the_kernels_matches_float64(monkeypatch, name, setting, family):
    """A training call cut into segments (KDAGEN_CUT: the planner's model, or every 4096 tokens) and the same call
    uncut, on each family's kernels: o, the final state and every gradient against float64 within today's bounds
    for both, the cut no worse than 1.5× the uncut error (+1e-4); two cut runs bitwise equal; the cut backward did
    run (it reads what only a cut forward saves) on that family."""
    from kdagen.ops import segmented
    monkeypatch.setenv("KDAGEN_FAMILY", family)
    op, options, shape = TRAINING_CASES[name]
    options, x, opt, (o_ref, ht_ref) = fixed_length_case(name, op, options, shape, 17)
    do, dht = torch.randn_like(o_ref), torch.randn_like(ht_ref)
    grads_ref = reference.chunked_backward(x, opt, do, dht, 64)
    scales = ops_gpu.grad_scales(x, opt, grads_ref)
    cuts, families = [], set()
    monkeypatch.setattr(segmented, "backward_cut", lambda *a, _cut=segmented.backward_cut, **k: cuts.append(a[-1]) or
                        families.add(a[0].plan.family) or _cut(*a, **k))

    def errors_of(o, ht, grads):
        errors = {"o": ops_gpu.rel_l2(o, o_ref), "final_state": ops_gpu.rel_l2(ht, ht_ref)}
        errors.update({n: ops_gpu.rel_l2(grads[n], w, scales.get(n)) for n, w in grads_ref.items() if w is not None})
        return errors
    monkeypatch.setenv("KDAGEN_CUT", "off")
    uncut = errors_of(*ops_gpu.run_kdagen(op, x, options, do, dht))
    monkeypatch.setenv("KDAGEN_CUT", setting)
    runs = [ops_gpu.run_kdagen(op, x, options, do, dht) for _ in range(2)]
    cut = errors_of(*runs[0])
    print(f"\n[{name} training on {family}, KDAGEN_CUT={setting}: {cuts} segments] "
          + " ".join(f"{n}={e:.2e} (uncut {uncut[n]:.2e})" for n, e in cut.items()))
    assert len(cuts) == 2 and cuts[0] == cuts[1] > 1 and (setting != "4096" or cuts[0] == shape["T"] // 4096), cuts
    assert families == {family}, families
    for errors in (uncut, cut):
        assert all(e <= ops_gpu.BOUNDS[n] for n, e in errors.items()), errors
    assert all(cut[n] <= 1.5 * uncut[n] + 1e-4 for n in cut), (cut, uncut)
    (o, ht, grads), (o2, ht2, grads2) = runs
    assert torch.equal(o, o2) and torch.equal(ht, ht2) and all(torch.equal(grads[n], grads2[n]) for n in grads)
