"""Runtime on a GPU: compile, load and launch tiny kernels through load_module on torch's current stream.

Run on the device machine with `python -m pytest -m gpu tests/test_runtime_gpu.py -q`.
"""
from __future__ import annotations

import pytest
import torch

from kdagen import runtime

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

ARGS = r'''
extern "C" __global__ void args(float* out, const float* absent, int n, long long big, float f) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    out[0] = (float)n; out[1] = (float)(big >> 32); out[2] = f; out[3] = absent == nullptr ? 1.f : 0.f;
  }
}
'''
AXPY = r'''
#include <cuda_bf16.h>
extern "C" __global__ void axpy(const __nv_bfloat16* x, float* y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * __bfloat162float(x[i]);
}
'''
SET = r'''
extern "C" __global__ void set_value(float* y, float v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = v;
}
'''
BIG_SMEM = r'''
extern "C" __global__ void smem_sum(const float* x, float* out, int n) {
  extern __shared__ float buf[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = x[i];
  __syncthreads();
  if (threadIdx.x == 0) { float s = 0.f; for (int i = 0; i < n; ++i) s += buf[i]; out[0] = s; }
}
'''
SM90A = r'''
extern "C" __global__ void __launch_bounds__(128) grow(float* y) {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  y[threadIdx.x] = 3.f;
}
'''


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KDAGEN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KDAGEN_ARCH", raising=False)
    monkeypatch.delenv("KDAGEN_DISABLE_JIT", raising=False)
    runtime.forget_modules()
    yield
    runtime.forget_modules()


def test_every_argument_kind_arrives():
    out = torch.full((4,), float("nan"), device="cuda")
    runtime.load_module("t_args", ARGS).launch("args", 1, 32, [out, None, 7, runtime.i64(5 << 32), runtime.f32(0.25)])
    torch.cuda.synchronize()
    assert out.tolist() == [7.0, 5.0, 0.25, 1.0]


def test_bf16_axpy():
    n = 1000
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(n, device="cuda")
    want = y + 2.0 * x.float()
    runtime.load_module("t_axpy", AXPY).launch("axpy", (n + 127) // 128, 128, [x, y, runtime.f32(2.0), n])
    torch.testing.assert_close(y, want)


def test_launch_orders_with_torch_work_on_a_side_stream():
    """On stream s: a long sleep, then zero y, then our kernel sets y. A launch on any other stream would
    run before the zeroing finished and be overwritten."""
    n = 1 << 20
    module = runtime.load_module("t_set", SET)
    y = torch.empty(n, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)
        y.zero_()
        module.launch("set_value", (n + 255) // 256, 256, [y, runtime.f32(4.0), n])
    s.synchronize()
    assert bool((y == 4.0).all())


def test_dynamic_shared_memory_above_48k_is_opted_in():
    n = 40_000                                     # 160 000 bytes of dynamic shared memory
    x = torch.rand(n, device="cuda")
    out = torch.zeros(1, device="cuda")
    runtime.load_module("t_smem", BIG_SMEM).launch("smem_sum", 1, 256, [x, out, n], smem_bytes=4 * n)
    torch.testing.assert_close(out[0], x.sum(), rtol=1e-4, atol=1e-3)


def test_empty_grid_is_a_no_op_and_unknown_kernels_are_named():
    module = runtime.load_module("t_set", SET)
    y = torch.ones(4, device="cuda")
    module.launch("set_value", (0, 4), 32, [y, runtime.f32(9.0), 4])
    torch.cuda.synchronize()
    assert y.tolist() == [1.0] * 4
    with pytest.raises(KeyError, match="no_such_kernel"):
        module.launch("no_such_kernel", 1, 32, [y])


def test_attributes_report_registers_and_spills():
    attrs = runtime.load_module("t_axpy", AXPY).attributes("axpy")
    assert attrs["num_regs"] > 0 and attrs["local_size_bytes"] == 0 and attrs["max_threads_per_block"] >= 128


def test_detected_arch_runs_its_own_features():
    arch = runtime.detect_arch()
    assert arch == runtime.arch_for_capability(torch.cuda.get_device_capability())
    if arch != "sm_90a":
        pytest.skip("not a compute capability 9.0 GPU")
    y = torch.zeros(128, device="cuda")
    module = runtime.load_module("t_sm90a", SM90A)
    assert module.kind == "cubin"
    module.launch("grow", 1, 128, [y])
    torch.cuda.synchronize()
    assert bool((y == 3.0).all())


def test_sm80_code_runs_on_any_newer_gpu(monkeypatch):
    """KDAGEN_ARCH=sm_80 on a GPU of another major version: PTX, compiled by the driver at load."""
    monkeypatch.setenv("KDAGEN_ARCH", "sm_80")
    module = runtime.load_module("t_set", SET)
    major = torch.cuda.get_device_capability()[0]
    assert module.kind == ("cubin" if major == 8 else "ptx")
    y = torch.zeros(64, device="cuda")
    module.launch("set_value", 1, 64, [y, runtime.f32(5.0), 64])
    torch.cuda.synchronize()
    assert bool((y == 5.0).all())


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_launch_follows_the_tensors_device():
    module = runtime.load_module("t_set", SET)
    y = torch.zeros(64, device="cuda:1")
    module.launch("set_value", 1, 64, [y, runtime.f32(6.0), 64])
    torch.cuda.synchronize(1)
    assert bool((y == 6.0).all())
