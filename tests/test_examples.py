"""examples/: a user's recurrence as `kdagen init-recurrence` starts it. The example is exactly what the command
writes; its own test passes (emulated on the CPU); `kdagen plan`, `emit`, `inspect` take it with --recurrence,
and bad --recurrence references say what is wrong. No GPU needed."""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

from kdagen.codegen import emulate
from kdagen.commands import init_recurrence
from cli_run import run_main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
REF = f"{EXAMPLES / 'sigmoid_gate.py'}:sigmoid_gate"


def test_the_example_is_what_init_recurrence_writes(tmp_path, capsys):
    code, out, _ = run_main(["init-recurrence", "sigmoid_gate", "-o", str(tmp_path)], capsys)
    assert code == 0 and "wrote" in out
    for name in init_recurrence.files("sigmoid_gate"):
        assert (tmp_path / name).read_text() == (EXAMPLES / name).read_text(), f"examples/{name} is stale"
    code, _, err = run_main(["init-recurrence", "sigmoid_gate", "-o", str(tmp_path)], capsys)
    assert code == 1 and "--force overwrites" in err
    code, _, err = run_main(["init-recurrence", "my-gate", "-o", str(tmp_path)], capsys)
    assert code == 2 and "must be a Python identifier" in err


@pytest.mark.skipif(emulate.unavailable() is not None, reason=f"no emulation: {emulate.unavailable()}")
def test_the_examples_own_test_passes(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    module = importlib.import_module("test_sigmoid_gate")
    try:
        module.test_sigmoid_gate_matches_the_interpreter()
    finally:
        sys.modules.pop("test_sigmoid_gate", None)
        sys.modules.pop("sigmoid_gate", None)


def test_plan_takes_a_recurrence(capsys):
    code, out, err = run_main(["plan", "--recurrence", REF, "--head-dim", "64", "--gva", "2", "--varlen",
                               "--option", "lower_bound=-3.5"], capsys)
    assert code == 0, err
    assert "plan sigmoid_gate_k64v64_bf16_gbf16_bbf16_gva2_varlen_mma16_sm90a" in out
    assert "decay vector in [-3.5, 0.0]" in out and "kernel prepare_bwd" in out
    code, out, _ = run_main(["plan", "--recurrence", REF, "--json"], capsys)
    assert code == 0 and json.loads(out)["problem"]["name"] == "sigmoid_gate"


def test_emit_and_inspect_take_a_recurrence(tmp_path, capsys):
    code, out, err = run_main(["emit", "--recurrence", REF, "--head-dim", "64", "-o", str(tmp_path)], capsys)
    assert code == 0, err
    [unit] = tmp_path.iterdir()
    assert unit.name.startswith("sigmoid_gate_k64v64") and {p.name for p in unit.iterdir()} == \
        {"forward.cu", "backward.cu", "backward_entries.cu", "plan.json"}
    assert "in_w" in (unit / "forward.cu").read_text()             # the head parameter, scoped
    code, out, err = run_main(["inspect", "--recurrence", REF, "--head-dim", "64", "--kernel", "prepare"], capsys)
    assert code == 0 and "prepare(" in out, err


@pytest.mark.parametrize("argv, message", [
    (["--recurrence", "examples/sigmoid_gate.py"], "write FILE.py:FUNCTION or MODULE:FUNCTION"),
    (["--recurrence", "no/such/file.py:f"], "no file no/such/file.py"),
    (["--recurrence", f"{EXAMPLES / 'sigmoid_gate.py'}:nothing"], "has no 'nothing'"),
    (["--recurrence", "no_such_module_xyz:f"], "cannot import module 'no_such_module_xyz'"),
    (["--recurrence", "kdagen.recurrences.kda:DEFAULT"], "has no 'DEFAULT'"),
    (["--recurrence", REF, "--option", "upper=1"], r"does not take these options"),
    (["--recurrence", REF, "--option", "lower_bound"], "write name=value"),
    (["--recurrence", REF, "--use-gate-in-kernel"], "--use-gate-in-kernel: FLA's options describe chunk_kda"),
    (["--option", "lower_bound=-3"], "--option passes options to a --recurrence"),
])
def test_bad_recurrence_references_say_what_is_wrong(argv, message, capsys):
    code, _, err = run_main(["plan", *argv], capsys)
    assert code == 2 and message in err and "Traceback" not in err
