"""kdagen.compile on the GPU: three recurrences the package does not ship (tests/recurrence_cases.py), through
the public op, forward and backward against the float64 interpreter, NaN-poisoned outputs and workspaces
(KDAGEN_POISON=1), two runs bitwise equal. The same cases run emulated on the CPU in tests/test_recurrence_op.py.

Run on a GPU machine: python -m pytest -m gpu tests/gpu -x -q
"""
from __future__ import annotations

import pytest
import torch

from kdagen import testing
from recurrence_cases import CASES, check, compiled

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_and_backward_match_the_interpreter_bitwise_deterministic(name, seed, monkeypatch):
    monkeypatch.setenv("KDAGEN_POISON", "1")                   # outputs and workspaces NaN before each launch
    op = compiled(name)
    x, kwargs, do, dht = testing.random_inputs(op, seed=seed, device="cuda", **CASES[name][1])
    got = testing.outputs_and_grads(op, x, kwargs, do, dht)
    check(op, f"{name} (seed {seed})", testing.errors(got, testing.interpreter(op, x, kwargs, do, dht),
                                                      testing.reduction_scales(op, x, kwargs, do, dht)))
    again = testing.outputs_and_grads(op, x, kwargs, do, dht)
    differ = [n for n in got if not torch.equal(got[n], again[n])]
    assert not differ, f"{name} (seed {seed}): two runs differ bitwise in {differ}"
