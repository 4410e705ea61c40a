"""The planner's cut of a call into segments (kdagen.plan.cut): which calls can be cut, where the cost models (an
inference forward's, a training step's) cut by default at the bench's shapes on the H200's 132 SMs, KDAGEN_CUT, and
`kdagen plan --tokens`."""
from __future__ import annotations

import pytest
import torch

from kdagen.cli import main
from kdagen.ops import segmented
from kdagen.plan.cut import CUT_MARGIN, plan_cut


@pytest.mark.parametrize("T, pairs, varlen, keep, K, V, tokens, expected", [
    (256, 2, False, False, 64, 64, 64, 4),
    (256, 2, False, False, 64, 64, "off", 1),
    (256, 2, False, True, 64, 64, 64, 4),        # a training step on wgmma64 (its dstate has the C pass)
    (256, 2, True, False, 64, 64, 64, 1),        # varlen: the lengths would need a host read
    (256, 2, False, False, 64, 128, 64, 1),      # K ≠ V: no K × K identity state
    (256, 2, False, False, 48, 48, 64, 1),       # a D the chain kernel is not compiled for
    (288, 2, False, False, 64, 64, 96, 1),       # not a multiple of the chunk (it divides T)
    (200, 2, False, False, 64, 64, 64, 1),       # T not a multiple of the segment
    (64, 2, False, False, 64, 64, 64, 1),        # one segment would hold the whole sequence
    (256, 68, False, False, 64, 64, 64, 4),      # a length given cuts whatever the model says
])
def test_which_calls_can_be_cut(T, pairs, varlen, keep, K, V, tokens, expected):
    cut = plan_cut("wgmma64", pairs, T, K, V, 132, maps_pass=True, resident=1, varlen=varlen, keep=keep, tokens=tokens)
    assert cut.segments == expected, cut
    assert cut.segments == 1 or cut.tokens * cut.segments == T


def test_a_training_step_is_cut_on_mma16_where_a_length_is_given():
    cut = plan_cut("mma16", 2, 256, 64, 64, 132, maps_pass=True, resident=1, keep=True, tokens=64)
    assert (cut.segments, cut.tokens) == (4, 64), cut


def test_a_family_without_a_c_pass_cuts_no_training_step():
    cut = plan_cut("other", 2, 256, 64, 64, 132, maps_pass=True, resident=1, keep=True, tokens=64)
    assert cut.segments == 1 and "no C pass" in cut.why, cut


@pytest.mark.parametrize("pairs, T, K, expected", [
    (4, 65536, 128, (16, 4096)),     # 8 of 132 SMs walk 1024 chunks uncut
    (16, 32768, 128, (4, 8192)),     # 32 CTAs per pass uncut; cut into 4, 128 fill the SMs
    (64, 8192, 128, None),           # 128 CTAs already fill them
    (256, 4096, 128, None),
    (64, 4096, 64, None),
    (32, 32768, 64, None),           # three ordinary passes at K = 64 cost more than the 32-CTA walk saves
])
def test_where_the_wgmma64_training_model_cuts_by_default(pairs, T, K, expected):
    """wgmma64's training step (its recurrence and dstate on V/64 CTAs per pair, a maps pass): the decisions at the
    bench's shapes."""
    z = K // 64                     # one CTA per pair at K = 64: no maps pass (B and M: two ordinary passes)
    cut = plan_cut("wgmma64", pairs, T, K, K, 132, maps_pass=z > 1, resident=1, keep=True, slices=(z, z))
    assert (cut.segments, cut.tokens) == (expected or (1, T)), cut


@pytest.mark.parametrize("pairs, T, K, maps_pass, expected", [
    (4, 65536, 128, True, (16, 4096)),    # the long-context shape: 8 of 132 SMs busy uncut
    (16, 32768, 128, True, (4, 8192)),    # two passes over every token (the maps pass, the ordinary one) ...
    (16, 32768, 128, False, None),        # ... but not three: they cost more than the 32-CTA walk
    (64, 8192, 128, True, None),
    (64, 4096, 64, False, None),
    (1, 8192, 128, True, (8, 1024)),
    (8, 1000 * 64, 128, True, None),      # no length of 1024·2^i divides 64000 tokens
])
def test_where_the_model_cuts_by_default(pairs, T, K, maps_pass, expected):
    cut = plan_cut("wgmma64", pairs, T, K, K, 132, maps_pass=maps_pass, resident=1)
    assert (cut.segments, cut.tokens) == (expected or (1, T)), cut
    if expected:
        assert cut.cut_us < CUT_MARGIN * cut.uncut_us
        # the chosen length is the model's best: no other power-of-two length is modelled faster
        others = [plan_cut("wgmma64", pairs, T, K, K, 132, maps_pass=maps_pass, resident=1, tokens=t)
                  for t in (1024, 2048, 4096, 8192, 16384)]
        assert all(o.cut_us >= cut.cut_us for o in others if o.segments > 1)


