"""`kdagen emit`, `kdagen plan` and `kdagen inspect`, as a user runs them (no GPU)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from kdagen.cli import main
from kdagen.plan import Plan


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", ["emit", "plan", "inspect"])
def test_help_has_an_example(command, capsys):
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "example" in out and f"kdagen {command} --op" in out


def test_emit_without_a_gpu(tmp_path, capsys):
    code, out, err = run(["emit", "--op", "kda", "--head-dim", "128", "--arch", "sm_90a", "-o", str(tmp_path)], capsys)
    assert code == 0, err
    uri = "kda_lb5_l2_bsig_k128v128_c16_bf16_gbf16_bbf16_gva1_sm90a"
    files = sorted(p.name for p in (tmp_path / uri).iterdir())
    assert "forward.cu" in files and "plan.json" in files
    assert Plan.from_json((tmp_path / uri / "plan.json").read_text()).uri == uri
    assert "// kdagen" in (tmp_path / uri / "forward.cu").read_text()
    code, out, _ = run(["emit", "--op", "kda", "-o", str(tmp_path)], capsys)
    assert "0 file(s) written" in out                     # unchanged: nothing rewritten


def test_emit_options_change_the_configuration(tmp_path, capsys):
    code, out, err = run(["emit", "--op", "kda", "--fla-defaults", "--gate-in-kernel", "--head-dim", "64", "--gva", "2",
                          "--varlen", "--arch", "sm_80", "-o", str(tmp_path)], capsys)
    assert code == 0, err
    (d,) = list(tmp_path.iterdir())
    assert d.name == "kda_sp_k64v64_c16_bf16_gbf16_bbf16_gva2_varlen_sm80"
    assert json.loads((d / "plan.json").read_text())["exponent_form"] == "relative"


def test_plan_prints_roles_and_barriers(capsys):
    code, out, err = run(["plan", "--op", "kda"], capsys)
    assert code == 0, err
    for needle in ("kernel k1_prepare", "kernel k2_recurrence", "roles", "mma   0..3", "load  4..4", "barriers",
                   "ready    mbarrier  2       32", "free     mbarrier  2       128", "pipelines", "chunk_ring",
                   "shared memory", "steps (program order)", "workspaces", "exponent form 'factored'"):
        assert needle in out, needle
    code, out, _ = run(["plan", "--op", "gdn", "--kernel", "k2_bwd"], capsys)
    assert "kernel k2_bwd" in out and "kernel k1_prepare" not in out and "dhT_hi" in out
    code, _, err = run(["plan", "--kernel", "nope"], capsys)
    assert code == 2 and "unknown kernel" in err


def test_plan_json_and_dot(capsys):
    code, out, _ = run(["plan", "--op", "gdn", "--json"], capsys)
    assert code == 0 and Plan.from_json(out).decay_kind == "scalar"
    code, out, _ = run(["plan", "--op", "gdn", "--dot"], capsys)
    assert code == 0 and out.startswith("digraph") and '"k1_prepare" -> "k2_recurrence"' in out


def test_inspect_source(capsys):
    code, out, _ = run(["inspect", "--op", "gdn", "--head-dim", "64"], capsys)
    assert code == 0 and "k1_prepare(" in out and "k2_recurrence(" in out


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_inspect_resources(capsys):
    code, out, err = run(["inspect", "--op", "kda", "--head-dim", "64", "--resources", "--arch", "sm_80"], capsys)
    assert code == 0, err
    lines = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert set(lines) == {"k1_prepare", "k2_recurrence"}
    assert all(cols[4] == "0" and cols[6] == cols[7] for cols in lines.values())   # no spills; smem as planned


def test_module_entry_point():
    res = subprocess.run([sys.executable, "-m", "kdagen", "plan", "--op", "kda", "--json"], capture_output=True,
                         text=True)
    assert res.returncode == 0, res.stderr
    assert Plan.from_json(res.stdout).exponent_form == "factored"


@pytest.mark.parametrize("argv, message", [
    (["emit", "--defaults", "--op", "gdn", "-o", "unused"], "drop op"),
    (["plan", "--json", "--kernel", "k1_prepare"], "--kernel selects tables"),
    (["plan", "--kernel", "no_such_kernel"], "unknown kernel"),
])
def test_options_that_would_be_ignored_are_refused(argv, message, capsys):
    code, _, err = run(argv, capsys)
    assert code == 2 and message in err


def test_lower_bound_and_no_lower_bound_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as e:
        main(["plan", "--lower-bound", "-3", "--no-lower-bound"])
    assert e.value.code == 2 and "not allowed with" in capsys.readouterr().err
