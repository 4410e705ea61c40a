"""The sm_90a primitives (templates/sm90: bulk tensor copies and stores, mbarrier tx-counts, wgmma, stmatrix,
setmaxnreg, named barriers) run as small kernels in the CPU emulator against numpy references written from
the PTX ISA's description of each instruction; the same kernels compile with nvcc (no ptxas warning, no
wgmma serialization advisory) and with NVRTC for sm_90a. tests/gpu/test_sm90_primitives.py runs them on a
GPU against the same references: the runners below take the module, the device and the tensor-map encoder.

Layout conventions of the references: shared tiles sit at 1024-byte aligned addresses, so a swizzle is
the XOR of byte-offset bits 4.. with bits 7.. (tma.cuh, swizzle_offset); wgmma operands are built as byte
images of the canonical layouts of wgmma.cuh, which the kernels copy into shared memory verbatim.
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from kdagen.codegen import emulate
from kdagen.codegen.render import probe_unit
from markers import needs_nvrtc

needs_emulation = pytest.mark.skipif(emulate.unavailable() is not None, reason=f"no emulation: {emulate.unavailable()}")

GROUPS = ("common", "sm90")
SPANS = (0, 32, 64, 128)

KERNELS = r"""
// ---- test kernels of the sm90 primitives (tests/test_emulate_sm90.py) ----
enum { A_BYTES, A_SWIZZLE, A_LBO, A_SBO, A_OFF, B_BYTES = A_OFF + 4, B_SWIZZLE, B_LBO, B_SBO, B_OFF,
       KSTEPS = B_OFF + 4, SCALE_D };
enum { T_RANK, T_C0, T_C1, T_C2, T_C3, T_STEP, T_ITERS, T_MODE, T_BYTES, T_SECOND, T_SPAN, T_INNER, T_PITCH,
       T_FOOTPRINT };
constexpr int A_MAX = 8192, TILE_MAX = 8192;

__device__ __forceinline__ void stage(unsigned char* dst, const uint4* src, int bytes) {
  for (int i = threadIdx.x; i < bytes / 16; i += blockDim.x) reinterpret_cast<uint4*>(dst)[i] = src[i];
}

// mbarrier_wait_try with a bound: a phase that never completes (a tx-count that does not add up) is
// reported in *error instead of hanging the GPU.
__device__ __forceinline__ bool wait_bounded(kdg::u64* bar, int parity, int* error, int code) {
  for (int i = 0; i < (1 << 22); ++i)
    if (kdg::ptx_mbarrier_try_wait(bar, parity)) return true;
  *error = code;
  return false;
}

__device__ __forceinline__ void copy_out(unsigned char* dst, const unsigned char* src, int bytes) {
  for (int i = threadIdx.x; i < bytes / 16; i += blockDim.x)
    reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
}

template <int N>
__device__ __forceinline__ void load_acc(kdg::WgmmaAcc<N>& acc, const float* d) {
  const int t = threadIdx.x % 128;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc.x[i] = d[kdg::wgmma_acc_row(t, i) * N + kdg::wgmma_acc_col(t, i)];
}

template <int N>
__device__ __forceinline__ void store_acc(const kdg::WgmmaAcc<N>& acc, float* d) {
  const int t = threadIdx.x % 128;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[kdg::wgmma_acc_row(t, i) * N + kdg::wgmma_acc_col(t, i)] = acc.x[i];
}

// The register-A fragment of columns [k0, k0 + 16) of a row-major 64 x ld bf16 matrix.
__device__ __forceinline__ kdg::WgmmaFragA load_frag_a(const bf16* a, int ld, int k0) {
  const int t = threadIdx.x % 128, row = 16 * (t / 32) + (t % 32) / 4, col = k0 + 2 * (t % 4);
  kdg::WgmmaFragA f;
  f.x[0] = *reinterpret_cast<const kdg::u32*>(a + row * ld + col);
  f.x[1] = *reinterpret_cast<const kdg::u32*>(a + (row + 8) * ld + col);
  f.x[2] = *reinterpret_cast<const kdg::u32*>(a + row * ld + col + 8);
  f.x[3] = *reinterpret_cast<const kdg::u32*>(a + (row + 8) * ld + col + 8);
  return f;
}

__device__ __forceinline__ kdg::u64 desc_a(unsigned char* s, const int* cfg, int step) {
  return kdg::smem_desc_advance(kdg::make_smem_desc(s, cfg[A_LBO], cfg[A_SBO], cfg[A_SWIZZLE]), cfg[A_OFF + step]);
}

__device__ __forceinline__ kdg::u64 desc_b(unsigned char* s, const int* cfg, int step) {
  return kdg::smem_desc_advance(kdg::make_smem_desc(s, cfg[B_LBO], cfg[B_SBO], cfg[B_SWIZZLE]), cfg[B_OFF + step]);
}

// d (64 x N, row-major) = A·B + (cfg[SCALE_D] ? d : 0), over cfg[KSTEPS] k-steps of 16.
template <int N, int TA, int TB>
__device__ __forceinline__ void run_ss(unsigned char* sa, unsigned char* sb, const uint4* a, const uint4* b,
                                       const int* cfg, float* d) {
  stage(sa, a, cfg[A_BYTES]);
  stage(sb, b, cfg[B_BYTES]);
  kdg::fence_proxy_async();
  __syncthreads();
  kdg::WgmmaAcc<N> acc;
  load_acc(acc, d);
  kdg::wgmma_fence_operand(acc);
  for (int s = 0; s < cfg[KSTEPS]; ++s) {  // a group per k-step (a run-time loop must commit inside)
    kdg::wgmma_fence();
    kdg::wgmma_ss<TA, TB>(acc, desc_a(sa, cfg, s), desc_b(sb, cfg, s), s == 0 ? cfg[SCALE_D] : 1);
    kdg::wgmma_commit();
  }
  kdg::wgmma_wait<0>();
  kdg::wgmma_fence_operand(acc);
  store_acc(acc, d);
}

// The same with A (64 x 16·KSTEPS, row-major bf16 in global memory) from registers.
template <int N, int TB>
__device__ __forceinline__ void run_rs(unsigned char* sb, const bf16* a, const uint4* b, const int* cfg, float* d) {
  stage(sb, b, cfg[B_BYTES]);
  kdg::fence_proxy_async();
  __syncthreads();
  kdg::WgmmaAcc<N> acc;
  load_acc(acc, d);
  kdg::wgmma_fence_operand(acc);
  for (int s = 0; s < cfg[KSTEPS]; ++s) {
    kdg::WgmmaFragA f = load_frag_a(a, 16 * cfg[KSTEPS], 16 * s);
    kdg::wgmma_fence_operand(f);
    kdg::wgmma_fence();
    kdg::wgmma_rs<TB>(acc, f, desc_b(sb, cfg, s), s == 0 ? cfg[SCALE_D] : 1);
    kdg::wgmma_commit();
  }
  kdg::wgmma_wait<0>();
  kdg::wgmma_fence_operand(acc);
  store_acc(acc, d);
}

