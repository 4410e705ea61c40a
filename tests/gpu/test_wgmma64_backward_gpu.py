"""The wgmma64 backward's kernels on the GPU (docs/kernels.md §4): today `dstate`, the serial dS chain, on the
workspaces the wgmma64 forward's prepare writes — dh, the gradient of the state leaving every chunk (ws_dstate_hi + _lo), and dh0
against the float64 reference at chunk 64 and against the chain recomputed from the workspace itself, NaN-poisoned,
fresh seeds (printed on failure), two runs bitwise equal. Run: python -m pytest -m gpu tests/gpu -x -q"""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kdagen.reference.options import state_out  # noqa: E402
from wgmma64_backward_cases import BOUND, GPU_CASES, ORACLE_BOUND, dstate_errors, rel, run_case  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)


@pytest.mark.skipif(not _sm90(), reason="wgmma64 is sm_90a")
@pytest.mark.parametrize("name", sorted(GPU_CASES))
def test_dstate_matches_float64_and_is_deterministic(name):
    seed = random.randrange(1 << 30)
    first = run_case(GPU_CASES[name], seed, device="cuda")
    second = run_case(GPU_CASES[name], seed, device="cuda")
    chunks = first["chunks"]
    got = first["debug"]["dstate"][:chunks]
    assert not torch.isnan(got).any(), f"{name} (seed {seed}): NaN left in dh (ws_dstate_hi + _lo)"
    reference, exact = dstate_errors(first)
    dh0 = rel(first["grad_h0"], state_out(first["ref"]["dh0"], first["opt"]))
    print(f"{name}: dh per chunk against float64 max {max(reference):.2e}, against its own steps max "
          f"{max(exact):.2e}; dh0 {dh0:.2e}")
    assert max(reference) <= BOUND, f"{name} (seed {seed}): dh against float64 {max(reference):.2e}"
    assert max(exact) <= ORACLE_BOUND, f"{name} (seed {seed}): dh against its own steps {max(exact):.2e}"
    assert dh0 <= BOUND, f"{name} (seed {seed}): dh0 {dh0:.2e}"
    assert torch.equal(got, second["debug"]["dstate"][:chunks]), f"{name}: two runs differ (dh)"
    assert torch.equal(first["grad_h0"], second["grad_h0"]), f"{name}: two runs differ (dh0)"
