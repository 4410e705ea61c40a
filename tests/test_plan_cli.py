"""`kdagen emit`, `kdagen plan` and `kdagen inspect`, as a user runs them (no GPU). They take the same
configuration flags as `kdagen compile` (FLA's option names and defaults)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from kdagen.cli import main
from kdagen.ops.arguments import parse_config
from kdagen.plan import Plan
from kdagen.plan.families import few_pairs_limit, training_pairs_limit
from cli_run import run_main

LB = ["--use-gate-in-kernel", "--lower-bound", "-5", "--use-qk-l2norm-in-kernel", "--use-beta-sigmoid-in-kernel"]


@pytest.mark.parametrize("command", ["emit", "plan", "inspect"])
def test_help_has_an_example(command, capsys):
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "example" in out and f"kdagen {command} --op" in out


def test_emit_without_a_gpu(tmp_path, capsys):
    code, out, err = run_main(["emit", "--op", "kda", *LB, "--head-dim", "128", "--arch", "sm_90a", "-o", str(tmp_path)],
                         capsys)
    assert code == 0, err
    uri = "kda_lb5_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_mma16_sm90a"
    files = sorted(p.name for p in (tmp_path / uri).iterdir())
    assert "forward.cu" in files and "plan.json" in files
    assert Plan.from_json((tmp_path / uri / "plan.json").read_text()).uri == uri
    assert "// kdagen" in (tmp_path / uri / "forward.cu").read_text()
    code, out, _ = run_main(["emit", "--op", "kda", *LB, "--arch", "sm_90a", "-o", str(tmp_path)], capsys)
    assert "0 file(s) written" in out                     # unchanged: nothing rewritten


def test_emit_options_change_the_configuration(tmp_path, capsys):
    code, out, err = run_main(["emit", "--op", "kda", "--use-gate-in-kernel", "--head-dim", "64", "--gva", "2",
                          "--varlen", "--arch", "sm_80", "-o", str(tmp_path)], capsys)
    assert code == 0, err
    (d,) = list(tmp_path.iterdir())
    assert d.name == "kda_sp_k64v64_bf16_gbf16_bbf16_gva2_varlen_mma16_sm80"
    assert json.loads((d / "plan.json").read_text())["exponent_form"] == "relative"


def test_plan_prints_roles_and_barriers(capsys):
    code, out, err = run_main(["plan", "--op", "kda", *LB], capsys)
    assert code == 0, err
    for needle in ("kernel prepare", "kernel recurrence", "roles", "mma   0..3", "load  4..4", "barriers",
                   "ready    mbarrier  2       32", "free     mbarrier  2       128", "pipelines", "chunk_ring",
                   "shared memory", "steps (program order)", "workspaces", "exponent form 'factored'"):
        assert needle in out, needle
    code, out, _ = run_main(["plan", "--op", "gdn", "--kernel", "recurrence_bwd"], capsys)
    assert "kernel recurrence_bwd" in out and "kernel prepare " not in out and "dhT_hi" in out
    code, _, err = run_main(["plan", "--kernel", "nope"], capsys)
    assert code == 2 and "unknown kernel" in err


def test_plan_json_and_dot(capsys):
    code, out, _ = run_main(["plan", "--op", "gdn", "--json"], capsys)
    assert code == 0 and Plan.from_json(out).decay_kind == "scalar"
    strict = json.loads(out, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))   # no -Infinity
    assert strict["decay_interval"][0] == "-inf" and Plan.from_json(out).decay_interval[0] == float("-inf")
    code, out, _ = run_main(["plan", "--op", "gdn", "--dot"], capsys)
    assert code == 0 and out.startswith("digraph") and '"prepare" -> "recurrence"' in out


def test_inspect_source(capsys):
    code, out, _ = run_main(["inspect", "--op", "gdn", "--head-dim", "64"], capsys)
    assert code == 0 and " prepare(" in out and " recurrence(" in out


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_inspect_resources(capsys):
    code, out, err = run_main(["inspect", "--op", "kda", "--head-dim", "64", "--resources", "--arch", "sm_80"], capsys)
    assert code == 0, err
    lines = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert set(lines) == {"prepare", "recurrence"}
    assert all(cols[4] == "0" and cols[6] == cols[7] for cols in lines.values())   # no spills; smem as planned


def test_module_entry_point():
    res = subprocess.run([sys.executable, "-m", "kdagen", "plan", "--op", "kda", *LB, "--json"], capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr
    assert Plan.from_json(res.stdout).exponent_form == "factored"


@pytest.mark.parametrize("argv, message", [
    (["emit", "--defaults", "--op", "gdn", "-o", "unused"], "drop op"),
    (["plan", "--json", "--kernel", "prepare"], "--kernel selects tables"),
    (["plan", "--kernel", "no_such_kernel"], "unknown kernel"),
])
def test_options_that_would_be_ignored_are_refused(argv, message, capsys):
    code, _, err = run_main(argv, capsys)
    assert code == 2 and message in err


def test_the_same_flags_name_the_same_kernels(capsys):
    """`kdagen plan` and `kdagen compile` (and KDAGEN_PRECOMPILE) read one set of flags: the same words give the
    plan the ops run for such a call."""
    words = ["--op", "gdn", "--head-dim", "64", "--use-gate-in-kernel", "--gva", "2", "--arch", "sm_80"]
    code, out, err = run_main(["plan", *words, "--json"], capsys)
    assert code == 0, err
    planned, _ = parse_config(" ".join(words)).config().planned()
    assert Plan.from_json(out).uri == planned.uri == "gdn_sp_k64v64_bf16_gbf16_bbf16_gva2_mma16_sm80"


def test_plan_json_names_the_family(capsys, monkeypatch):
    code, out, err = run_main(["plan", "--op", "kda", "--head-dim", "128", "--json"], capsys)
    assert code == 0, err
    plan = json.loads(out)
    assert plan["family"] == "mma16" and plan["uri"].endswith("_mma16_sm90a") and plan["chunk"] == 16
    code, _, err = run_main(["plan", "--op", "kda", "--family", "nope"], capsys)
    assert code != 0 and "family 'nope': known families are" in err
    monkeypatch.setenv("KDAGEN_FAMILY", "nope")
    code, _, err = run_main(["plan", "--op", "kda"], capsys)
    assert code != 0 and "KDAGEN_FAMILY='nope': known families are" in err


@pytest.mark.parametrize("words, family", [
    (["--inference", "--pairs", "4"], "wgmma64"),          # few pairs, no backward: the 64-token chain
    (["--inference", "--pairs", "64"], "wgmma64"),
    (["--inference", "--pairs", "256"], "wgmma64"),        # a per-channel decay at head dim 128: any number
    (["--inference", "--pairs", "64", "--head-dim", "64"], "wgmma64"),
    (["--inference", "--pairs", "65", "--head-dim", "64"], "mma16"),
    (["--inference"], "wgmma64"),                          # pairs unknown: any number ranks it at head dim 128
    (["--inference", "--head-dim", "64"], "mma16"),        # ... at 64 pairs unknown: the usual ranking
    (["--pairs", "4"], "wgmma64"),                         # training on 4 pairs at head dim 128: wgmma64 (cut)
    (["--pairs", "4", "--head-dim", "64"], "mma16"),       # ... at head dim 64: mma16 (fewer than 16 not timed)
    (["--pairs", "16"], "wgmma64"),                        # training on 16 pairs: the chunk-64 backward
    (["--inference", "--pairs", "4", "--arch", "sm_80"], "mma16"),
    (["--inference", "--pairs", "4", "--family", "mma16"], "mma16"),   # a requested family is kept
])
def test_the_call_class_ranks_the_long_chunk_family_first(words, family, capsys, monkeypatch):
    monkeypatch.delenv("KDAGEN_FAMILY", raising=False)
    words = ["--head-dim", "128", *words]                  # the last --head-dim given counts
    code, out, err = run_main(["plan", "--op", "kda", *LB, *words], capsys)
    assert code == 0, err
    assert f"  family {family} (chunk" in out, out[:400]
    planned, _ = parse_config(" ".join(["--op", "kda", *LB, *words])).config().planned()
    assert planned.family == family
    head_dim = int(words[len(words) - 1 - words[::-1].index("--head-dim") + 1])
    limit = few_pairs_limit(head_dim, "vector")
    few = ("--inference" in words and "--family" not in words  # a named family is not ranked
           and (limit is None or "--pairs" in words and int(words[words.index("--pairs") + 1]) <= limit))
    count = "any number of" if limit is None else f"≤ {limit}"
    assert (f"ranked for an inference call with {count} (sequence, head) pairs" in out) == few
    least = training_pairs_limit(head_dim)
    training = "--inference" not in words and "--pairs" in words and int(words[words.index("--pairs") + 1]) >= least
    assert (f"ranked for a training call with ≥ {least} (sequence, head) pairs" in out) == training


@pytest.mark.parametrize("head_dim, pairs, family", [(128, 64, "wgmma64"), (128, 256, "wgmma64"),
                                                     (64, 64, "wgmma64"), (64, 65, "mma16")])
def test_a_per_head_decay_ranks_for_few_pairs(head_dim, pairs, family, capsys, monkeypatch):
    """GDN's per-head decay: with its recurrence on q and k as loaded, wgmma64's kernels lead mma16's at 256 pairs
    too (benchmarks/NOTES.md, session 21), so any number of pairs ranks it first at head dim 128; at 64 they lead at
    64 pairs and trail at 256 (session 22), so the limit there is 64."""
    monkeypatch.delenv("KDAGEN_FAMILY", raising=False)
    code, out, err = run_main(["plan", "--op", "gdn", "--inference", "--pairs", str(pairs),
                               "--head-dim", str(head_dim)], capsys)
    assert code == 0, err
    assert f"  family {family} (chunk" in out, out[:400]
    few = "any number of" if head_dim == 128 else "≤ 64"
    assert (f"ranked for an inference call with {few} (sequence, head) pairs" in out) == (family == "wgmma64")


@pytest.mark.parametrize("pairs, family", [(64, "wgmma64"), (65, "mma16")])
def test_a_per_head_decay_without_raw_q_and_k_keeps_the_limit_of_64(pairs, family, capsys, monkeypatch):
    """A per-head decay whose query is scaled per channel (recurrence_cases.channel_scaled_query: wgmma64's kernels
    keep the decayed tiles, operands "split") did not gain session 21's raw recurrence, so it ranks as before: its
    inference calls run wgmma64 up to 64 pairs only (rank kind "scalar_split")."""
    import recurrence_cases
    from kdagen.dsl import Recurrence
    from kdagen.plan.families import rank_kind
    r = Recurrence("channel_scaled_query")
    recurrence_cases.channel_scaled_query(r)
    assert rank_kind(r) == "scalar_split" and few_pairs_limit(128, "scalar_split") == 64
    monkeypatch.delenv("KDAGEN_FAMILY", raising=False)
    code, out, err = run_main(["plan", "--recurrence", "recurrence_cases:channel_scaled_query", "--inference",
                               "--pairs", str(pairs)], capsys)
    assert code == 0, err
    assert f"  family {family} (chunk" in out, out[:400]


def test_pairs_must_be_positive(capsys):
    code, _, err = run_main(["plan", "--op", "kda", "--inference", "--pairs", "0"], capsys)
    assert code == 2 and "--pairs 0" in err