#define WGMMA_SS_KERNEL(N, TA, TB)                                                                         \
  extern "C" __global__ void __launch_bounds__(128, 1) wgmma_ss_n##N##_t##TA##TB(                          \
      const uint4* a, const uint4* b, const int* cfg, float* d) {                                          \
    __shared__ __align__(1024) unsigned char sa[A_MAX];                                                    \
    __shared__ __align__(1024) unsigned char sb[(N < 64 ? 64 : N) * 128];                                  \
    run_ss<N, TA, TB>(sa, sb, a, b, cfg, d);                                                               \
  }
#define WGMMA_RS_KERNEL(N, TB)                                                                             \
  extern "C" __global__ void __launch_bounds__(128, 1) wgmma_rs_n##N##_t##TB(                              \
      const bf16* a, const uint4* b, const int* cfg, float* d) {                                           \
    __shared__ __align__(1024) unsigned char sb[N * 128];                                                  \
    run_rs<N, TB>(sb, a, b, cfg, d);                                                                       \
  }
$INSTANCES

// P = A·B1 (64 x 64, one k-step), then d = bf16(P)·B2 with P's column slices as register A fragments.
extern "C" __global__ void __launch_bounds__(128, 1) wgmma_chain(const uint4* a, const uint4* b1, const uint4* b2,
                                                                 const int* cfg1, const int* cfg2, float* d) {
  __shared__ __align__(1024) unsigned char sa[A_MAX];
  __shared__ __align__(1024) unsigned char sb1[8192];
  __shared__ __align__(1024) unsigned char sb2[8192];
  stage(sa, a, cfg1[A_BYTES]);
  stage(sb1, b1, cfg1[B_BYTES]);
  stage(sb2, b2, cfg2[B_BYTES]);
  kdg::fence_proxy_async();
  __syncthreads();
  kdg::WgmmaAcc<64> p, o;
  kdg::wgmma_zero(p);
  kdg::wgmma_zero(o);
  kdg::wgmma_fence_operand(p);
  kdg::wgmma_fence_operand(o);
  kdg::wgmma_fence();
  kdg::wgmma_ss<0, 0>(p, desc_a(sa, cfg1, 0), desc_b(sb1, cfg1, 0), 0);
  kdg::wgmma_commit();
  kdg::wgmma_wait<0>();
  kdg::wgmma_fence_operand(p);
  kdg::WgmmaFragA f[4] = {kdg::wgmma_frag_a_from_acc<0>(p), kdg::wgmma_frag_a_from_acc<1>(p),
                          kdg::wgmma_frag_a_from_acc<2>(p), kdg::wgmma_frag_a_from_acc<3>(p)};
#pragma unroll
  for (int s = 0; s < 4; ++s) kdg::wgmma_fence_operand(f[s]);
  kdg::wgmma_fence();
#pragma unroll
  for (int s = 0; s < 4; ++s) kdg::wgmma_rs<0>(o, f[s], desc_b(sb2, cfg2, s), s > 0);
  kdg::wgmma_commit();
  kdg::wgmma_wait<0>();
  kdg::wgmma_fence_operand(o);
  store_acc(o, d);
}

// One box per iteration (the second dimension advanced by T_STEP) into 1024-aligned tiles filled with 0xee
// first; out gets, per iteration and copy, the tile's T_FOOTPRINT raw bytes, then the box's T_BYTES read
// back in order (rows of T_INNER bytes, T_PITCH apart) through kdg::swizzle_offset. Modes: 0 arrive.expect_tx
// then the copy; 1 the copy, then arrive.expect_tx (completion before expectation); 2 two copies on one
// barrier (the second at T_SECOND further along dimension 1); 3 expect_tx, the copy, a plain arrive.
extern "C" __global__ void __launch_bounds__(128) tma_probe(const __grid_constant__ kdg::TensorMap map,
                                                            const int* cfg, unsigned char* out, int* error) {
  __shared__ __align__(1024) unsigned char tile[2][TILE_MAX];
  __shared__ kdg::u64 bar;
  const int mode = cfg[T_MODE], bytes = cfg[T_BYTES], footprint = cfg[T_FOOTPRINT], chunks = cfg[T_INNER] / 16;
  if (threadIdx.x == 0) {
    kdg::mbarrier_init(&bar, 1);
    kdg::fence_mbarrier_init();
  }
  for (int i = threadIdx.x; i < 2 * TILE_MAX / 16; i += blockDim.x)
    reinterpret_cast<uint4*>(tile)[i] = make_uint4(0xeeeeeeeeu, 0xeeeeeeeeu, 0xeeeeeeeeu, 0xeeeeeeeeu);
  kdg::fence_proxy_async();  // the copies (async proxy) write after these stores
  __syncthreads();
  for (int it = 0; it < cfg[T_ITERS]; ++it) {
    if (threadIdx.x == 0) {
      const int c1 = cfg[T_C1] + it * cfg[T_STEP];
      if (mode == 0) kdg::mbarrier_arrive_expect_tx(&bar, bytes);
      if (mode == 2) kdg::mbarrier_arrive_expect_tx(&bar, 2 * bytes);
      if (mode == 3) kdg::mbarrier_expect_tx(&bar, bytes);
      for (int copy = 0; copy < (mode == 2 ? 2 : 1); ++copy) {
        const int c = c1 + copy * cfg[T_SECOND];
        if (cfg[T_RANK] == 2) kdg::tma_load_2d(tile[copy], &map, cfg[T_C0], c, &bar);
        else if (cfg[T_RANK] == 3) kdg::tma_load_3d(tile[copy], &map, cfg[T_C0], c, cfg[T_C2], &bar);
        else kdg::tma_load_4d(tile[copy], &map, cfg[T_C0], c, cfg[T_C2], cfg[T_C3], &bar);
      }
      if (mode == 1) kdg::mbarrier_arrive_expect_tx(&bar, bytes);
      if (mode == 3) kdg::mbarrier_arrive(&bar);
    }
    if (!wait_bounded(&bar, it & 1, error, it + 1)) return;
    for (int copy = 0; copy < (mode == 2 ? 2 : 1); ++copy) {
      unsigned char* o = out + (2 * it + copy) * (footprint + bytes);
      copy_out(o, tile[copy], footprint);
      for (int i = threadIdx.x; i < bytes / 16; i += blockDim.x) {
        const int at = i / chunks * cfg[T_PITCH] + i % chunks * 16;
        reinterpret_cast<uint4*>(o + footprint)[i] =
            *reinterpret_cast<const uint4*>(tile[copy] + kdg::swizzle_offset(at, cfg[T_SPAN]));
      }
    }
    __syncthreads();
  }
}

