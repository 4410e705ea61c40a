"""The wgmma64 backward's kernels, rendered exactly as for an H200, run on the CPU through kdagen.codegen.emulate
against float64 at chunk 64 (docs/kernels.md §4). Today: `dstate`, the serial dS chain — the gradient of the state
leaving every chunk (ws_dstate_hi + _lo) and dh0 — on the workspaces the wgmma64 forward's prepare writes. Outputs and
workspaces are poisoned with NaN first; tests/gpu/test_wgmma64_backward_gpu.py repeats it on the device."""
from __future__ import annotations

import pytest
import torch

from kdagen.codegen import emulate
from kdagen.reference.options import state_out
from wgmma64_backward_cases import (BOUND, CASES, CHUNK_BOUND, CHUNK_OUTPUTS, ORACLE_BOUND, chunk_errors, dstate_errors,
                                     rel, run_case)

pytestmark = pytest.mark.skipif(emulate.unavailable() is not None, reason=f"no emulation: {emulate.unavailable()}")


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    return request.param, run_case(CASES[request.param], seed=13)


def test_dstate_leaving_every_chunk(case):
    name, result = case
    assert not torch.isnan(result["debug"]["dstate"][:result["chunks"]]).any(), \
        f"{name}: NaN left in dh (ws_dstate_hi + _lo) (a chunk not written)"
    reference, exact = dstate_errors(result)
    assert max(reference) <= BOUND, f"{name}: dh per chunk against float64 {reference}"
    assert exact[0] <= ORACLE_BOUND[0] and exact[1] <= ORACLE_BOUND[1], \
        f"{name}: dh per chunk against its own steps recomputed (90th percentile, max) {exact}"


def test_dh0(case):
    name, result = case
    dh0 = result["grad_h0"]
    assert not torch.isnan(dh0).any(), f"{name}: NaN left in dh0"
    err = rel(dh0, state_out(result["ref"]["dh0"], result["opt"]))
    assert err <= BOUND, f"{name}: dh0 {err:.2e}"


def test_chunk_bwd_outputs(case):
    name, result = case
    for n in CHUNK_OUTPUTS:
        assert not torch.isnan(result["debug"][n][:result["chunks"]]).any(), f"{name}: NaN left in {n}"
    errors = chunk_errors(result)
    bad = {n: f"{p90:.1e} / {top:.1e}" for n, (p90, top) in errors.items()
           if not (p90 <= CHUNK_BOUND[0] and top <= CHUNK_BOUND[1])}
    assert not bad, f"{name}: chunk_bwd against its float64 recomputation, per row (90th percentile / max): {bad}"


def test_the_forward_keeps_the_states_entering_every_chunk(case):
    name, result = case
    got = result["debug"]["ws_states"][:result["chunks"]]
    assert not torch.isnan(got).any(), f"{name}: NaN left in ws_states (a chunk not written)"
    errors = [rel(g, w) for g, w in zip(got, result["ref"]["states"])]
    assert max(errors) <= BOUND, f"{name}: S_c per chunk against float64 {errors}"
