"""tests/test_math_functions.py's probe on the GPU (NVRTC, the detected arch): softplus with the hardware's MUFU
ex2 and rcp, whose approximations the emulator does not have, against the same float64 bound."""
from __future__ import annotations

import pytest
import torch

import test_math_functions as math_functions
from kdagen import runtime

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_softplus_within_a_few_ulp():
    module = runtime.load_module("math-functions", math_functions.device_source())
    math_functions.check(module, "cuda")
