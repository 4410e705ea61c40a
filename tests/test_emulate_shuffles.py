"""The warp shuffles the kernels use (__shfl_xor_sync, __shfl_up_sync, __shfl_sync: shfl.sync .bfly, .up, .idx over a
full warp) in the CPU emulator, against what the PTX ISA defines: lane l reads lane l ^ m, l − δ (its own value for
l < δ) and s. prepare_bwd's per-head scan uses the last two; the GPU tests of the backward
(tests/gpu/test_wgmma64_backward_gpu.py) check the same reading on hardware.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from kdagen.codegen import emulate

KERNEL = r"""
extern "C" __global__ void __launch_bounds__(32) shuffle_probe(const float* x, int m, int delta, int src, float* out) {
  const int lane = threadIdx.x;
  const float v = x[lane];
  out[lane] = __shfl_xor_sync(0xffffffffu, v, m);
  out[32 + lane] = __shfl_up_sync(0xffffffffu, v, delta);
  out[64 + lane] = __shfl_sync(0xffffffffu, v, src);
  float incl = v;                                   // an inclusive scan by shfl.up, as prepare_bwd's per-head Γ
  for (int off = 1; off < 32; off *= 2) {
    const float up = __shfl_up_sync(0xffffffffu, incl, off);
    if (lane >= off) incl += up;
  }
  out[96 + lane] = incl;
}
"""
SIGNATURES = [("shuffle_probe", ["const float*", "int", "int", "int", "float*"])]


@pytest.fixture(scope="module")
def emulated():
    if emulate.unavailable():
        pytest.skip(f"no emulation: {emulate.unavailable()}")
    return emulate.build_source(KERNEL, SIGNATURES, ("common",))


@pytest.mark.parametrize("m, delta, src", [(1, 1, 0), (16, 5, 31), (7, 16, 13), (31, 31, 3)])
def test_shuffles_read_the_lanes_the_ptx_isa_names(emulated, m, delta, src):
    x = torch.arange(32, dtype=torch.float32) * 3 + 1
    out = torch.full((128,), float("nan"))
    emulated.launch("shuffle_probe", (1,), (32,), [x, m, delta, src, out])
    lanes, v = np.arange(32), x.numpy()
    np.testing.assert_array_equal(out[:32].numpy(), v[lanes ^ m])
    np.testing.assert_array_equal(out[32:64].numpy(), np.where(lanes >= delta, v[lanes - delta], v))
    np.testing.assert_array_equal(out[64:96].numpy(), np.full(32, v[src]))
    np.testing.assert_array_equal(out[96:].numpy(), np.cumsum(v))
