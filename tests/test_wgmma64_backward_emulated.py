"""The wgmma64 backward's kernels built so far, rendered exactly as for an H200, run on the CPU through
kdagen.codegen.emulate against float64 at chunk 64 (docs/kernels.md §4), on what the wgmma64 forward writes when it
keeps its workspaces: S_c (and the forward otherwise unchanged), `dstate` (dh leaving every chunk, dh0) and
`chunk_bwd` (its outputs and dv). Outputs and workspaces are poisoned with NaN first;
tests/gpu/test_wgmma64_backward_gpu.py repeats it on the device. The checks: tests/wgmma64_backward_cases.py."""
from __future__ import annotations

import pytest

from kdagen.codegen import emulate
from wgmma64_backward_cases import CASES, chunk_checks, dstate_checks, grads_checks, run_case, states_checks

pytestmark = pytest.mark.skipif(emulate.unavailable() is not None, reason=f"no emulation: {emulate.unavailable()}")


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    return request.param, run_case(CASES[request.param], seed=13)


@pytest.mark.parametrize("checks", [states_checks, dstate_checks, chunk_checks, grads_checks],
                         ids=["states", "dstate", "chunk_bwd", "grads"])
def test_against_float64(case, checks):
    name, result = case
    figures, fails = checks(result)
    assert not fails, f"{name}: {fails} ({figures})"
