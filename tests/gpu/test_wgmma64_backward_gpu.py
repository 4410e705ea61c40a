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

from kdagen.reference.options import state_out  # noqa: E402
from wgmma64_backward_cases import (BOUND, CHUNK_BOUND, CHUNK_OUTPUTS, GPU_CASES, ORACLE_BOUND, chunk_errors,  # noqa: E402
                                    dstate_errors, rel, run_case)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability() < (9, 0),
                                 reason="wgmma64 is sm_90a")]


@pytest.fixture(scope="module", params=sorted(GPU_CASES))
def runs(request):
    seed = random.randrange(1 << 30)
    return request.param, seed, run_case(GPU_CASES[request.param], seed, device="cuda"), \
        run_case(GPU_CASES[request.param], seed, device="cuda")


def test_dstate_matches_float64_and_is_deterministic(runs):
    name, seed, first, second = runs
    got = first["debug"]["dstate"][:first["chunks"]]
    assert not torch.isnan(got).any(), f"{name} (seed {seed}): NaN left in dh (ws_dstate_hi + _lo)"
    reference, exact = dstate_errors(first)
    dh0 = rel(first["grad_h0"], state_out(first["ref"]["dh0"], first["opt"]))
    print(f"{name}: dh per chunk against float64 max {max(reference):.2e}, against its own steps "
          f"{exact[0]:.2e} (90th percentile) / {exact[1]:.2e}; dh0 {dh0:.2e}")
    assert max(reference) <= BOUND, f"{name} (seed {seed}): dh against float64 {max(reference):.2e}"
    assert exact[0] <= ORACLE_BOUND[0] and exact[1] <= ORACLE_BOUND[1], \
        f"{name} (seed {seed}): dh against its own steps (90th percentile, max) {exact}"
    assert dh0 <= BOUND, f"{name} (seed {seed}): dh0 {dh0:.2e}"
    assert torch.equal(got, second["debug"]["dstate"][:first["chunks"]]), f"{name}: two runs differ (dh)"
    assert torch.equal(first["grad_h0"], second["grad_h0"]), f"{name}: two runs differ (dh0)"


def test_the_forward_keeps_the_states_entering_every_chunk(runs):
    name, seed, first, second = runs
    got = first["debug"]["ws_states"][:first["chunks"]]
    assert not torch.isnan(got).any(), f"{name} (seed {seed}): NaN left in ws_states"
    errors = [rel(g, w) for g, w in zip(got, first["ref"]["states"])]
    print(f"{name}: S_c per chunk against float64 max {max(errors):.2e}")
    assert max(errors) <= BOUND, f"{name} (seed {seed}): S_c against float64 {max(errors):.2e}"
    assert torch.equal(got, second["debug"]["ws_states"][:first["chunks"]]), f"{name}: two runs differ (S_c)"


def test_chunk_bwd_matches_float64_and_is_deterministic(runs):
    name, seed, first, second = runs
    for n in CHUNK_OUTPUTS:
        assert not torch.isnan(first["debug"][n][:first["chunks"]]).any(), f"{name} (seed {seed}): NaN left in {n}"
    errors = chunk_errors(first)
    dv = rel(first["dv"], first["ref"]["dv"])
    print(f"{name}: per row (90th percentile / max) " + ", ".join(f"{n} {a:.1e} / {b:.1e}" for n, (a, b) in
                                                                  errors.items()) + f"; dv against float64 {dv:.2e}")
    bad = {n: f"{a:.1e} / {b:.1e}" for n, (a, b) in errors.items() if not (a <= CHUNK_BOUND[0] and b <= CHUNK_BOUND[1])}
    assert not bad, f"{name} (seed {seed}): chunk_bwd against its float64 recomputation {bad}"
    assert dv <= 0.008, f"{name} (seed {seed}): dv against float64 {dv:.2e}"
    for n in CHUNK_OUTPUTS:
        assert torch.equal(first["debug"][n][:first["chunks"]], second["debug"][n][:first["chunks"]]), \
            f"{name}: two runs differ ({n})"
    assert torch.equal(first["dv"], second["dv"]), f"{name}: two runs differ (dv)"
