"""tests/test_emulate_tf32.py's kernel on the GPU (NVRTC, the detected arch): the tf32 fragment layouts and the
rounding of cvt.rna.tf32 as the hardware has them, against the same references the emulator meets."""
from __future__ import annotations

import pytest
import torch

import test_emulate_tf32 as tf32
from kdagen import runtime

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.fixture(scope="module")
def module():
    return runtime.load_module("tf32-primitives", tf32.device_source())


@pytest.mark.parametrize("K, scaled", [(8, False), (32, False), (32, True)])
def test_tf32_mma_and_rounding(module, K, scaled):
    tf32.check(module, "cuda", K, scaled)