@pytest.mark.parametrize("pairs, T, K, expected", [
    (4, 65536, 128, (32, 2048)),          # the long-context shape: the two serial passes on 8 and 32 CTAs uncut
    (16, 32768, 128, (8, 4096)),
    (64, 8192, 128, None),                # 128 recurrence and 512 dstate_pass CTAs already fill the SMs
    (256, 4096, 128, None),
    (64, 4096, 64, None),
])
def test_where_the_training_model_cuts_by_default(pairs, T, K, expected):
    """mma16's training step (its recurrence on 2 CTAs per pair, dstate_pass on 8): the decisions at the bench's
    shapes, each the model's best length."""
    cut = plan_cut("mma16", pairs, T, K, K, 132, maps_pass=False, resident=2, keep=True, slices=(2, 8))
    assert (cut.segments, cut.tokens) == (expected or (1, T)), cut
    if expected:
        others = [plan_cut("mma16", pairs, T, K, K, 132, maps_pass=False, resident=2, keep=True, slices=(2, 8),
                           tokens=t) for t in (1024, 2048, 4096, 8192, 16384)]
        assert all(o.cut_us >= cut.cut_us for o in others if o.segments > 1)


def test_the_training_model_reproduces_its_fit():
    """The model's two serial passes at the shapes it was fitted to (session 11, run 1, ms): within 10%."""
    from kdagen.plan.cut import _TrainingModel
    model = _TrainingModel("mma16", 128, 132, (2, 8), False)
    measured = {(4, 65536, 1): (4.328, 6.141), (4, 65536, 32): (0.223, 0.591), (4, 65536, 16): (0.288, 0.603),
                (16, 32768, 1): (2.202, 3.109), (16, 32768, 8): (0.439, 1.236), (16, 32768, 4): (0.562, 1.222)}
    for (pairs, T, S), times in measured.items():
        for got, want in zip((model.one("recurrence", pairs, T, S), model.one("dstate", pairs, T, S)), times):
            assert abs(got / 1e3 - want) <= 0.1 * want, (pairs, T, S, got, want)


def test_a_family_without_measured_constants_is_cut_only_when_asked():
    assert plan_cut("mma16", 4, 65536, 128, 128, 132, maps_pass=False, resident=1).segments == 1
    forced = plan_cut("mma16", 4, 65536, 128, 128, 132, maps_pass=False, resident=1, tokens=4096)
    assert (forced.segments, forced.cut_us) == (16, 0.0) and "KDAGEN_CUT=4096" in forced.describe()


def test_the_recurrence_ctas_an_sm_holds():
    from kdagen.plan import make_plan, problem_from_options
    from kdagen.plan.cut import resident_ctas
    from kdagen.reference import Options
    plan = make_plan(problem_from_options(Options(op="kda"), K=128, V=128, arch="sm_90a"), family="wgmma64",
                     directions=("forward",))
    assert resident_ctas(plan.kernel("recurrence"), "sm_90a") == 1        # 168 KB of ring and staging
    assert resident_ctas(plan.kernel("prepare"), "sm_90a") == 2           # 107 KB, as its launch bounds say


def test_kdagen_cut_setting(monkeypatch):
    from kdagen.plan import make_plan, problem_from_options
    from kdagen.reference import Options
    from kdagen.ops.launcher import Schedule
    problem = problem_from_options(Options(op="kda"), K=128, V=128, arch="sm_90a")
    plan = make_plan(problem, family="wgmma64", directions=("forward",))
    assert segmented.has_maps_pass(plan)
    schedule = Schedule(plan, problem.recurrence, "forward")
    v = torch.empty(1, 65536, 4, 128, device="meta")
    monkeypatch.delenv("KDAGEN_CUT", raising=False)
    assert segmented.cut_of(schedule, v, False, False).segments == 16
    monkeypatch.setenv("KDAGEN_CUT", "off")
    assert segmented.cut_of(schedule, v, False, False).segments == 1
    monkeypatch.setenv("KDAGEN_CUT", "8192")
    assert segmented.cut_of(schedule, v, False, False).segments == 8
    for bad in ("half", "100", "²"):        # a typo, a length off the 64-token chunk, a digit that is not ASCII
        monkeypatch.setenv("KDAGEN_CUT", bad)
        with pytest.raises(ValueError, match=f"KDAGEN_CUT='{bad}'"):
            segmented.cut_of(schedule, v, False, False)


def test_kdagen_plan_prints_the_cut(capsys):
    assert main(["plan", "--op", "kda", "--inference", "--pairs", "4", "--tokens", "65536", "--kernel",
                 "recurrence"]) == 0
    out = capsys.readouterr().out
    assert "cut into 16 segments of 4096 tokens" in out
    assert main(["plan", "--op", "kda", "--inference", "--pairs", "64", "--tokens", "8192", "--kernel",
                 "recurrence"]) == 0
    assert "not cut: the best cut" in capsys.readouterr().out
    # without --inference: a training step's cut (wgmma64's forward and backward on the view; mma16's at head dim 64)
    assert main(["plan", "--op", "kda", "--pairs", "4", "--tokens", "65536", "--kernel", "dstate"]) == 0
    out = capsys.readouterr().out
    assert "segments of a training step" in out and "cut into 16 segments of 4096 tokens" in out
    assert "further entry points (same parameters, a constant switched): dstate_starts" in out
    assert main(["plan", "--op", "kda", "--head-dim", "64", "--pairs", "4", "--tokens", "65536", "--kernel",
                 "dstate_pass"]) == 0
    out = capsys.readouterr().out
    assert "segments of a training step" in out and "cut into" in out
    assert "further entry points (same parameters, a constant switched): dstate_starts" in out
    for refused in (["--tokens", "65536"], ["--inference", "--pairs", "4", "--tokens", "65536", "--json"],
                    ["--sms", "114"], ["--inference", "--pairs", "4", "--tokens", "65536", "--sms", "0"]):
        assert main(["plan", "--op", "kda", *refused]) == 2, refused
        assert "kdagen plan: --" in capsys.readouterr().err
