"""kdagen.compile on the CPU: three recurrences the package does not ship, through the public op with the
generated kernels emulated (kdagen.codegen.emulate), forward and backward against the float64 interpreter."""
from __future__ import annotations

import pytest

from kdagen import testing
from kdagen.codegen import emulate
from recurrence_cases import CASES, check, compiled

pytestmark = pytest.mark.skipif(emulate.unavailable() is not None, reason=f"no emulation: {emulate.unavailable()}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_and_backward_match_the_interpreter(name, seed):
    op = compiled(name, emulate=True)
    check(op, f"{name} (seed {seed})", testing.compare(op, seed=seed, **CASES[name][1]))
