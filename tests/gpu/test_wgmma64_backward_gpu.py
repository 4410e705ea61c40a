"""The wgmma64 backward's kernels on the GPU (docs/kernels.md §4), on the workspaces the wgmma64 forward writes when
it keeps them: `dstate` — dh, the gradient of the state leaving every chunk (ws_dstate_hi + _lo), and dh0 against the
float64 reference at chunk 64 and each step against its own float64 recomputation — and `chunk_bwd` — every output
against its float64 recomputation from the kernel's own inputs (dv also against the reference). NaN-poisoned, fresh
seeds (printed on failure), two runs bitwise equal. Run: python -m pytest -m gpu tests/gpu -x -q"""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wgmma64_backward_cases import (GPU_CASES, chunk_checks, dstate_checks, grads_checks,  # noqa: E402
                                    outputs, run_case, states_checks)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability() < (9, 0),
                                 reason="wgmma64 is sm_90a")]


@pytest.fixture(scope="module", params=sorted(GPU_CASES))
def runs(request):
    seed = random.randrange(1 << 30)
    return request.param, seed, run_case(GPU_CASES[request.param], seed, device="cuda"), \
        run_case(GPU_CASES[request.param], seed, device="cuda")


@pytest.mark.parametrize("checks", [states_checks, dstate_checks, chunk_checks, grads_checks],
                         ids=["states", "dstate", "chunk_bwd", "grads"])
def test_against_float64(runs, checks):
    name, seed, first, _ = runs
    figures, fails = checks(first)
    print(f"{name}: {figures}")
    assert not fails, f"{name} (seed {seed}): {fails} ({figures})"


def test_two_runs_bitwise_equal(runs):
    name, seed, first, second = runs
    differ = [n for n, t in outputs(first).items() if not torch.equal(t, outputs(second)[n])]
    assert not differ, f"{name} (seed {seed}): two runs differ in {differ}"