// The phases of one mbarrier as thread 0 sees them (flags: 1 = the phase asked about has completed):
// arrive.expect_tx leaves the phase open until the box lands; a copy completing before its bytes are
// expected leaves it open until the arrival; expect_tx then a plain arrive, the same.
extern "C" __global__ void __launch_bounds__(32) mbarrier_tx_probe(const __grid_constant__ kdg::TensorMap map,
                                                                   int bytes, int* flags, int* error) {
  __shared__ __align__(1024) unsigned char tile[TILE_MAX];
  __shared__ kdg::u64 bar;
  if (threadIdx.x != 0) return;
  kdg::mbarrier_init(&bar, 1);
  kdg::fence_mbarrier_init();
  flags[0] = kdg::ptx_mbarrier_test(&bar, 0);
  kdg::mbarrier_arrive_expect_tx(&bar, bytes);
  flags[1] = kdg::ptx_mbarrier_test(&bar, 0);
  kdg::tma_load_2d(tile, &map, 0, 0, &bar);
  flags[2] = wait_bounded(&bar, 0, error, 1);
  kdg::tma_load_2d(tile, &map, 0, 0, &bar);
  flags[3] = kdg::ptx_mbarrier_test(&bar, 1);
  kdg::mbarrier_arrive_expect_tx(&bar, bytes);
  flags[4] = wait_bounded(&bar, 1, error, 2);
  kdg::mbarrier_expect_tx(&bar, bytes);
  kdg::mbarrier_arrive(&bar);
  flags[5] = kdg::ptx_mbarrier_test(&bar, 0);
  kdg::tma_load_2d(tile, &map, 0, 0, &bar);
  flags[6] = wait_bounded(&bar, 0, error, 3);
}

extern "C" __global__ void __launch_bounds__(128) bulk_probe(const uint4* src, int bytes, unsigned char* out,
                                                             int* error) {
  __shared__ __align__(128) unsigned char tile[TILE_MAX];
  __shared__ kdg::u64 bar;
  if (threadIdx.x == 0) {
    kdg::mbarrier_init(&bar, 1);
    kdg::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    kdg::prefetch_l2(src, bytes);        // a hint: the copy below must read the same bytes either way
    kdg::mbarrier_arrive_expect_tx(&bar, bytes);
    kdg::bulk_load(tile, src, bytes, &bar);
  }
  if (wait_bounded(&bar, 0, error, 1)) copy_out(out, tile, bytes);
}

// The reverse copy: `bytes` of a tile image (as a load of the map would lay it out) staged verbatim at a 1024-byte
// aligned address, then one box stored at (c0, c1) by thread 0, committed and waited for.
// late (emulator only: on a GPU a race): thread 0 zeroes the tile after the commit and before the wait, which the
// emulator's store, reading its source as late as the hardware may, then writes.
extern "C" __global__ void __launch_bounds__(128) tma_store_probe(const __grid_constant__ kdg::TensorMap map,
                                                                  const uint4* image, int bytes, int c0, int c1,
                                                                  int late) {
  __shared__ __align__(1024) unsigned char tile[TILE_MAX];
  stage(tile, image, bytes);
  kdg::fence_proxy_async();  // the generic stores, before the async proxy reads them
  __syncthreads();
  if (threadIdx.x == 0) {
    kdg::tma_store_2d(&map, c0, c1, tile);
    kdg::bulk_commit();
    if (late)
      for (int i = 0; i < bytes; ++i) tile[i] = 0;
    kdg::bulk_wait_read<0>();
  }
}

// Four 8x8 b16 matrices, rows 32 bytes apart; register i of lane l holds ids 8l + 2i (low), 8l + 2i + 1.
extern "C" __global__ void __launch_bounds__(32) stmatrix_probe(unsigned short* out, int trans) {
  __shared__ __align__(128) unsigned short tile[4 * 8 * 16];
  const int lane = threadIdx.x;
  for (int i = lane; i < 4 * 8 * 16; i += 32) tile[i] = 0xffff;
  __syncwarp();
  kdg::u32 r[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) r[i] = (8 * lane + 2 * i) | (8 * lane + 2 * i + 1) << 16;
  void* row = tile + (8 * (lane / 8) + lane % 8) * 16;
  if (trans) kdg::ptx_stmatrix_x4_trans(row, r);
  else kdg::ptx_stmatrix_x4(row, r);
  __syncwarp();
  for (int i = lane; i < 4 * 8 * 16; i += 32) out[i] = tile[i];
}

// Warp 0 produces a word per lane per iteration (slot free: bar 2, slot full: bar 1); warps 1-3 fold the
// words in order into a hash per thread.
extern "C" __global__ void __launch_bounds__(128) named_barrier_probe(int iters, unsigned* out) {
  __shared__ unsigned slot[32];
  const int lane = threadIdx.x % 32;
  if (threadIdx.x < 32) {
    for (int it = 0; it < iters; ++it) {
      if (it > 0) kdg::named_barrier_sync(2, 128);
      slot[lane] = (blockIdx.x + 1) * 1000003u + it * 7919u + lane;
      kdg::named_barrier_arrive(1, 128);
    }
  } else {
    unsigned h = threadIdx.x;
    for (int it = 0; it < iters; ++it) {
      kdg::named_barrier_sync(1, 128);
      h = h * 31u + slot[(lane + it) % 32];
      if (it + 1 < iters) kdg::named_barrier_arrive(2, 128);
    }
    out[blockIdx.x * 96 + threadIdx.x - 32] = h;
  }
}

