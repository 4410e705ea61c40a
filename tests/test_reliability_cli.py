"""The CLI and `import kdagen` when the file system, the environment or an input file is not what they expect:
one line and an exit code (2 usage, 1 failure), or a warning and carry on — never a traceback or a hang.
No GPU needed; the tests that compile use small sources."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kdagen.ops
from kdagen.ops import precompile
from kdagen.runtime import loader
from cli_run import run_main
from markers import needs_nvrtc

ROOT = Path(__file__).resolve().parents[1]
GDN = ["--op", "gdn", "--head-dim", "64", "--inference", "--arch", "sm_80"]
TINY = 'extern "C" __global__ void tiny(float* y) { y[threadIdx.x] = 1.f; }'


@pytest.fixture(autouse=True)
def cli_environment(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("KDAGEN_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("KDAGEN_DEBUG", "KDAGEN_DISABLE_JIT", "KDAGEN_PRECOMPILE", "KDAGEN_ARCH"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def tiny_kernels(monkeypatch):
    """A configuration's modules replaced by one tiny source, so `compile` takes a fraction of a second."""
    monkeypatch.setattr(precompile, "sources", lambda config: [("tiny_module", TINY)])


def one_line_failure(code: int, err: str, message: str, expected: int = 1) -> None:
    assert code == expected, f"exit code {code}: {err}"
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2, err


def test_emit_into_a_file_is_a_failure(tmp_path, capsys):
    (tmp_path / "out").write_text("not a folder")
    code, _, err = run_main(["emit", *GDN, "-o", str(tmp_path / "out")], capsys)
    one_line_failure(code, err, "Not a directory")


def test_emit_under_a_read_only_folder_is_a_failure(tmp_path, capsys, read_only):
    (tmp_path / "ro").mkdir()
    read_only(tmp_path / "ro")
    code, _, err = run_main(["emit", *GDN, "-o", str(tmp_path / "ro" / "out")], capsys)
    one_line_failure(code, err, "Read-only file system")


@pytest.mark.parametrize("argv", [["compile", *GDN], ["cache", "list"], ["cache", "list", "--json"],
                                  ["cache", "clear"]], ids=" ".join)
def test_a_cache_folder_that_is_a_file_is_a_failure(argv, tmp_path, monkeypatch, capsys):
    (tmp_path / "cache").write_text("not a folder")
    monkeypatch.setattr(loader, "compile_source", lambda *a, **k: pytest.fail("compiled for a cache it cannot fill"))
    code, out, err = run_main(argv, capsys)
    one_line_failure(code, err, f"the kernel cache is not a folder: '{tmp_path / 'cache'}'")
    assert out == ""


def test_env_says_the_cache_folder_is_a_file(tmp_path, capsys):
    (tmp_path / "cache").write_text("not a folder")
    code, out, _ = run_main(["env", "--json"], capsys)
    assert code == 0 and json.loads(out)["cache"].startswith("unavailable (NotADirectoryError")


def test_a_read_only_cache_lists_but_does_not_clear_or_compile(tmp_path, monkeypatch, capsys, read_only):
    from kdagen.runtime import cache
    root = tmp_path / "cache"
    cache.fetch(cache.Entry("sm_80", "gdn_x", "0123", "cubin").path(root), lambda: b"\x7fELF....")
    read_only(root)
    monkeypatch.setattr(loader, "compile_source", lambda *a, **k: pytest.fail("compiled for a cache it cannot fill"))
    code, out, _ = run_main(["cache", "list"], capsys)
    assert code == 0 and "(1 images" in out and "gdn_x" in out
    for argv, message in [(["cache", "clear"], "Read-only file system"),
                          (["compile", *GDN], "cannot fill the kernel cache: [Errno 30] Read-only file system")]:
        code, _, err = run_main(argv, capsys)
        one_line_failure(code, err, message)
    assert [e.uri for e in cache.entries(root)] == ["gdn_x"]


@needs_nvrtc
def test_compile_with_a_folder_at_an_entry_path_is_a_failure(tiny_kernels, tmp_path, capsys, warned_afresh):
    code, _, err = run_main(["compile", *GDN], capsys)
    assert code == 0, err
    [entry] = (tmp_path / "cache").glob("sm_80/tiny_module/*.cubin")
    entry.unlink()
    entry.mkdir()
    code, _, err = run_main(["cache", "list"], capsys)
    one_line_failure(code, err, "Is a directory")
    with pytest.warns(RuntimeWarning, match="Is a directory"):                # the cache's warning says why
        code, _, err = run_main(["compile", *GDN], capsys)
    assert code == 1 and "Traceback" not in err                              # under the progress bar: one line
    assert f"error: tiny_module: compiled, but {entry} could not be stored in the cache" in err


