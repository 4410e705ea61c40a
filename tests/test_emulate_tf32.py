"""The tf32 tensor-core primitives (templates/sm80: mma.sync m16n8k8 .tf32, cvt.rna.tf32 and the fragment loads of
ldmatrix.cuh) in the CPU emulator, against float64 references; tests/gpu/test_tf32_primitives_gpu.py runs the same
kernel on the GPU, so the emulator's reading of the PTX ISA's fragment layouts is checked against hardware.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from kdagen.codegen import emulate
from kdagen.codegen.render import probe_unit

GROUPS = ("common", "sm80")

# One warp: D (16 x 16) = A (16 x K) · B (K x 16) over K / 8 steps, A row-major [16][lda], B stored N x K ([16][ldb],
# element (k, n) at b[n * ldb + k]) times scale[k]; and the cvt of every input element, to compare the rounding.
KERNEL = r"""
constexpr int KMAX = 32;  // the largest K the tests pass
extern "C" __global__ void __launch_bounds__(32) tf32_mma_probe(const float* a, const float* b, const float* scale,
                                                                int K, float* d, float* rounded) {
  const int lane = threadIdx.x;
  // the fragments come from shared memory (ldmatrix reads nothing else): A rounded once, stored; B as given
  __shared__ __align__(16) float sa[16 * (KMAX + 4)], sb[16 * (KMAX + 4)];
  for (int i = lane; i < 16 * (K + 4); i += 32) {
    sa[i] = rounded[i] = kdg::round_tf32(a[i]);
    sb[i] = b[i];
  }
  __syncwarp();
  kdg::FragC acc[2];
  kdg::frag_zero(acc[0]);
  kdg::frag_zero(acc[1]);
  for (int k0 = 0; k0 < K; k0 += 8) {
    kdg::FragA8 fa;
    kdg::FragB8 fb[2];
    kdg::load_frag_a8_rounded(fa, sa + k0, K + 4, lane);
    kdg::load_frag_b8x2_nk(fb, sb + k0, K + 4, scale ? scale + k0 : nullptr, lane);
    kdg::mma_1688_tf32(acc[0], fa, fb[0]);
    kdg::mma_1688_tf32(acc[1], fa, fb[1]);
  }
  kdg::store_frag_c(acc[0], d, 16, lane);
  kdg::store_frag_c(acc[1], d + 8, 16, lane);
}
"""
SIGNATURES = [("tf32_mma_probe", ["const float*", "const float*", "const float*", "int", "float*", "float*"])]


def device_source() -> str:
    return probe_unit(GROUPS, KERNEL)


def tf32_rna(x: np.ndarray) -> np.ndarray:
    """cvt.rna.tf32.f32 on finite fp32 values: 10 mantissa bits, ties away from zero."""
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def run(module, device: str, K: int, scaled: bool, seed: int):
    """(D, cvt of A's elements) from the probe, and their references: D from the tf32-rounded operands in float64
    (the tensor cores sum in another order: compare within fp32 accumulation error)."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(16, K + 4, generator=g) * torch.logspace(-3, 3, K + 4)     # magnitudes across the range
    b = torch.randn(16, K + 4, generator=g)
    scale = torch.rand(K, generator=g) + 0.5 if scaled else None
    a[0, 0], a[1, 1], a[2, 2] = 1 + 2 ** -11, -(1 + 3 * 2 ** -11), 2 ** -20 * (1 + 2 ** -11)  # ties and a small one
    d = torch.full((16, 16), float("nan"))
    rounded = torch.full((16 * (K + 4),), float("nan"))
    args = [t.to(device) if t is not None else None for t in (a, b, scale)]
    out = [d.to(device), rounded.to(device)]
    module.launch("tf32_mma_probe", (1,), (32,), [*args, K, *out])
    if device == "cuda":
        torch.cuda.synchronize()
    got_d, got_r = out[0].cpu().numpy(), out[1].cpu().numpy().reshape(16, K + 4)
    an = tf32_rna(a.numpy())[:, :K].astype(np.float64)
    bk = b.numpy()[:, :K] * (scale.numpy() if scaled else 1.0)
    bn = tf32_rna(bk.astype(np.float32)).astype(np.float64)
    return got_d, an @ bn.T, got_r, tf32_rna(a.numpy())


def check(module, device: str, K: int, scaled: bool) -> None:
    got_d, want_d, got_r, want_r = run(module, device, K, scaled, seed=K + scaled)
    np.testing.assert_array_equal(got_r, want_r, err_msg="round_tf32 (cvt.rna.tf32) of A's elements")
    tol = 1e-5 * np.abs(want_d).max()
    bad = np.argwhere(np.abs(got_d - want_d) > tol)
    assert not len(bad), (f"tf32 mma K={K} scaled={scaled}: D (row, col) differs at {bad[:6].tolist()}: "
                          f"got {got_d[tuple(bad[0])]}, expected {want_d[tuple(bad[0])]}")


@pytest.fixture(scope="module")
def emulated():
    if emulate.unavailable():
        pytest.skip(f"no emulation: {emulate.unavailable()}")
    return emulate.build_source(KERNEL, SIGNATURES, GROUPS)


@pytest.mark.parametrize("K, scaled", [(8, False), (32, False), (32, True)])
def test_tf32_mma_and_rounding(emulated, K, scaled):
    check(emulated, "cpu", K, scaled)