// Warpgroup 0 gives registers up, warpgroup 1 takes them (a producer / consumer split).
extern "C" __global__ void __launch_bounds__(256, 1) setmaxnreg_probe(int* out) {
  if (threadIdx.x < 128) {
    kdg::ptx_setmaxnreg_dec<40>();
    out[threadIdx.x] = 2 * threadIdx.x;
  } else {
    kdg::ptx_setmaxnreg_inc<232>();
    out[threadIdx.x] = 2 * threadIdx.x + 1;
  }
}
"""

# (N, TA, TB) of the SS kernels and (N, TB) of the RS ones
SS_SHAPES = [(32, 0, 0), (256, 0, 0)] + [(n, ta, tb) for n in (64, 128) for ta in (0, 1) for tb in (0, 1)]
RS_SHAPES = [(n, tb) for n in (64, 128) for tb in (0, 1)]


def kernels_text() -> str:
    instances = [f"WGMMA_SS_KERNEL({n}, {ta}, {tb})" for n, ta, tb in SS_SHAPES]
    instances += [f"WGMMA_RS_KERNEL({n}, {tb})" for n, tb in RS_SHAPES]
    return KERNELS.replace("$INSTANCES", "\n".join(instances))


def signatures() -> list[tuple[str, list[str]]]:
    sigs = [(f"wgmma_ss_n{n}_t{ta}{tb}", ["const uint4*", "const uint4*", "const int*", "float*"])
            for n, ta, tb in SS_SHAPES]
    sigs += [(f"wgmma_rs_n{n}_t{tb}", ["const bf16*", "const uint4*", "const int*", "float*"]) for n, tb in RS_SHAPES]
    return sigs + [("wgmma_chain", ["const uint4*"] * 3 + ["const int*"] * 2 + ["float*"]),
                   ("tma_probe", ["kdg::TensorMap", "const int*", "unsigned char*", "int*"]),
                   ("mbarrier_tx_probe", ["kdg::TensorMap", "int", "int*", "int*"]),
                   ("bulk_probe", ["const uint4*", "int", "unsigned char*", "int*"]),
                   ("tma_store_probe", ["kdg::TensorMap", "const uint4*", "int", "int", "int", "int"]),
                   ("stmatrix_probe", ["unsigned short*", "int"]),
                   ("named_barrier_probe", ["int", "unsigned*"]),
                   ("setmaxnreg_probe", ["int*"])]


def device_source() -> str:
    """The kernels as one CUDA unit for nvcc / NVRTC (the headers pasted as templates/unit.cu.j2 does)."""
    return probe_unit(GROUPS, kernels_text())


# ---- references ---------------------------------------------------------------------------------------------

def swizzle(offsets, span: int):
    """Byte offsets (from a base aligned to 8 spans) where a `span`-byte swizzle puts them."""
    offsets = np.asarray(offsets)
    return offsets ^ (((offsets >> 7) & (span // 16 - 1)) << 4) if span else offsets


def bits(t: torch.Tensor) -> np.ndarray:
    """The raw 16-bit patterns of a bf16 tensor."""
    return t.cpu().contiguous().view(torch.int16).numpy().view(np.uint16)


def tma_box(data: np.ndarray, dims, strides, box, coords) -> np.ndarray:
    """The bytes of one box, elements gathered innermost first (out of bounds: 0)."""
    flat, rank = data.reshape(-1), len(dims)
    index = np.indices(tuple(reversed(box))).reshape(rank, -1)[::-1]       # innermost coordinate first
    g = index + np.asarray(coords)[:, None]
    inside = np.all((g >= 0) & (g < np.asarray(dims)[:, None]), axis=0)
    offset = g[0] + sum(g[i] * strides[i - 1] for i in range(1, rank))
    dense = np.zeros(index.shape[1], np.uint16)
    dense[inside] = flat[offset[inside]]
    return dense.view(np.uint8)


def swizzled(raw: np.ndarray, inner: int, span: int) -> np.ndarray:
    """The tile a tensor copy writes those box bytes to (aligned to 8 spans, 0xee where it writes nothing):
    rows of `inner` bytes, each starting a new span when swizzled, 16-byte chunks moved by swizzle()."""
    pitch = span or inner
    out = np.full(raw.size // inner * pitch, 0xEE, np.uint8)
    chunks = np.arange(raw.size // 16)
    at = chunks // (inner // 16) * pitch + chunks % (inner // 16) * 16
    out[(swizzle(at, span)[:, None] + np.arange(16)).reshape(-1)] = raw
    return out


def operand(mat: np.ndarray, major: str, span: int):
    """(byte image, LBO, SBO, start offset per k-step) of an MN x K bf16 operand (16-bit patterns) laid out
    canonically for wgmma: K-major or MN-major, `span`-byte swizzle (0 none), K in steps of 16."""
    rows, kt = mat.shape
    mn, k = np.indices(mat.shape)
    half = span // 2                                       # elements per swizzle span
    if major == "K" and span:                              # rows of one span; columns of spans one after another
        lbo, sbo = 16, 8 * span                            # (LBO unused)
        off = (k // half) * rows * span + mn * span + (k % half) * 2
    elif major == "K":                                     # core matrices: 8 rows down MN (SBO), then along K (LBO)
        lbo, sbo = rows * 16, 128
        off = (mn // 8) * sbo + (k // 8) * lbo + (mn % 8) * 16 + (k % 8) * 2
    elif span:                                             # K rows of one span; MN groups of a span each (LBO)
        lbo, sbo = kt * span, 8 * span
        off = (mn // half) * lbo + (k // 8) * sbo + (k % 8) * span + (mn % half) * 2
    else:                                                  # core matrices 8 K-rows x 8 MN: down MN (SBO), along K
        lbo, sbo = rows * 16, 128
        off = (mn // 8) * sbo + (k // 8) * lbo + (k % 8) * 16 + (mn % 8) * 2
    size = -(-(int(off.max()) + 2) // 1024) * 1024
    image = np.zeros(size // 2, np.uint16)
    image[swizzle(off, span) // 2] = mat
    return image, lbo, sbo, [int(off[0, 16 * s]) for s in range(kt // 16)]


def wgmma_cfg(a=None, b=None, ksteps=1, scale_d=0) -> list[int]:
    """The kernels' int config: per operand (bytes, swizzle, LBO, SBO, 4 step offsets), k-steps, scale-d."""
    def part(op):
        if op is None:
            return [0] * 8
        image, span, lbo, sbo, steps = op
        return [image.nbytes, span, lbo, sbo] + steps + [0] * (4 - len(steps))
    return part(a) + part(b) + [ksteps, scale_d]


def random_bf16(shape, seed: int, integers: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-2, 3, shape, generator=g).float() if integers else torch.randn(shape, generator=g)
    return x.to(torch.bfloat16)


def mismatches(got: np.ndarray, expected: np.ndarray, atol: float, rtol: float = 0.0, first: int = 8) -> str:
    """'' when got matches expected elementwise, else a report: count, worst element, the first few (row, col)."""
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    if got.shape != expected.shape:
        return f"shape {got.shape} != expected {expected.shape}"
    bad = ~(np.abs(got - expected) <= atol + rtol * np.abs(expected))
    if not bad.any():
        return ""
    where = np.argwhere(bad)
    worst = np.unravel_index(np.argmax(np.where(bad, np.abs(got - expected), -1)), got.shape)
    lines = [f"{bad.sum()} of {bad.size} elements differ (atol {atol:g}, rtol {rtol:g}); worst at {tuple(worst)}: "
             f"expected {expected[worst]!r}, got {got[worst]!r}"]
    lines += [f"  at {tuple(int(i) for i in w)}: expected {expected[tuple(w)]!r}, got {got[tuple(w)]!r}"
              for w in where[:first]]
    return "\n".join(lines)


