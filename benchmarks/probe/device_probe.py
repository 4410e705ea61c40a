"""One-off probe of the GPU image: versions, NVRTC through CuPy on torch tensors, FLA's chunk_kda timing."""
import os, subprocess
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(), torch.cuda.get_device_capability())
import cupy
from cupy.cuda import nvrtc
print("cupy", cupy.__version__, "nvrtc", nvrtc.getVersion(), "driver", cupy.cuda.runtime.driverGetVersion())
try:
    import nvidia.cu13, glob
    print("nvidia.cu13 include:", glob.glob(os.path.join(list(nvidia.cu13.__path__)[0], "include", "cuda_bf16.h")))
except Exception as e:
    print("no nvidia.cu13:", e)
print(subprocess.run("which nvcc; nvcc --version | tail -1; ls /usr/local/cuda/include/cuda_bf16.h", shell=True, capture_output=True, text=True).stdout)
src = r'''
#include <cuda_bf16.h>
extern "C" __global__ void axpy(const __nv_bfloat16* x, float* y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += a * __bfloat162float(x[i]); }
'''
inc = "/usr/local/cuda/include"
prog = nvrtc.createProgram(src, "p.cu", [], [])
nvrtc.compileProgram(prog, ["-arch=sm_90a", f"-I{inc}", "--std=c++17"])
cubin = nvrtc.getCUBIN(prog)
mod = cupy.cuda.function.Module()
mod.load(cubin)
f = mod.get_function("axpy")
x = torch.randn(1000, device="cuda", dtype=torch.bfloat16); y = torch.zeros(1000, device="cuda")
with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
    f((4,), (256,), (x.data_ptr(), y.data_ptr(), cupy.float32(2.0), cupy.int32(1000)))
torch.cuda.synchronize()
print("nvrtc cubin launch ok:", torch.allclose(y, 2 * x.float()))

from fla.ops.kda import chunk_kda
from fla.ops.gated_delta_rule import chunk_gated_delta_rule
import triton
def bench(fn, n=20):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
    ts.sort(); return ts[len(ts)//2]
for (B, T, H, D) in [(1, 8192, 64, 128), (1, 32768, 16, 128), (8, 4096, 32, 128), (4, 4096, 16, 64)]:
    dev = "cuda"; bf = torch.bfloat16
    q, k = torch.randn(B, T, H, D, device=dev, dtype=bf), torch.randn(B, T, H, D, device=dev, dtype=bf)
    v = torch.randn(B, T, H, D, device=dev, dtype=bf)
    g = torch.randn(B, T, H, D, device=dev, dtype=bf)
    beta = torch.randn(B, T, H, device=dev, dtype=bf)
    A_log = torch.rand(H, device=dev).mul(15).add(1).log(); dt_bias = torch.randn(H * D, device=dev)
    h0 = torch.randn(B, H, D, D, device=dev)
    for lb in (None, -5.0):
        leaves = [t.requires_grad_() for t in (q, k, v, g, beta)]
        def fwd():
            return chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True,
                             use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True, lower_bound=lb, safe_gate=lb is not None, A_log=A_log, dt_bias=dt_bias)
        o, ht = fwd(); do = torch.randn_like(o)
        tf = bench(lambda: fwd())
        tfb = bench(lambda: torch.autograd.backward(fwd()[0], do))
        print(f"FLA chunk_kda B={B} T={T} H={H} D={D} lb={lb}: fwd {tf:.3f} ms, fwd+bwd {tfb:.3f} ms")
    gg = torch.randn(B, T, H, device=dev).sigmoid().log()
    tg = bench(lambda: chunk_gated_delta_rule(q, k, v, gg, beta.sigmoid(), initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True))
    print(f"FLA chunk_gdn B={B} T={T} H={H} D={D}: fwd {tg:.3f} ms")
