"""Every error path of the CLI, in one table: its exit code (2 for a usage error, 1 for a failure; see
kdagen.commands) and its one-line message, with no traceback. No GPU needed."""
from __future__ import annotations

import shutil

import pytest
import torch

from kdagen.codegen import nvcc
from cli_run import run_main

POSITIVE = "tests/test_recurrence_op_errors.py:positive_decay"


CASES = [
    # (id, argv, environment, exit code, message)
    ("no-command", [], {}, 2, ""),
    ("unknown-command", ["frobnicate"], {}, 2, "invalid choice: 'frobnicate'"),
    ("unknown-flag", ["plan", "--no-such-flag"], {}, 2, "unrecognized arguments: --no-such-flag"),
    ("bad-arch", ["plan", "--arch", "sm_70"], {}, 2, "sm_70"),
    ("bad-family", ["plan", "--family", "wgmma32"], {}, 2, "family 'wgmma32': known families are"),
    ("bad-family-env", ["plan"], {"KDAGEN_FAMILY": "wgmma32"}, 2, "KDAGEN_FAMILY='wgmma32': known families are"),
    ("family-cannot-plan", ["plan", "--family", "wgmma64", "--arch", "sm_80"], {}, 1, "arch sm_80 (it emits sm_90a)"),
    ("bad-options", ["plan", "--allow-neg-eigval"], {}, 2, "allow_neg_eigval=True requires"),
    ("gdn-lower-bound", ["plan", "--op", "gdn", "--lower-bound", "-5", "--use-gate-in-kernel"], {}, 2,
     "lower_bound"),
    ("bad-env-flag", ["compile", "--op", "gdn", "--arch", "sm_80"], {"KDAGEN_DISABLE_JIT": "maybe"}, 1,
     "KDAGEN_DISABLE_JIT='maybe': expected 0 or 1"),
    ("plan-unknown-kernel", ["plan", "--kernel", "nope"], {}, 2, "unknown kernel(s) ['nope']"),
    ("plan-json-and-kernel", ["plan", "--json", "--kernel", "prepare"], {}, 2, "--kernel selects tables"),
    ("recurrence-ref", ["plan", "--recurrence", "nowhere"], {}, 2, "write FILE.py:FUNCTION"),
    ("recurrence-with-fla-flag", ["plan", "--recurrence", POSITIVE, "--safe-gate"], {}, 2, "--safe-gate: FLA's"),
    ("recurrence-unplannable", ["plan", "--recurrence", POSITIVE], {}, 1, "admits positive values"),
    ("emit-defaults-with-flags", ["emit", "--defaults", "--varlen", "-o", "x"], {}, 2, "drop varlen"),
    ("inspect-unknown-kernel", ["inspect", "--kernel", "nosuch"], {}, 2, "unknown kernel 'nosuch'; plan kda_"),
    ("compile-no-gpu-no-arch", ["compile", "--op", "gdn"], {"KDAGEN_ARCH": None}, 1, "KDAGEN_ARCH"),
    ("compile-negative-jobs", ["compile", "--op", "gdn", "-j", "-3"], {"KDAGEN_ARCH": None}, 2,
     "argument -j/--jobs: expected a whole number >= 1, got '-3'"),
    ("compile-no-jobs", ["compile", "--op", "gdn", "-j", "0"], {"KDAGEN_ARCH": None}, 2, "got '0'"),
    ("init-bad-name", ["init-recurrence", "my-gate"], {}, 2, "must be a Python identifier"),
    ("bench-bad-libs", ["bench", "--libs", "triton"], {}, 2, "--libs"),
    ("bench-no-gpu", ["bench", "--libs", "kdagen"], {}, 1, "no CUDA GPU is visible"),
    ("cache-no-action", ["cache"], {}, 2, "required: ACTION"),
]


@pytest.mark.parametrize("argv, env, code, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_error_paths(argv, env, code, message, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("KDAGEN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KDAGEN_DEBUG", raising=False)
    for name, value in env.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    got, _, err = run_main(argv, capsys)
    assert got == code, f"exit code {got}, expected {code}: {err}"
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= (2 if got == 1 or "(set KDAGEN_DEBUG" in err else 30)


def test_inspect_without_nvcc_is_a_failure(capsys, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(nvcc, "_nvcc", lambda: (_ for _ in ()).throw(nvcc.NvccUnavailable("nvcc not found")),
                        raising=False)
    code, _, err = run_main(["inspect", "--resources"], capsys)
    assert code == 1 and "nvcc" in err