# ---- runners (module: emulated or GPU; encode: emulate.encode_tiled or runtime.encode_tiled) ---------------

def ints(values, device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32, device=device)


def run_wgmma(module, device, n, ta, tb, span_a, span_b, ksteps, scale_d, seed, rs=False):
    """(result, expected) of d = A·B (+ C when scale_d) with A: 64 x 16·ksteps, B: 16·ksteps x n."""
    a, bt = random_bf16((64, 16 * ksteps), seed), random_bf16((n, 16 * ksteps), seed + 1)   # bt: B transposed
    c = torch.randn((64, n), generator=torch.Generator().manual_seed(seed + 2))
    op_b = operand(bits(bt), "K" if tb == 0 else "MN", span_b)
    b_img = torch.from_numpy(op_b[0].view(np.int16)).to(device)
    d = c.clone().to(device)
    if rs:
        cfg = wgmma_cfg(None, (op_b[0], span_b) + op_b[1:], ksteps, scale_d)
        module.launch(f"wgmma_rs_n{n}_t{tb}", (1,), (128,), [a.to(device), b_img, ints(cfg, device), d])
    else:
        op_a = operand(bits(a), "K" if ta == 0 else "MN", span_a)
        cfg = wgmma_cfg((op_a[0], span_a) + op_a[1:], (op_b[0], span_b) + op_b[1:], ksteps, scale_d)
        a_img = torch.from_numpy(op_a[0].view(np.int16)).to(device)
        module.launch(f"wgmma_ss_n{n}_t{ta}{tb}", (1,), (128,), [a_img, b_img, ints(cfg, device), d])
    expected = a.double() @ bt.double().T + (c.double() if scale_d else 0)
    return d.cpu().numpy(), expected.numpy()


def run_chain(module, device, seed):
    """(result, expected) of bf16(A·B1)·B2: A, B1 small integers (A·B1 exact in bf16), B2 random."""
    a, b1t = random_bf16((64, 16), seed, True), random_bf16((64, 16), seed + 1, True)
    b2t = random_bf16((64, 64), seed + 2)
    ops = [operand(bits(m), "K", 128) for m in (a, b1t, b2t)]
    images = [torch.from_numpy(op[0].view(np.int16)).to(device) for op in ops]
    cfg1 = wgmma_cfg((ops[0][0], 128) + ops[0][1:], (ops[1][0], 128) + ops[1][1:])
    cfg2 = wgmma_cfg(None, (ops[2][0], 128) + ops[2][1:], 4)
    d = torch.full((64, 64), float("nan"), device=device)
    module.launch("wgmma_chain", (1,), (128,), [*images, ints(cfg1, device), ints(cfg2, device), d])
    p = (a.double() @ b1t.double().T).to(torch.bfloat16).double()
    return d.cpu().numpy(), (p @ b2t.double().T).numpy()


