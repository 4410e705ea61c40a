"""The `kdagen` CLI: discovery, --help everywhere, the three entry points, env, cache, compile and KDAGEN_PRECOMPILE."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kdagen import cli, runtime
from kdagen.ops import precompile
from kdagen.ops.arguments import parse_config
from markers import needs_nvrtc
from cli_run import run_main

ROOT = Path(__file__).resolve().parents[1]
TINY = 'extern "C" __global__ void {name}(float* y) {{ y[threadIdx.x] = {value}.f; }}'



def test_subcommands_are_discovered():
    names = cli.command_modules()
    assert {"env", "cache", "compile"} <= set(names)
    parser_help = cli.build_parser().format_help()
    assert all(name in parser_help for name in names)


@pytest.mark.parametrize("name", cli.command_modules())
def test_every_subcommand_has_help_with_an_example(name, capsys):
    code, out, _ = run_main([name, "--help"], capsys)
    assert code == 0
    assert f"kdagen {name}" in out and "example" in out.lower()


def test_no_command_prints_help_and_fails(capsys):
    code, out, _ = run_main([], capsys)
    assert code == 2 and "COMMAND" in out


def test_a_broken_subcommand_module_does_not_break_the_others(monkeypatch, capsys):
    monkeypatch.setattr(cli, "command_modules", lambda: ["env", "no_such_command"])
    code, out, _ = run_main(["--help"], capsys)
    assert code == 0 and "unavailable" in out
    code, _, err = run_main(["no_such_command"], capsys)
    assert code == 1 and "cannot load kdagen.commands.no_such_command" in err


def _help(cmd: list[str]) -> str:
    done = subprocess.run(cmd + ["--help"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_module_checkout_and_console_script_entries_agree():
    via_module = _help([sys.executable, "-m", "kdagen"])
    assert _help([sys.executable, "cli.py"]) == via_module
    script = shutil.which("kdagen")
    if script is not None:
        assert _help([script]) == via_module
    assert "usage: kdagen" in via_module


def test_env_json(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("KDAGEN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KDAGEN_ARCH", "sm_90a")
    code, out, _ = run_main(["env", "--json"], capsys)
    report = json.loads(out)
    assert code == 0
    assert report["torch"] == torch.__version__ and report["arch"] == "sm_90a"
    assert report["cache"]["dir"] == str(tmp_path) and report["settings"]["KDAGEN_ARCH"] == "sm_90a"
    code, out, _ = run_main(["env"], capsys)
    assert code == 0 and "cache" in out and "sm_90a" in out


def test_env_reports_what_is_missing_without_failing(capsys, monkeypatch):
    monkeypatch.delenv("KDAGEN_ARCH", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, out, _ = run_main(["env", "--json"], capsys)
    assert code == 0 and json.loads(out)["arch"].startswith("unavailable (UnsupportedArchError")


def test_cache_list_and_clear(capsys, monkeypatch, tmp_path):
    from kdagen.runtime import cache
    monkeypatch.setenv("KDAGEN_CACHE_DIR", str(tmp_path))
    for uri in ("kda_x", "gdn_y"):
        cache.fetch(cache.Entry("sm_90a", uri, "abc", "cubin").path(tmp_path), lambda: b"\x7fELF....")
    code, out, _ = run_main(["cache", "list", "--json"], capsys)
    assert code == 0 and sorted(e["uri"] for e in json.loads(out)) == ["gdn_y", "kda_x"]
    code, out, _ = run_main(["cache", "clear", "--uri", "kda"], capsys)
    assert code == 0 and "removed 1" in out
    code, out, _ = run_main(["cache", "list"], capsys)
    assert "gdn_y" in out and "kda_x" not in out


@pytest.fixture
def fake_kernels(monkeypatch, tmp_path):
    """A stand-in for kdagen.ops.precompile.sources (what a configuration compiles): two tiny modules per
    configuration, recorded with the arch they were asked for."""
    calls = []

    def sources(config):
        c = config.config()
        calls.append(c)
        tag = f"{c.spec.name.split('_')[0]}{c.K}"
        return [(f"fake_{tag}_a", TINY.format(name="a", value=1)), (f"fake_{tag}_b", TINY.format(name="b", value=2))]

    monkeypatch.setattr(precompile, "sources", sources)
    monkeypatch.setenv("KDAGEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KDAGEN_DISABLE_JIT", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    return calls


@needs_nvrtc
def test_compile_prints_cold_and_cached_times(fake_kernels, capsys, tmp_path):
    argv = ["compile", "--op", "kda", "--head-dim", "128", "--use-gate-in-kernel", "--lower-bound", "-5",
            "--use-qk-l2norm-in-kernel", "--gva", "2", "--varlen", "--arch", "sm_90a", "-j", "2"]
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    assert "cold compile" in out and "cached load" in out
    assert re.search(r"NVRTC loaded in \d+\.\d\ds first .*; \d+\.\d\ds from start to end", out), out
    assert "fake_kda128_a" in out and "fake_kda128_b" in out and "2 module(s), cubin for sm_90a" in out
    assert "compiling for sm_90a" in err and "2/2" in err                      # the progress bar
    [config] = fake_kernels
    assert config.arch == "sm_90a" and config.varlen and config.spec.name == "kda_lb5_l2"
    assert {"A_log", "dt_bias"} <= set(config.spec.recurrence.head_params)
    assert (config.K, config.V, config.G, config.g_dtype) == (128, 128, 2, "bf16")
    assert len(list((tmp_path / "cache" / "sm_90a").glob("fake_kda128_*/*.cubin"))) == 2


def test_compile_without_gpu_or_arch_says_how(fake_kernels, capsys, monkeypatch):
    monkeypatch.delenv("KDAGEN_ARCH", raising=False)
    code, _, err = run_main(["compile", "--op", "gdn", "--head-dim", "64"], capsys)
    assert code == 1 and "KDAGEN_ARCH" in err and "Traceback" not in err


def test_compile_refuses_an_invalid_configuration(fake_kernels, capsys):
    code, _, err = run_main(["compile", "--op", "kda", "--head-dim", "64", "--allow-neg-eigval"], capsys)
    assert code == 2 and "allow_neg_eigval=True requires use_beta_sigmoid_in_kernel" in err


@needs_nvrtc
def test_precompile_at_import_compiles_only_what_is_missing(fake_kernels, monkeypatch, capsys):
    import kdagen.ops
    monkeypatch.setenv("KDAGEN_ARCH", "sm_80")
    monkeypatch.setenv("KDAGEN_PRECOMPILE", "--op kda --head-dim 64; --op gdn --head-dim 128 --use-gate-in-kernel")
    built = []
    real = precompile.compile_modules

    def spy(sources, arch, kind, jobs, progress=None, cold=True):
        timings = real(sources, arch, kind, jobs, progress, cold)
        built.append(sorted(t.uri for t in timings))
        return timings
    monkeypatch.setattr(precompile, "compile_modules", spy)
    kdagen.ops._precompile_from_environment()
    err = capsys.readouterr().err
    assert "KDAGEN_PRECOMPILE for sm_80" in err and "4/4" in err
    assert built == [["fake_gdn128_a", "fake_gdn128_b", "fake_kda64_a", "fake_kda64_b"]]
    assert [(c.spec.name, c.arch) for c in fake_kernels] == [("kda_g", "sm_80"), ("gdn_sp", "sm_80")]

    monkeypatch.setattr(runtime.loader, "compile_source", lambda *a, **k: pytest.fail("recompiled a cached module"))
    kdagen.ops._precompile_from_environment()                                  # all cached now: no compile


def test_compile_takes_forward_and_backward_units_for_the_given_arch(monkeypatch):
    """The real providers: a configuration's modules are the forward's unit and the backward's kernels as a unit each
    (kdagen.ops.config.PER_KERNEL), planned for --arch, then what only a training call cut into segments loads: the
    backward's entries unit (the C pass) and the chain for its D."""
    monkeypatch.setenv("KDAGEN_ARCH", "sm_90a")                              # not what --arch asks for
    config = parse_config("--op gdn --head-dim 64 --use-gate-in-kernel --gva 2 --arch sm_80")
    sources = precompile.sources(config)
    uri = "gdn_sp_k64v64_bf16_gbf16_bbf16_gva2_mma16_sm80"
    kernels = [k.name for k in config.config().planned()[0].direction("backward")]
    assert [u for u, _ in sources] == [f"{uri}_forward", *[f"{uri}_backward_{k}" for k in kernels],
                                       f"{uri}_backward_entries", "segment_chain_d64"]
    forward, *backward, entries, _ = (src for _, src in sources)
    assert " dstate_starts(" in entries and " dstate_pass(" not in entries
    assert f"{uri} (forward)" in forward.splitlines()[0] and " prepare(" in forward
    assert {"states", "recurrence_bwd", "prepare_bwd"} <= set(kernels)
    for k, src in zip(kernels, backward):          # each the unit's headers and its one kernel
        entries = [line for line in src.splitlines() if line.startswith('extern "C" __global__')]
        assert f"{uri} (backward)" in src.splitlines()[0] and len(entries) == 1 and f" {k}(" in entries[0]


@pytest.mark.parametrize("text, message", [
    ("--op kda --head-dim", "expected one argument"),
    ("--op kda --gva two", "invalid int value: 'two'"),
    ("--op kda --head-dim 64 --bogus", "unrecognized arguments: --bogus"),
    ("--op gdn --head-dim 64 --lower-bound -5", r"unexpected keyword argument\(s\) \['lower_bound'\]"),
    ("--op kda --head-dim 64 --lower-bound -5", "lower_bound only acts with"),
])
def test_a_bad_precompile_entry_names_itself(fake_kernels, monkeypatch, text, message):
    monkeypatch.setenv("KDAGEN_ARCH", "sm_90a")
    with pytest.raises(ValueError, match=f"configuration '{text}': .*{message}"):
        precompile.precompile(["--op gdn --head-dim 64", text])