def test_an_invalid_debug_setting_does_not_hide_the_error(monkeypatch, capsys):
    monkeypatch.setenv("KDAGEN_DEBUG", "maybe")
    code, _, err = run_main(["plan", "--arch", "sm_70"], capsys)
    one_line_failure(code, err, "sm_70", expected=2)
    assert "KDAGEN_DEBUG='maybe': expected 0 or 1" in err


@pytest.mark.parametrize("text, message", [("{}", "it lacks env (an object)"),
                                           ("[1, 2]", "the JSON is not an object"),
                                           ('{"env": {}, "cases": {}}', "cases (an array)")])
@pytest.mark.parametrize("action", ["--compare", "--render"])
def test_bench_reads_only_saved_runs(action, text, message, tmp_path, capsys):
    run = tmp_path / "run.json"
    run.write_text(text)
    code, out, err = run_main(["bench", action, str(run), *([str(run)] if action == "--compare" else [])], capsys)
    one_line_failure(code, err, f"cannot read {run}: not a kdagen bench run: ", expected=2)
    assert message in err and out == ""


@pytest.mark.parametrize("action", ["--compare", "--render"])
def test_bench_names_a_field_a_saved_run_lacks(action, tmp_path, capsys):
    run = tmp_path / "run.json"
    run.write_text('{"env": {}, "settings": {}, "timer": "events", "ceilings": [], "accuracy": [], "cases": [{}]}')
    code, out, err = run_main(["bench", action, str(run), *([str(run)] if action == "--compare" else [])], capsys)
    one_line_failure(code, err, f"{run}", expected=2)
    assert "not a kdagen bench run (no field" in err and out == ""


@pytest.mark.parametrize("flag", ["--no-A-log", "--no-dt-bias"])
def test_gate_flags_without_the_gate_are_a_usage_error(flag, capsys):
    code, _, err = run_main(["plan", "--op", "kda", flag], capsys)
    assert code == 2 and flag in err


@needs_nvrtc
def test_an_unwritable_cache_at_import_is_a_warning(tiny_kernels, tmp_path, monkeypatch, warned_afresh):
    (tmp_path / "cache").write_text("not a folder")
    monkeypatch.setenv("KDAGEN_ARCH", "sm_80")
    monkeypatch.setenv("KDAGEN_PRECOMPILE", "--op gdn --head-dim 64")
    with pytest.warns(RuntimeWarning) as warned:
        kdagen.ops._precompile_from_environment()
    cannot_write, not_compiled = (str(w.message) for w in warned)
    assert cannot_write.startswith(f"kdagen cannot write its kernel cache {tmp_path / 'cache'} ")
    assert not_compiled.startswith("KDAGEN_PRECOMPILE not compiled: RuntimeError: tiny_module: compiled, but")


def run_fresh(argv: list[str], tmp_path: Path, **env) -> subprocess.CompletedProcess:
    """`python ARGV` in a new process (what `import kdagen` does there), without the test's monkeypatching."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KDAGEN_")}
    environment.update(KDAGEN_CACHE_DIR=str(tmp_path / "cache"), **env)
    return subprocess.run([sys.executable, *argv], cwd=ROOT, env=environment, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("argv", [["-m", "kdagen", "--version"], ["-m", "kdagen", "env"]], ids=" ".join)
def test_a_bad_precompile_setting_is_a_warning(argv, tmp_path):
    done = run_fresh(argv, tmp_path, KDAGEN_PRECOMPILE="--op nosuch")
    assert done.returncode == 0 and "Traceback" not in done.stderr
    assert "KDAGEN_PRECOMPILE not compiled: ValueError: configuration '--op nosuch'" in done.stderr


@needs_nvrtc
def test_precompile_at_import_compiles_in_a_fresh_process(tmp_path):
    """The configuration's modules compile in threads while `import kdagen` is still running."""
    done = run_fresh(["-m", "kdagen", "--version"], tmp_path, KDAGEN_ARCH="sm_80",
                     KDAGEN_PRECOMPILE="--op gdn --head-dim 64 --inference")
    assert done.returncode == 0 and done.stdout.startswith("kdagen ") and "not compiled" not in done.stderr
    assert len(list((tmp_path / "cache" / "sm_80").glob("gdn_*_forward/*.cubin"))) == 1