# name: (tensor shape (outermost first), dims, strides, box, span, coords, mode, iters, step, second)
TMA_CASES = {
    **{f"2d_span{s}": ((70, 104), (100, 70), (104,), (s // 2 or 24, 16), s, (8, 3, 0, 0), 0, 1, 0, 0)
       for s in SPANS},
    **{f"3d_span{s}": ((5, 12, 72), (72, 12, 5), (72, 864), (s // 2 or 40, 8, 2), s, (0, 2, 1, 0), 0, 1, 0, 0)
       for s in SPANS},
    "2d_out_of_bounds": ((70, 104), (100, 70), (104,), (64, 16), 128, (48, -5, 0, 0), 0, 1, 0, 0),
    "3d_out_of_bounds": ((5, 12, 72), (72, 12, 5), (72, 864), (32, 8, 4), 64, (-8, 6, 3, 0), 0, 1, 0, 0),
    "4d_span128": ((3, 4, 6, 64), (64, 6, 4, 3), (64, 384, 1536), (64, 4, 2, 2), 128, (0, 1, 2, 1), 0, 1, 0, 0),
    "2d_inner_box_below_span128": ((70, 104), (100, 70), (104,), (32, 16), 128, (0, 0, 0, 0), 0, 1, 0, 0),
    "2d_inner_box_below_span64": ((70, 104), (100, 70), (104,), (16, 16), 64, (40, 60, 0, 0), 0, 1, 0, 0),
    "3d_inner_box_below_span128": ((5, 12, 72), (72, 12, 5), (72, 864), (16, 8, 2), 128, (8, 2, 1, 0), 0, 1, 0, 0),
    "completion_before_expect": ((70, 104), (100, 70), (104,), (64, 16), 128, (8, 3, 0, 0), 1, 1, 0, 0),
    "two_copies_one_barrier": ((70, 104), (100, 70), (104,), (64, 16), 128, (8, 3, 0, 0), 2, 1, 0, 20),
    "expect_tx_then_arrive": ((70, 104), (100, 70), (104,), (64, 16), 128, (8, 3, 0, 0), 3, 1, 0, 0),
    "phases": ((70, 104), (100, 70), (104,), (64, 8), 128, (0, 0, 0, 0), 0, 9, 8, 0),
    "phases_two_copies": ((70, 104), (100, 70), (104,), (32, 8), 64, (8, -4, 0, 0), 2, 5, 16, 8),
}


def run_tma(module, device, encode, name, seed):
    """(what the kernel copied out, expected) for one TMA_CASES entry: [iteration, copy, byte] of the raw tile
    followed by the box read back through swizzle_offset."""
    shape, dims, strides, box, span, coords, mode, iters, step, second = TMA_CASES[name]
    t = random_bf16(shape, seed)
    tensor = t.to(device)
    tmap = encode(tensor, box, span, dims, strides)
    nbytes, inner = 2 * int(np.prod(box)), 2 * box[0]
    footprint = nbytes // inner * (span or inner)
    rank = len(dims)
    out = torch.zeros(2 * iters * (footprint + nbytes), dtype=torch.uint8, device=device)
    cfg = [rank, *coords, step, iters, mode, nbytes, second, span, inner, span or inner, footprint]
    error = ints([0], device)
    module.launch("tma_probe", (1,), (128,), [tmap, ints(cfg, device), out, error])
    assert error.item() == 0, f"{name}: the mbarrier phase of iteration {error.item() - 1} never completed"
    data = bits(t)
    expected = np.zeros((iters, 2, footprint + nbytes), np.uint8)
    for it in range(iters):
        for copy in range(2 if mode == 2 else 1):
            c = list(coords[:rank])
            c[1] += it * step + copy * second
            box_bytes = tma_box(data, dims, strides, box, c)
            expected[it, copy] = np.concatenate([swizzled(box_bytes, inner, span), box_bytes])
    return out.cpu().numpy().reshape(iters, 2, footprint + nbytes), expected


# name: (tensor [rows, cols], box [cols, rows], swizzle span, coordinates (col, row)); partly outside: not written
TMA_STORE_CASES = {
    "inside_swizzle128": ((100, 96), (64, 64), 128, (32, 20)),
    "past_the_last_rows": ((70, 64), (64, 64), 128, (0, 40)),
    "past_the_last_cols_swizzle64": ((40, 48), (32, 16), 64, (24, 8)),
}


def run_tma_store(module, device, encode, name, seed, late=False):
    """(the tensor after the store, expected): a sentinel tensor, the box's elements written where inside it (zeros
    with `late`, the source rewritten before the wait: the emulator only)."""
    shape, box, span, coords = TMA_STORE_CASES[name]
    values = random_bf16((box[1], box[0]), seed)
    written = torch.zeros_like(values) if late else values
    raw = bits(values).view(np.uint8).reshape(-1)
    image = swizzled(raw, 2 * box[0], span)
    tensor = torch.full(shape, -7.0, dtype=torch.bfloat16)
    expected = bits(tensor).copy()
    rows = slice(coords[1], min(shape[0], coords[1] + box[1]))
    cols = slice(coords[0], min(shape[1], coords[0] + box[0]))
    expected[rows, cols] = bits(written)[:rows.stop - rows.start, :cols.stop - cols.start]
    tensor = tensor.to(device)
    padded = np.zeros(-(-image.size // 16) * 16, np.uint8)
    padded[:image.size] = image
    module.launch("tma_store_probe", (1,), (128,), [encode(tensor, box, span), torch.from_numpy(padded).to(device),
                                                    padded.size, coords[0], coords[1], int(late)])
    return bits(tensor), expected


def run_mbarrier_tx(module, device, encode):
    """(flags, expected) of mbarrier_tx_probe: which phases had completed when thread 0 looked."""
    tensor = torch.zeros(16, 64, dtype=torch.bfloat16, device=device)
    flags, error = ints([-1] * 7, device), ints([0], device)
    module.launch("mbarrier_tx_probe", (1,), (32,), [encode(tensor, (64, 16), 128), 2 * 64 * 16, flags, error])
    assert error.item() == 0, f"mbarrier_tx_probe: wait {error.item()} never saw its phase complete"
    return flags.cpu().numpy(), np.array([0, 0, 1, 0, 1, 0, 1])


def run_bulk(module, device, nbytes, seed):
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    out, error = torch.zeros(nbytes, dtype=torch.uint8, device=device), ints([0], device)
    module.launch("bulk_probe", (1,), (128,), [src.to(device), nbytes, out, error])
    assert error.item() == 0, "the bulk copy's mbarrier phase never completed"
    return out.cpu().numpy(), src.numpy()


def stmatrix_expected(trans: bool) -> np.ndarray:
    """Matrix m row r col c (c < 8) holds the id its lane / register / half carries (the rest stays 0xffff)."""
    out = np.full((4, 8, 16), 0xFFFF, np.int64)
    for m in range(4):
        for r in range(8):
            for c in range(8):
                lane, half = (4 * c + r // 2, r % 2) if trans else (4 * r + c // 2, c % 2)
                out[m, r, c] = 8 * lane + 2 * m + half
    return out.reshape(-1)


def run_stmatrix(module, device, trans: bool):
    out = torch.zeros(4 * 8 * 16, dtype=torch.int16, device=device)
    module.launch("stmatrix_probe", (1,), (32,), [out, int(trans)])
    return out.cpu().numpy().view(np.uint16).astype(np.int64), stmatrix_expected(trans)


def named_barrier_expected(iters: int, blocks: int) -> np.ndarray:
    out = np.zeros((blocks, 96), np.int64)
    for b in range(blocks):
        for t in range(32, 128):
            h = t
            for it in range(iters):
                lane = (t % 32 + it) % 32
                h = (h * 31 + ((b + 1) * 1000003 + it * 7919 + lane)) % 2 ** 32
            out[b, t - 32] = h
    return out.reshape(-1)


def run_named_barrier(module, device, iters: int, blocks: int):
    out = torch.zeros(blocks * 96, dtype=torch.int32, device=device)
    module.launch("named_barrier_probe", (blocks,), (128,), [iters, out])
    return out.cpu().numpy().view(np.uint32).astype(np.int64), named_barrier_expected(iters, blocks)


def run_setmaxnreg(module, device):
    out = torch.full((256,), -1, dtype=torch.int32, device=device)
    module.launch("setmaxnreg_probe", (1,), (256,), [out])
    return out.cpu().numpy(), np.arange(256) * 2 + (np.arange(256) >= 128)


def wgmma_tolerance(expected: np.ndarray) -> float:
    """fp32 accumulation of bf16 products: a few ulp of the largest magnitude (the order differs)."""
    return 1e-5 * max(1.0, float(np.abs(expected).max()))


WGMMA_CASES = {
    **{f"ss_n{n}_kmajor_span{s}_scale{sd}": (n, 0, 0, s, s, 4, sd, False)
       for n in (64, 128) for s in SPANS for sd in (0, 1)},
    **{f"ss_n{n}_mnmajor_span{s}": (n, 1, 1, s, s, 4, 1, False) for n in (64, 128) for s in SPANS},
    "ss_n64_a_mnmajor128_b_kmajor0": (64, 1, 0, 128, 0, 2, 0, False),
    "ss_n128_a_kmajor32_b_mnmajor64": (128, 0, 1, 32, 64, 3, 1, False),
    "ss_n32_kmajor128": (32, 0, 0, 128, 128, 4, 0, False),
    "ss_n256_kmajor128": (256, 0, 0, 128, 128, 4, 1, False),
    "ss_n256_kmajor0_one_step": (256, 0, 0, 0, 0, 1, 0, False),
    **{f"rs_n{n}_b_{'mn' if tb else 'k'}major{s}_scale{sd}": (n, 0, tb, 0, s, 4, sd, True)
       for n in (64, 128) for tb in (0, 1) for s in SPANS for sd in ((0, 1) if s == 128 else (1,))},
}


# ---- CPU: the emulator -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def emulated():
    if emulate.unavailable():
        pytest.skip(f"no emulation: {emulate.unavailable()}")
    return emulate.build_source(kernels_text(), signatures(), GROUPS)


@needs_emulation
@pytest.mark.parametrize("name", sorted(TMA_CASES))
def test_tma_loads(emulated, name):
    got, expected = run_tma(emulated, "cpu", emulate.encode_tiled, name, seed=len(name))
    report = mismatches(got, expected, 0)
    assert not report, f"{name}: bytes (iteration, copy, tile then read-back byte) differ:\n{report}"


def test_the_reference_swizzle_permutes_chunks_within_a_pattern():
    for span in SPANS[1:]:
        offsets = np.arange(0, 8 * span, 16)
        assert sorted(swizzle(offsets, span)) == list(offsets) and (swizzle(offsets, span) != offsets).any()


@needs_emulation
def test_mbarrier_phases_wait_for_transaction_bytes(emulated):
    got, expected = run_mbarrier_tx(emulated, "cpu", emulate.encode_tiled)
    assert not mismatches(got, expected, 0), f"phase flags {got.tolist()}, expected {expected.tolist()}"


@needs_emulation
@pytest.mark.parametrize("name", sorted(TMA_STORE_CASES))
def test_tma_store(emulated, name):
    got, expected = run_tma_store(emulated, "cpu", emulate.encode_tiled, name, seed=len(name))
    assert not mismatches(got, expected, 0), f"{name}: the tensor after the store differs"


@needs_emulation
def test_a_store_reads_its_source_at_the_wait(emulated):
    """The emulator performs a bulk store as late as the hardware may read its source: at the wait_group.read that
    covers it, so a kernel that rewrites a staging buffer before that wait writes what it rewrote (wrong output)."""
    got, expected = run_tma_store(emulated, "cpu", emulate.encode_tiled, "inside_swizzle128", seed=3, late=True)
    assert not mismatches(got, expected, 0), "the store did not read its source at the wait"


@needs_emulation
@pytest.mark.parametrize("nbytes", [16, 4096, 8192])
def test_bulk_copy(emulated, nbytes):
    got, expected = run_bulk(emulated, "cpu", nbytes, seed=nbytes)
    assert not mismatches(got, expected, 0)


@needs_emulation
@pytest.mark.parametrize("name", sorted(WGMMA_CASES))
def test_wgmma(emulated, name):
    n, ta, tb, span_a, span_b, ksteps, scale_d, rs = WGMMA_CASES[name]
    got, expected = run_wgmma(emulated, "cpu", n, ta, tb, span_a, span_b, ksteps, scale_d, seed=len(name), rs=rs)
    report = mismatches(got, expected, wgmma_tolerance(expected))
    assert not report, f"{name}: D (row, col) differs:\n{report}"


@needs_emulation
def test_wgmma_chain_through_register_fragments(emulated):
    got, expected = run_chain(emulated, "cpu", seed=3)
    report = mismatches(got, expected, wgmma_tolerance(expected))
    assert not report, f"chain: D (row, col) differs:\n{report}"


ASYNC_PROBE = r"""
// Reads the accumulators before wgmma.wait_group, and (overwrite) zeroes operand A before it: the hardware
// leaves both undefined; the emulator runs the group only at the wait.
extern "C" __global__ void __launch_bounds__(128, 1) wgmma_async_probe(const uint4* a, const uint4* b, const int* cfg,
                                                                       int overwrite, float* early, float* late) {
  __shared__ __align__(1024) unsigned char sa[A_MAX];
  __shared__ __align__(1024) unsigned char sb[64 * 128];
  stage(sa, a, cfg[A_BYTES]);
  stage(sb, b, cfg[B_BYTES]);
  kdg::fence_proxy_async();
  __syncthreads();
  kdg::WgmmaAcc<64> acc;
  kdg::wgmma_zero(acc);
  kdg::wgmma_fence();
  kdg::wgmma_ss<0, 0>(acc, desc_a(sa, cfg, 0), desc_b(sb, cfg, 0), 0);
  kdg::wgmma_commit();
  if (overwrite) {
    for (int i = threadIdx.x; i < A_MAX / 16; i += 128) reinterpret_cast<uint4*>(sa)[i] = make_uint4(0, 0, 0, 0);
    __syncthreads();
  }
  store_acc(acc, early);
  kdg::wgmma_wait<0>();
  store_acc(acc, late);
}
"""


@pytest.fixture(scope="module")
def async_probe():
    if emulate.unavailable():
        pytest.skip(f"no emulation: {emulate.unavailable()}")
    return emulate.build_source(kernels_text() + ASYNC_PROBE, signatures() + [
        ("wgmma_async_probe", ["const uint4*", "const uint4*", "const int*", "int", "float*", "float*"])], GROUPS)


@needs_emulation
@pytest.mark.parametrize("overwrite", [0, 1])
def test_wgmma_is_asynchronous_until_the_wait(async_probe, overwrite):
    """Accumulators read before wait_group still hold their old values; an operand overwritten before it is
    what the product reads: both visibly wrong, as a kernel with those races would be on the GPU."""
    a, bt = random_bf16((64, 16), 5), random_bf16((64, 16), 6)
    op_a, op_b = operand(bits(a), "K", 128), operand(bits(bt), "K", 128)
    cfg = wgmma_cfg((op_a[0], 128) + op_a[1:], (op_b[0], 128) + op_b[1:])
    early, late = torch.full((64, 64), float("nan")), torch.full((64, 64), float("nan"))
    async_probe.launch("wgmma_async_probe", (1,), (128,),
                       [torch.from_numpy(op_a[0].view(np.int16)), torch.from_numpy(op_b[0].view(np.int16)),
                        torch.tensor(cfg, dtype=torch.int32), overwrite, early, late])
    product = (a.double() @ bt.double().T).numpy()
    assert (early.numpy() == 0).all(), "accumulators changed before wgmma.wait_group"
    expected = np.zeros_like(product) if overwrite else product
    report = mismatches(late.numpy(), expected, wgmma_tolerance(product))
    assert not report, f"after the wait:\n{report}"
    assert overwrite == 0 or np.abs(product).max() > 1, "the probe's product must differ from zero"


@needs_emulation
@pytest.mark.parametrize("trans", [False, True])
def test_stmatrix(emulated, trans):
    got, expected = run_stmatrix(emulated, "cpu", trans)
    report = mismatches(got.reshape(32, 16), expected.reshape(32, 16), 0)
    assert not report, f"stmatrix{' .trans' if trans else ''}: (matrix row, column) differs:\n{report}"


@needs_emulation
def test_named_barriers_order_producer_and_consumers(emulated):
    got, expected = run_named_barrier(emulated, "cpu", iters=40, blocks=2)
    assert not mismatches(got, expected, 0)


@needs_emulation
def test_setmaxnreg_split(emulated):
    got, expected = run_setmaxnreg(emulated, "cpu")
    assert not mismatches(got, expected, 0)


# Emulator-only kernels the hardware compiler rejects, or the hardware would hang or fault on: each must
# abort. name: (kernel source, threads, message, parameter types, arguments as Python source)
MISUSE = {
    "bad_count": ('extern "C" __global__ void misuse() { kdg::ptx_setmaxnreg_inc<20>(); }', 128,
                  "setmaxnreg.inc 20: the count must be a multiple of 8", [], "[]"),
    "partial_warpgroup": ('extern "C" __global__ void misuse() { kdg::ptx_setmaxnreg_dec<40>(); }', 64,
                          "warpgroup 0 has only 64 threads", [], "[]"),
    "warps_disagree": ('extern "C" __global__ void misuse() {\n'
                       "  if (threadIdx.x < 32) kdg::ptx_setmaxnreg_dec<40>(); else kdg::ptx_setmaxnreg_dec<48>();\n}",
                       128, "ran setmaxnreg.dec", [], "[]"),
    "never_waited": ('extern "C" __global__ void misuse() {\n'
                     "  __shared__ __align__(1024) unsigned char s[2048];\n  kdg::WgmmaAcc<8> d;\n"
                     "  const kdg::u64 desc = kdg::make_smem_desc(s, 128, 128, 0);\n"
                     "  kdg::wgmma_ss<0, 0>(d, desc, desc, 0);\n  kdg::wgmma_commit();\n}",
                     128, "no wgmma.wait_group covered", [], "[]"),
    "bad_named_barrier_count": ('extern "C" __global__ void misuse() { kdg::named_barrier_sync(1, 100); }', 128,
                                "multiple of 32", [], "[]"),
    "store_never_waited": ('extern "C" __global__ void misuse(const __grid_constant__ kdg::TensorMap map) {\n'
                           "  __shared__ __align__(1024) unsigned char tile[2048];\n"
                           "  kdg::tma_store_2d(&map, 0, 0, tile);\n  kdg::bulk_commit();\n}",
                           1, "exited with 1 bulk stores no cp.async.bulk.wait_group.read covered", ["kdg::TensorMap"],
                           "[emulate.encode_tiled(torch.zeros(16, 64, dtype=torch.bfloat16), (64, 16))]"),
    "misaligned_prefetch": ('extern "C" __global__ void misuse(const float* p) { kdg::prefetch_l2(p + 1, 64); }', 1,
                            "cp.async.bulk.prefetch.L2", ["const float*"], "[torch.zeros(64)]"),
    "misaligned_tma_coordinate": ('extern "C" __global__ void misuse(const __grid_constant__ kdg::TensorMap map) {\n'
                                  "  __shared__ __align__(1024) unsigned char tile[2048];\n  __shared__ kdg::u64 bar;\n"
                                  "  kdg::mbarrier_init(&bar, 1);\n  kdg::tma_load_2d(tile, &map, 4, 0, &bar);\n}",
                                  1, "innermost coordinate 4 x 2 bytes is not a multiple of 16 bytes",
                                  ["kdg::TensorMap"],
                                  "[emulate.encode_tiled(torch.zeros(16, 64, dtype=torch.bfloat16), (16, 8))]"),
}


@needs_emulation
@pytest.mark.parametrize("name", sorted(MISUSE))
def test_misuse_aborts_with_a_message(name):
    source, threads, message, params, args = MISUSE[name]
    script = textwrap.dedent(f"""
        import torch
        from kdagen.codegen import emulate
        m = emulate.build_source({source!r}, [("misuse", {params!r})], {GROUPS!r})
        m.launch("misuse", (1,), ({threads},), {args})
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).resolve().parents[1])
    assert res.returncode != 0, f"{name}: the emulator ran it to the end"
    assert message in res.stderr, f"{name}: expected {message!r} in:\n{res.stderr[-2000:]}"


# ---- host side: tensor maps and argument packing -----------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    (dict(box=(64, 16), swizzle=64), r"box\[0\] = 64 elements = 128 bytes exceeds the 64-byte swizzle span"),
    (dict(box=(4, 16)), r"box\[0\] = 4 elements = 8 bytes: the inner box must be a multiple of 16 bytes"),
    (dict(box=(64, 300)), r"box\[1\] = 300 outside 1..256"),
    (dict(box=(64, 16), swizzle=16), r"swizzle must be one of \[0, 32, 64, 128\]"),
    (dict(box=(64, 16), dims=(100, 70), strides=(100,)), r"strides\[0\] = 100 elements = 200 bytes"),
    (dict(box=(64, 16), dims=(104, 71), strides=(104,)), r"reach .* bytes"),
    (dict(box=(64,), dims=(100, 70), strides=(104,)), r"box needs 2 entries"),
    (dict(box=(64, 16), dims=(0, 70), strides=(104,)), r"dims\[0\] = 0"),
])
def test_tensor_map_arguments_are_checked(kwargs, message):
    t = torch.zeros(70, 104, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=message):
        emulate.encode_tiled(t, **kwargs)


def test_tensor_map_alignment_and_device_are_checked():
    t = torch.zeros(1000, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="not 16-byte aligned"):
        emulate.encode_tiled(t[1:], (8,), dims=(64,))
    from kdagen.runtime import encode_tiled
    with pytest.raises(ValueError, match="on cpu; tensor maps describe CUDA memory"):
        encode_tiled(t, (8,))


def test_tensor_map_is_passed_by_value_as_128_bytes():
    from kdagen.runtime import launch
    tmap = emulate.encode_tiled(torch.zeros(70, 104, dtype=torch.bfloat16), (64, 16), 128, (100, 70), (104,))
    pointers, values = launch.pack_args([tmap, 3])
    assert ctypes.sizeof(values[0]) == 128
    assert ctypes.string_at(pointers[0], 128) == tmap.data
    assert tmap.data[:4] == b"KDGT"


# ---- the same kernels through the hardware compilers -------------------------------------------------------

@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_kernels_compile_with_nvcc_without_warnings(tmp_path):
    """ptxas reports wgmma serialization and injected waits as 'info' lines (C75xx), so read all of it."""
    from kdagen.codegen.nvcc import nvcc_path, parse_report
    src = tmp_path / "sm90_primitives.cu"
    src.write_text(device_source())
    res = subprocess.run([nvcc_path(), "-cubin", "-arch=sm_90a", "-Xptxas", "-v", "-Werror", "all-warnings",
                          str(src), "-o", str(tmp_path / "out.cubin")], capture_output=True, text=True)
    text = res.stdout + res.stderr
    assert res.returncode == 0, text[-6000:]
    advisories = [line for line in text.splitlines() if "warning" in line.lower() or "(C75" in line]
    assert not advisories, "\n".join(advisories)
    report = parse_report(text)
    assert sorted(report) == sorted(name for name, _ in signatures())
    spills = {k: (r.spill_stores, r.spill_loads) for k, r in report.items() if r.spill_stores or r.spill_loads}
    assert not spills, f"spills: {spills}"


@needs_nvrtc
def test_kernels_compile_with_nvrtc():
    from kdagen import runtime
    image = runtime.compile_cubin(device_source(), "sm90_primitives.cu", "sm_90a")
    assert image[:4] == b"\x7fELF"
