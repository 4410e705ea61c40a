"""The scalar functions of templates/common/math.cuh that the emitted prologues call, evaluated by a probe kernel on
the CPU emulator and (tests/gpu/test_math_functions_gpu.py) on the GPU, against float64: softplus on its special-
function-unit form must stay within a few ulp of log(1 + e^x) over the whole range a gate meets."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from kdagen import runtime
from kdagen.codegen import emulate
from kdagen.codegen.render import probe_unit

GROUPS = ("common",)
THRESHOLD = 20.0

KERNEL = r"""
extern "C" __global__ void __launch_bounds__(256) softplus_probe(const float* x, int n, float threshold, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = kdg::softplus(x[i], threshold);
}
"""
SIGNATURES = [("softplus_probe", ["const float*", "int", "float", "float*"])]

# relative error allowed, in units of fp32's epsilon (2^-23): the MUFU ex2 and rcp (≈ 2 ulp each), the first-order
# correction for x·log2(e)'s low part and the series' sums (the emulator, with exact ex2 and rcp: 2.1 ulp at worst)
ULPS = 8
# what softplus must give where the float64 formula cannot say: ±inf, NaN, the largest finite magnitudes
BIG = float(np.float32(3e38))
SPECIAL = {float("-inf"): 0.0, float("inf"): float("inf"), -BIG: 0.0, BIG: BIG}


def device_source() -> str:
    return probe_unit(GROUPS, KERNEL)


def inputs() -> torch.Tensor:
    """Every regime: far below zero (softplus ≈ e^x), around zero, the threshold's both sides, signed zeros."""
    g = torch.Generator().manual_seed(0)
    grid = torch.linspace(-30.0, 30.0, 60001)
    wide = torch.cat([-torch.logspace(-8, np.log10(80.0), 4000), torch.logspace(-8, np.log10(80.0), 4000)])
    rnd = torch.randn(8192, generator=g) * 6
    edges = torch.tensor([0.0, -0.0, THRESHOLD, np.nextafter(np.float32(THRESHOLD), np.float32(0)), -87.0, -100.0])
    return torch.cat([grid, wide, rnd, edges]).float()


def reference(x: np.ndarray) -> np.ndarray:
    """FLA's softplus in float64: x above the threshold, else log(1 + e^x) (log1p keeps the far-negative range)."""
    x = x.astype(np.float64)
    return np.where(x > THRESHOLD, x, np.log1p(np.exp(x)))


def softplus(module, device: str, x: torch.Tensor) -> np.ndarray:
    y = torch.full_like(x, float("nan"))
    xs, ys = x.to(device), y.to(device)
    module.launch("softplus_probe", ((len(x) + 255) // 256,), (256,), [xs, len(x), runtime.f32(THRESHOLD), ys])
    if device == "cuda":
        torch.cuda.synchronize()
    return ys.cpu().numpy().astype(np.float64)


def check(module, device: str) -> None:
    special = softplus(module, device, torch.tensor([*SPECIAL, float("nan")]))
    np.testing.assert_array_equal(special[:-1], list(SPECIAL.values()), err_msg=f"softplus of {list(SPECIAL)}")
    assert np.isnan(special[-1]), f"softplus(nan) = {special[-1]} on {device}"
    x = inputs()
    got, want = softplus(module, device, x), reference(x.numpy())
    normal = want >= np.finfo(np.float32).tiny                   # below it the fp32 result flushes to 0
    rel = np.abs(got - want)[normal] / want[normal]
    worst = int(np.argmax(rel))
    assert rel[worst] <= ULPS * 2.0 ** -23, (
        f"softplus({x.numpy()[normal][worst]!r}) = {got[normal][worst]!r} on {device}, "
        f"float64 {want[normal][worst]!r}: {rel[worst] / 2.0 ** -23:.1f} ulp (allowed {ULPS})")
    assert np.all(got[~normal] <= np.finfo(np.float32).tiny), "a flushed result must be 0 (or the tiny value)"


@pytest.fixture(scope="module")
def emulated():
    if emulate.unavailable():
        pytest.skip(f"no emulation: {emulate.unavailable()}")
    return emulate.build_source(KERNEL, SIGNATURES, GROUPS)


def test_softplus_within_a_few_ulp(emulated):
    check(emulated, "cpu")
