// kdagen 0.1.0 generated CUDA: kda_lb5_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_mma16_sm90a (backward, further entry points)
// configuration: recurrence kda_lb5_l2_bsig (graph e0c1580ceb2fa342, decay vector in [-5.0, 0.0]), K=128 V=128, io bf16, g bf16, beta bf16, state f32, GVA 1, varlen False, state layout kv, sm_90a
// family mma16, chunk 16, exponent form factored
// kernels: dstate_starts (their launches set the grid) (grid ['N', 'HV', 8], 128 threads, 51904 B smem)
// Do not edit: rendered from templates/ by kdagen.codegen; `kdagen plan` shows the plan.

#line 2 "templates/unit.cu.j2"
#include <cuda_bf16.h>

#line 5 "templates/unit.cu.j2"
// ===== templates/common/types.cuh =====
#line 1 "templates/common/types.cuh"
// kdagen common: scalar types and conversions shared by every kernel.
// Included once per translation unit by templates/unit.cu.j2; everything lives in namespace kdg.
namespace kdg {

typedef unsigned int u32;
typedef unsigned long long u64;
typedef __nv_bfloat16 bf16;

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }

// One half of a word holding two bf16 elements (`high`: the second, at the higher address), widened exactly.
__device__ __forceinline__ float widen_bf16(u32 w, int high) {
  return __uint_as_float(high ? w & 0xffff0000u : w << 16);
}

// Store a float into a tensor element of type T (round-to-nearest for bf16).
__device__ __forceinline__ void store_f32(float* p, float x) { *p = x; }
__device__ __forceinline__ void store_f32(bf16* p, float x) { *p = __float2bfloat16_rn(x); }

// Two floats packed into one 32-bit register as bf16 (lo in the low half): the mma operand format.
__device__ __forceinline__ u32 pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<u32*>(&v);
}

// Integer ceiling division, used for chunk counts.
__device__ __forceinline__ int ceil_div(int a, int b) { return (a + b - 1) / b; }

}  // namespace kdg

// Kernels (global scope) name element types as the plan does: bf16, float.
using kdg::bf16;

#line 5 "templates/unit.cu.j2"
// ===== templates/common/ptx.cuh =====
#line 1 "templates/common/ptx.cuh"
// kdagen common: the inline PTX every family uses (mbarrier, bar.sync/arrive, shared-memory addresses),
// and nothing else. Instructions of one architecture live in sm80/ptx.cuh and sm90/ptx.cuh. The helpers
// in the other headers are built on these; the host emulation (kdagen.codegen.emulate) replaces exactly
// the ptx.cuh files (templates/emulate/<group>_ptx.cuh) to run kernels on the CPU in tests.
namespace kdg {

// Shared-memory address of a generic pointer, for the instructions that take one.
__device__ __forceinline__ u32 smem_addr(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ptx_mbarrier_init(u64* bar, int count) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" :: "r"(smem_addr(bar)), "r"(count));
}

__device__ __forceinline__ void ptx_mbarrier_arrive(u64* bar) {
  asm volatile("{\n .reg .b64 state;\n mbarrier.arrive.shared.b64 state, [%0];\n}\n"
               :: "r"(smem_addr(bar)) : "memory");
}

// True once the phase with this parity has completed (a fresh barrier reports parity 1 complete).
__device__ __forceinline__ bool ptx_mbarrier_test(u64* bar, int parity) {
  u32 done;
  asm volatile("{\n .reg .pred p;\n mbarrier.test_wait.parity.shared.b64 p, [%1], %2;\n"
               " selp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
  return done != 0;
}

__device__ __forceinline__ void ptx_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void ptx_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}

// ex2.approx.ftz.f32 and rcp.approx.ftz.f32: the special-function unit's 2^x and 1/x alone. exp2f, __expf and
// __fdividef compile to the same MUFU instruction wrapped in a test and two multiplies that keep subnormal results
// (and a branch where the caller selects); the gate and β never need those, and on the normal range the results
// are the same bits.
__device__ __forceinline__ float ptx_ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float ptx_rcp_ftz(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace kdg

// Dynamic shared memory of a kernel whose plan is above the static limit.
#define KDG_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]

#line 5 "templates/unit.cu.j2"
// ===== templates/sm80/ptx.cuh =====
#line 1 "templates/sm80/ptx.cuh"
// kdagen sm80: inline PTX of the sm_80 instruction set (also on sm_90a): mma.sync m16n8k16 (bf16) and m16n8k8
// (tf32), ldmatrix, cp.async. Emulated on the host by templates/emulate/sm80_ptx.cuh.
namespace kdg {

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d += a·b (register layouts in mma.cuh).
__device__ __forceinline__ void ptx_mma_16816(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32: d += a·b, operands fp32 registers rounded to tf32 by
// ptx_cvt_tf32 (register layouts in mma.cuh).
__device__ __forceinline__ void ptx_mma_1688_tf32(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// cvt.rna.tf32.f32: x rounded to a 10-bit mantissa, ties away from zero (the low 13 bits of the result are 0).
__device__ __forceinline__ u32 ptx_cvt_tf32(float x) {
  u32 r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// ldmatrix .x4: lane l supplies the address of row (l & 7) of 8x8 matrix (l >> 3); r[i] receives
// matrix i's elements (row l/4, columns 2(l%4), 2(l%4)+1), or with .trans (rows 2(l%4), +1; column l/4).
__device__ __forceinline__ void ptx_ldmatrix_x4(u32 (&r)[4], const void* row_ptr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(row_ptr)));
}

__device__ __forceinline__ void ptx_ldmatrix_x4_trans(u32 (&r)[4], const void* row_ptr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(row_ptr)));
}

// cp.async of 16 or 4 bytes; src_bytes = 0 zero-fills the destination without reading.
__device__ __forceinline__ void ptx_cp_async_16(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :: "r"(smem_addr(smem)), "l"(gmem), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void ptx_cp_async_4(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
               :: "r"(smem_addr(smem)), "l"(gmem), "r"(src_bytes) : "memory");
}

// One arrival on bar once all of this thread's earlier cp.async copies have landed.
__device__ __forceinline__ void ptx_cp_async_arrive(u64* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" :: "r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void ptx_cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
}

// Close this thread's group of cp.async copies issued since the last commit.
__device__ __forceinline__ void ptx_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Wait until at most N of this thread's committed groups are still in flight (the N most recent).
template <int N>
__device__ __forceinline__ void ptx_cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

}  // namespace kdg

#line 5 "templates/unit.cu.j2"
// ===== templates/common/math.cuh =====
#line 1 "templates/common/math.cuh"
// kdagen common: the scalar functions the expression emitter (kdagen.codegen.expr) writes calls to,
// and row loads into per-thread channel slices. No fast-math: every function is within a few ulp of the
// float64 value (libm's expf, logf, rsqrtf, or the MUFU forms below, each with its error bound stated).
namespace kdg {

// The fast exponential and reciprocal (≈ 2 ulp; 1 / inf = 0 for x below −88): the gate and β need no more.
// Flushing subnormals changes nothing here: e^−x below the smallest normal leaves 1 + e^−x = 1.
__device__ __forceinline__ float sigmoid(float x) { return ptx_rcp_ftz(1.f + ptx_ex2_ftz(x * -1.4426950408889634f)); }

// softplus with flash-linear-attention's threshold (x itself above it) on the special-function unit:
// softplus(x) = max(x, 0) + log1p(u) with u = e^−|x| in (0, 1], and log1p(u) = 2·atanh(s), s = u / (2 + u) ≤ 1/3,
// summed as its odd series to s^13 (the rest is below 2e-8 of the sum). u is 2^t with t = −|x|·log2(e) carried
// as t_hi + t_lo (rounding t alone would cost |t|·2^-24·ln 2 of u's precision: 20 ulp at x = −70), corrected to
// first order. Two MUFU operations and a dozen FMAs where libm's log1pf(expf(x)) spends range reductions and
// branches; a few ulp from the exact value at every x, softplus ≈ e^x included. −|x| is clamped at −128 (u is 0
// there in fp32 anyway), so t_lo stays finite for x = ±inf and |x| near the fp32 maximum; NaN passes through.
// tests/test_math_functions.py.
__device__ __forceinline__ float softplus(float x, float threshold) {
  constexpr float LOG2E_HI = 1.44269502162933349609375f, LOG2E_LO = 1.9259629891e-08f, LN2 = 0.6931471805599453f;
  const float ax = fmaxf(-fabsf(x), -128.f), t_hi = ax * LOG2E_HI;
  const float t_lo = fmaf(ax, LOG2E_LO, fmaf(ax, LOG2E_HI, -t_hi));
  const float u0 = ptx_ex2_ftz(t_hi), u = fmaf(u0, t_lo * LN2, u0);
  const float s = u * ptx_rcp_ftz(2.f + u), s2 = s * s;
  float p = 1.f / 13.f;
  p = fmaf(p, s2, 1.f / 11.f);
  p = fmaf(p, s2, 1.f / 9.f);
  p = fmaf(p, s2, 1.f / 7.f);
  p = fmaf(p, s2, 1.f / 5.f);
  p = fmaf(p, s2, 1.f / 3.f);
  const float log1p_u = 2.f * fmaf(s * s2, p, s);
  return x > threshold || x != x ? x : fmaxf(x, 0.f) + log1p_u;
}

__device__ __forceinline__ float square(float x) { return x * x; }

// N consecutive elements from p into registers (zeros when !valid); 16-byte vector loads when the
// slice allows (p must then be 16-byte aligned).
template <int N>
__device__ __forceinline__ void load_row(float (&dst)[N], const bf16* p, bool valid) {
  if (!valid) {
#pragma unroll
    for (int j = 0; j < N; ++j) dst[j] = 0.f;
    return;
  }
  if constexpr (N % 8 == 0) {
#pragma unroll
    for (int j = 0; j < N; j += 8) {
      const uint4 raw = *reinterpret_cast<const uint4*>(p + j);
      const bf16* e = reinterpret_cast<const bf16*>(&raw);
#pragma unroll
      for (int i = 0; i < 8; ++i) dst[j + i] = __bfloat162float(e[i]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) dst[j] = __bfloat162float(p[j]);
  }
}

template <int N>
__device__ __forceinline__ void load_row(float (&dst)[N], const float* p, bool valid) {
  if (!valid) {
#pragma unroll
    for (int j = 0; j < N; ++j) dst[j] = 0.f;
    return;
  }
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int j = 0; j < N; j += 4) {
      const float4 v = *reinterpret_cast<const float4*>(p + j);
      dst[j] = v.x; dst[j + 1] = v.y; dst[j + 2] = v.z; dst[j + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) dst[j] = p[j];
  }
}

// N floats from registers to N consecutive bf16 elements at p (16-byte stores when N % 8 == 0, else 4-byte
// pairs when N is even; p aligned to match).
template <int N>
__device__ __forceinline__ void store_row(bf16* p, const float (&src)[N]) {
  if constexpr (N % 8 == 0) {
#pragma unroll
    for (int j = 0; j < N; j += 8) {
      uint4 raw;
      u32* w = reinterpret_cast<u32*>(&raw);
#pragma unroll
      for (int i = 0; i < 4; ++i) w[i] = pack_bf16(src[j + 2 * i], src[j + 2 * i + 1]);
      *reinterpret_cast<uint4*>(p + j) = raw;
    }
  } else if constexpr (N % 2 == 0) {
#pragma unroll
    for (int j = 0; j < N; j += 2) *reinterpret_cast<u32*>(p + j) = pack_bf16(src[j], src[j + 1]);
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) p[j] = __float2bfloat16_rn(src[j]);
  }
}

template <int N>
__device__ __forceinline__ void store_row(float* p, const float (&src)[N]) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int j = 0; j < N; j += 4) *reinterpret_cast<float4*>(p + j) = make_float4(src[j], src[j + 1], src[j + 2], src[j + 3]);
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) p[j] = src[j];
  }
}

}  // namespace kdg

#line 5 "templates/unit.cu.j2"
// ===== templates/common/barriers.cuh =====
#line 1 "templates/common/barriers.cuh"
// kdagen common: barriers named in the plan (kdagen.plan Barrier.kind).
//   "mbarrier": a shared-memory mbarrier with an arrive count and a phase parity per completion;
//               a waiter passes `parity` = (use index) & 1, a producer waiting for a free slot it
//               has never filled passes the opposite parity (a fresh barrier counts as completed).
//   "named":    bar.sync / bar.arrive on a hardware barrier id (1..15) with a thread count.
//   "cta":      __syncthreads (named barrier 0 with every thread of the block).
// The mbarrier forms used (init, arrive, test_wait.parity) exist on sm_80 and sm_90a.
namespace kdg {

__device__ __forceinline__ void mbarrier_init(u64* bar, int count) { ptx_mbarrier_init(bar, count); }

__device__ __forceinline__ void mbarrier_arrive(u64* bar) { ptx_mbarrier_arrive(bar); }

// Spin until the phase with this parity has completed.
__device__ __forceinline__ void mbarrier_wait(u64* bar, int parity) {
  while (!ptx_mbarrier_test(bar, parity)) {
  }
}

__device__ __forceinline__ void named_barrier_sync(int id, int threads) { ptx_bar_sync(id, threads); }

__device__ __forceinline__ void named_barrier_arrive(int id, int threads) { ptx_bar_arrive(id, threads); }

}  // namespace kdg

#line 5 "templates/unit.cu.j2"
// ===== templates/common/reductions.cuh =====
#line 1 "templates/common/reductions.cuh"
// kdagen common: warp and row reductions, and the in-chunk column cumsum.
namespace kdg {

// Sum over groups of LANES lanes STRIDE apart (lanes l, l + STRIDE, ...: consecutive lanes by default; LANES ·
// STRIDE a power of two <= 32); every lane of the group gets the group's total. A token row spread over LANES
// threads reduces with this.
template <int LANES, int STRIDE = 1>
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int off = LANES / 2 * STRIDE; off >= STRIDE; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

__device__ __forceinline__ float warp_sum(float x) { return group_sum<32>(x); }

// Inclusive cumsum down the rows of a rows x cols fp32 tile in shared memory (row stride ld),
// in place; thread tid of nthreads handles columns tid, tid + nthreads, ... sequentially.
// Callers synchronise before (all rows written) and after (all columns summed).
__device__ __forceinline__ void column_cumsum(float* tile, int rows, int cols, int ld, int tid, int nthreads) {
  for (int c = tid; c < cols; c += nthreads) {
    float acc = 0.f;
    for (int r = 0; r < rows; ++r) {
      acc += tile[r * ld + c];
      tile[r * ld + c] = acc;
    }
  }
}

}  // namespace kdg

#line 5 "templates/unit.cu.j2"
// ===== templates/common/sequences.cuh =====
#line 1 "templates/common/sequences.cuh"
// kdagen common: where sequences and chunks lie on the packed token axis. One helper for every kernel:
// packed batches pass cu_seqlens (int64 [N+1]) and chunk_offsets (int32 [N+1]: each sequence's first chunk in
// the chunk-indexed workspaces); fixed-length batches pass nullptr for both and T, the tokens per sequence.
// Chunks never straddle sequences; a sequence's last chunk may be short (L < C valid rows).
namespace kdg {

struct Span {
  long long begin, end;  // tokens [begin, end)
};

// The tokens of sequence n.
__device__ __forceinline__ Span sequence_span(const long long* cu_seqlens, int T, int n) {
  if (cu_seqlens != nullptr) return {cu_seqlens[n], cu_seqlens[n + 1]};
  return {(long long)n * T, (long long)(n + 1) * T};
}

// The index of sequence n's first chunk in the workspaces.
__device__ __forceinline__ long long first_chunk(const int* chunk_offsets, int T, int C, int n) {
  return chunk_offsets != nullptr ? (long long)chunk_offsets[n] : (long long)n * ((T + C - 1) / C);
}

// Chunk ci of sequence n, for head-parallel kernels that walk a sequence's chunks: its index in the
// workspaces, its first token and its valid rows.
struct SeqChunk {
  long long index;
  long long t0;
  int L;
};

// The chunks of sequence n, its place read once (a loop over them then reads no sequence table per chunk).
struct SeqChunks {
  long long first;  // its first chunk's index in the workspaces
  Span span;
  int C;
  __device__ __forceinline__ SeqChunk at(int ci) const {
    const long long t0 = span.begin + (long long)ci * C;
    return {first + ci, t0, (int)min((long long)C, span.end - t0)};
  }
  __device__ __forceinline__ int count() const { return (int)((span.end - span.begin + C - 1) / C); }
};

__device__ __forceinline__ SeqChunks sequence_chunks(const long long* cu_seqlens, const int* chunk_offsets, int T, int C,
                                                     int n) {
  return {first_chunk(chunk_offsets, T, C, n), sequence_span(cu_seqlens, T, n), C};
}

struct ChunkAt {
  int seq;       // the sequence it belongs to
  long long t0;  // its first token
  int L;         // its valid rows (<= C)
};

// Chunk c of a chunk-parallel grid (an upper bound on the chunk count): false for a surplus CTA. Packed
// batches find the sequence by binary search over chunk_offsets (empty sequences own no chunk).
__device__ __forceinline__ bool locate_chunk(const long long* cu_seqlens, const int* chunk_offsets, int T, int N,
                                             int C, int c, ChunkAt& at) {
  if (chunk_offsets != nullptr) {
    if (c >= chunk_offsets[N]) return false;
    int lo = 0, hi = N - 1;  // the last n with chunk_offsets[n] <= c
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (chunk_offsets[mid] <= c) lo = mid; else hi = mid - 1;
    }
    at.seq = lo;
    at.t0 = cu_seqlens[lo] + (long long)(c - chunk_offsets[lo]) * C;
  } else {
    const int per_seq = (T + C - 1) / C;
    if (c >= N * per_seq) return false;
    at.seq = c / per_seq;
    at.t0 = (long long)at.seq * T + (long long)(c % per_seq) * C;
  }
  const Span s = sequence_span(cu_seqlens, T, at.seq);
  at.L = (int)min((long long)C, s.end - at.t0);
  return true;
}

// Blocks of G consecutive chunks of one sequence (the backward's checkpoints): block b of sequence n owns slot
// ⌊first_chunk(n) / G⌋ + n + b. Slots are distinct and below chunks / G + N for any batch (⌊(a + m) / G⌋ + 1 ≥
// ⌊a / G⌋ + ⌈m / G⌉), so a grid of that many CTAs covers every block with no host sync.
__device__ __forceinline__ long long block_slot(const int* chunk_offsets, int T, int C, int G, int n, int b) {
  return first_chunk(chunk_offsets, T, C, n) / G + n + b;
}

// The blocks of sequence n.
__device__ __forceinline__ int sequence_blocks(const int* chunk_offsets, int T, int C, int G, int n) {
  const long long chunks = first_chunk(chunk_offsets, T, C, n + 1) - first_chunk(chunk_offsets, T, C, n);
  return (int)((chunks + G - 1) / G);
}

// The (sequence, block) owning slot s, by binary search over the sequences' first slots: false for a slot no block
// owns (a surplus CTA).
__device__ __forceinline__ bool locate_block(const int* chunk_offsets, int T, int C, int N, int G, long long s, int& n,
                                             int& b) {
  int lo = 0, hi = N - 1;  // the last n whose first slot is <= s
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (block_slot(chunk_offsets, T, C, G, mid, 0) <= s) lo = mid; else hi = mid - 1;
  }
  n = lo;
  b = (int)(s - block_slot(chunk_offsets, T, C, G, lo, 0));
  return b < sequence_blocks(chunk_offsets, T, C, G, lo);
}

}  // namespace kdg

#line 5 "templates/unit.cu.j2"
// ===== templates/sm80/mma.cuh =====
#line 1 "templates/sm80/mma.cuh"
// kdagen common: tensor-core fragments of mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// (sm_80 and sm_90a). Lane l of a warp: g = l >> 2 (group), t = l & 3 (thread in group).
//   FragA (16x16 bf16, M x K): x[0] = (g,   2t..2t+1)  x[1] = (g+8, 2t..2t+1)
//                              x[2] = (g,   2t+8..9)   x[3] = (g+8, 2t+8..9)
//   FragB (16x8 bf16, K x N):  x[0] = (k 2t..2t+1, n g)  x[1] = (k 2t+8..9, n g)
//   FragC (16x8 f32, M x N):   x[0..1] = (g, 2t..2t+1)    x[2..3] = (g+8, 2t..2t+1)
namespace kdg {

struct FragA { u32 x[4]; };
struct FragB { u32 x[2]; };
struct FragC { float x[4]; };

__device__ __forceinline__ void frag_zero(FragC& c) {
#pragma unroll
  for (int i = 0; i < 4; ++i) c.x[i] = 0.f;
}

// d += a * b on the tensor cores (fp32 accumulation).
__device__ __forceinline__ void mma_16816(FragC& d, const FragA& a, const FragB& b) { ptx_mma_16816(d.x, a.x, b.x); }

// The accumulators of two adjacent 16x8 tiles (columns 0..7 and 8..15) are, once rounded to bf16,
// exactly the A fragment of the 16x16 tile they form: the product chains on without shared memory.
__device__ __forceinline__ FragA frag_a_from_c(const FragC& lo, const FragC& hi) {
  FragA a;
  a.x[0] = pack_bf16(lo.x[0], lo.x[1]);
  a.x[1] = pack_bf16(lo.x[2], lo.x[3]);
  a.x[2] = pack_bf16(hi.x[0], hi.x[1]);
  a.x[3] = pack_bf16(hi.x[2], hi.x[3]);
  return a;
}

// x ≈ hi + lo, both bf16: lo carries the next 8 bits of the mantissa. Products formed as
// hi·hi' + lo·hi' + hi·lo' ("bf16x3") keep close to fp32 accuracy on the bf16 tensor cores.
__device__ __forceinline__ void split_bf16(float a, float b, u32& hi, u32& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  hi = *reinterpret_cast<const u32*>(&h);
  lo = pack_bf16(a - __low2float(h), b - __high2float(h));
}

__device__ __forceinline__ void frag_a_from_c_split(const FragC& lo_cols, const FragC& hi_cols, FragA& hi, FragA& lo) {
  split_bf16(lo_cols.x[0], lo_cols.x[1], hi.x[0], lo.x[0]);
  split_bf16(lo_cols.x[2], lo_cols.x[3], hi.x[1], lo.x[1]);
  split_bf16(hi_cols.x[0], hi_cols.x[1], hi.x[2], lo.x[2]);
  split_bf16(hi_cols.x[2], hi_cols.x[3], hi.x[3], lo.x[3]);
}

// d += (ah + al)·(bh + bl), dropping only al·bl.
__device__ __forceinline__ void mma_16816_x3(FragC& d, const FragA& ah, const FragA& al, const FragB& bh,
                                             const FragB& bl) {
  mma_16816(d, al, bh);
  mma_16816(d, ah, bl);
  mma_16816(d, ah, bh);
}

// The tf32 fragments of mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (fp32 operands, no hi/lo split:
// 10 mantissa bits, rounded to nearest by ptx_cvt_tf32; the accumulator is FragC):
//   FragA8 (16x8, M x K): x[0] = (g, t)  x[1] = (g+8, t)  x[2] = (g, t+4)  x[3] = (g+8, t+4)
//   FragB8 (8x8, K x N):  x[0] = (k t, n g)  x[1] = (k t+4, n g)
struct FragA8 { u32 x[4]; };
struct FragB8 { u32 x[2]; };

__device__ __forceinline__ void mma_1688_tf32(FragC& d, const FragA8& a, const FragB8& b) {
  ptx_mma_1688_tf32(d.x, a.x, b.x);
}

// Row (0..15) and column (0..7) of accumulator element i (0..3) held by this lane.
__device__ __forceinline__ int frag_c_row(int lane, int i) { return (lane >> 2) + ((i >> 1) << 3); }
__device__ __forceinline__ int frag_c_col(int lane, int i) { return ((lane & 3) << 1) + (i & 1); }

}  // namespace kdg

#line 5 "templates/unit.cu.j2"
// ===== templates/sm80/ldmatrix.cuh =====
#line 1 "templates/sm80/ldmatrix.cuh"
// kdagen common: mma fragment loads from shared memory (ldmatrix for bf16 tiles and for rounded or scaled fp32
// ones as tf32; plain loads where fp32 is split into bf16 hi + lo). Every tile is addressed by its top-left element
// `base` and a leading dimension `ld` in elements; where ldmatrix reads it, base and every row must be 16-byte
// aligned (bf16: ld a multiple of 8, padded by 8 to avoid bank conflicts; fp32: ld a multiple of 4, ≡ 4 mod 32).
namespace kdg {

// A (16x16, M x K) stored row-major: element (m, k) at base[m * ld + k].
__device__ __forceinline__ FragA load_frag_a(const bf16* base, int ld, int lane) {
  const int mi = lane >> 3;
  const bf16* p = base + ((mi & 1) * 8 + (lane & 7)) * ld + (mi >> 1) * 8;
  FragA a;
  ptx_ldmatrix_x4(a.x, p);
  return a;
}

// A (16x16, M x K) stored transposed: element (m, k) at base[k * ld + m].
__device__ __forceinline__ FragA load_frag_a_trans(const bf16* base, int ld, int lane) {
  const int mi = lane >> 3;
  const bf16* p = base + ((mi >> 1) * 8 + (lane & 7)) * ld + (mi & 1) * 8;
  FragA a;
  ptx_ldmatrix_x4_trans(a.x, p);
  return a;
}

// Two B fragments (K 16 x N 16: b[0] holds columns n 0..7, b[1] columns 8..15) from storage
// where element (k, n) sits at base[n * ld + k] ("N x K row-major", e.g. the keys of k·kᵀ).
__device__ __forceinline__ void load_frag_b_nk(FragB (&b)[2], const bf16* base, int ld, int lane) {
  const int mi = lane >> 3;
  const bf16* p = base + ((mi >> 1) * 8 + (lane & 7)) * ld + (mi & 1) * 8;
  u32 r[4];
  ptx_ldmatrix_x4(r, p);
  b[0].x[0] = r[0]; b[0].x[1] = r[1];
  b[1].x[0] = r[2]; b[1].x[1] = r[3];
}

// Two B fragments (K 16 x N 16) from storage where element (k, n) sits at base[k * ld + n]
// ("K x N row-major", e.g. the value rows of a chunk): ldmatrix with .trans.
__device__ __forceinline__ void load_frag_b_kn(FragB (&b)[2], const bf16* base, int ld, int lane) {
  const int mi = lane >> 3;
  const bf16* p = base + ((mi & 1) * 8 + (lane & 7)) * ld + (mi >> 1) * 8;
  u32 r[4];
  ptx_ldmatrix_x4_trans(r, p);
  b[0].x[0] = r[0]; b[0].x[1] = r[1];
  b[1].x[0] = r[2]; b[1].x[1] = r[3];
}

// A (16x16, M x K) split into bf16 hi + lo from row-major fp32 storage: element (m, k) at base[m * ld + k].
// ld ≡ 8 (mod 32) keeps the 8-byte loads free of bank conflicts.
__device__ __forceinline__ void load_frag_a_split(FragA& hi, FragA& lo, const float* base, int ld, int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float* r = base + (g + 8 * (i & 1)) * ld + 2 * t + 8 * (i >> 1);
    split_bf16(r[0], r[1], hi.x[i], lo.x[i]);
  }
}

// Two B fragments (K 16 x N 16) split into bf16 hi + lo from fp32 storage where element (k, n) sits
// at base[n * ld + k] (e.g. Aᵀ from a row-major fp32 A): plain shared loads, no ldmatrix.
__device__ __forceinline__ void load_frag_b_nk_split(FragB (&hi)[2], FragB (&lo)[2], const float* base, int ld,
                                                     int lane) {
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    const float* r = base + (nt * 8 + g) * ld + 2 * t;
    split_bf16(r[0], r[1], hi[nt].x[0], lo[nt].x[0]);
    split_bf16(r[8], r[9], hi[nt].x[1], lo[nt].x[1]);
  }
}

// One B fragment (K 16 x N 8) split into bf16 hi + lo from fp32 storage where element (k, n) sits at
// base[k * ld + n] ("K x N row-major", e.g. a column slab of a row-major fp32 matrix); ld ≡ 8 (mod 32)
// keeps each load within two lanes per bank.
__device__ __forceinline__ void load_frag_b_kn_split(FragB& hi, FragB& lo, const float* base, int ld, int lane) {
  const int g = lane >> 2, t = lane & 3;
  const float* r = base + 2 * t * ld + g;
  split_bf16(r[0], r[ld], hi.x[0], lo.x[0]);
  split_bf16(r[8 * ld], r[9 * ld], hi.x[1], lo.x[1]);
}

// The tf32 fragments from fp32 shared memory by ldmatrix; ld ≡ 4 (mod 32) keeps each 8-row matrix free of bank
// conflicts. x rounded as cvt.rna.tf32 rounds it, kept as a float (its low 13 bits zero): a tile stored so gives
// its tf32 fragments as stored (load_frag_a8_rounded), one conversion per element where there was one per use.
__device__ __forceinline__ float round_tf32(float x) { return __uint_as_float(ptx_cvt_tf32(x)); }

// A (16x8, M x K) stored row-major, element (m, k) at base[m * ld + k], already rounded to tf32 (round_tf32):
// the fragments are the stored bits. One ldmatrix.x4 moves them: read as b16 pairs, an 8-row matrix of four fp32
// columns lands one element per lane at (row lane/4, column lane%4), the tf32 A layout; matrices (rows 0-7 | 8-15)
// × (columns 0-3 | 4-7) give x[0..3]. Rows must be 16-byte aligned.
__device__ __forceinline__ void load_frag_a8_rounded(FragA8& a, const float* base, int ld, int lane) {
  const int mi = lane >> 3;
  ptx_ldmatrix_x4(a.x, base + ((mi & 1) * 8 + (lane & 7)) * ld + (mi >> 1) * 4);
}

// Two B fragments (K 8 x N 16: b[0] holds columns n 0..7, b[1] columns 8..15) where element (k, n) sits at
// base[n * ld + k], each element times scale[k] (scale may be null), rounded to tf32 here: one ldmatrix.x4 (as
// load_frag_a8_rounded: the matrices (n 0-7 | 8-15) × (k 0-3 | 4-7); rows 16-byte aligned), then the scale and
// the conversion.
__device__ __forceinline__ void load_frag_b8x2_nk(FragB8 (&b)[2], const float* base, int ld, const float* scale,
                                                  int lane) {
  const int mi = lane >> 3, t = lane & 3;
  u32 r[4];
  ptx_ldmatrix_x4(r, base + ((mi >> 1) * 8 + (lane & 7)) * ld + (mi & 1) * 4);
  const float s0 = scale ? scale[t] : 1.f, s4 = scale ? scale[t + 4] : 1.f;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    b[nt].x[0] = ptx_cvt_tf32(scale ? __uint_as_float(r[2 * nt]) * s0 : __uint_as_float(r[2 * nt]));
    b[nt].x[1] = ptx_cvt_tf32(scale ? __uint_as_float(r[2 * nt + 1]) * s4 : __uint_as_float(r[2 * nt + 1]));
  }
}

// An accumulator tile (16 x 8 fp32) stored row-major: element (m, n) at base[m * ld + n].
__device__ __forceinline__ void store_frag_c(const FragC& c, float* base, int ld, int lane) {
#pragma unroll
  for (int i = 0; i < 4; ++i) base[frag_c_row(lane, i) * ld + frag_c_col(lane, i)] = c.x[i];
}

// As load_frag_b_nk_split, each element first multiplied by scale[k], a factor per contraction index (scale
// points at the 16 factors of this k slab): a per-channel decay between two blocks of a chunk.
__device__ __forceinline__ void load_frag_b_nk_split_scaled(FragB (&hi)[2], FragB (&lo)[2], const float* base, int ld,
                                                            const float* scale, int lane) {
  const int g = lane >> 2, t = lane & 3;
  const float s0 = scale[2 * t], s1 = scale[2 * t + 1], s8 = scale[2 * t + 8], s9 = scale[2 * t + 9];
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    const float* r = base + (nt * 8 + g) * ld + 2 * t;
    split_bf16(r[0] * s0, r[1] * s1, hi[nt].x[0], lo[nt].x[0]);
    split_bf16(r[8] * s8, r[9] * s9, hi[nt].x[1], lo[nt].x[1]);
  }
}

}  // namespace kdg

#line 5 "templates/unit.cu.j2"
// ===== templates/sm80/copies.cuh =====
#line 1 "templates/sm80/copies.cuh"
// kdagen common: global -> shared copies.
// cp.async (sm_80+) moves 16 bytes without staging through registers; a false `valid` zero-fills
// the destination instead of reading (tail rows of a chunk). Completion is signalled either by
// cp_async_wait_all() or, for a pipeline, by cp_async_arrive(bar) on the stage's "ready" mbarrier:
// each calling thread contributes one arrival once all of its earlier copies have landed; or by commit groups
// (cp_async_commit, cp_async_wait_pending).
namespace kdg {

__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  ptx_cp_async_16(smem, gmem, valid ? 16 : 0);
}

__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, bool valid) {
  ptx_cp_async_4(smem, gmem, valid ? 4 : 0);
}

__device__ __forceinline__ void cp_async_arrive(u64* bar) { ptx_cp_async_arrive(bar); }

__device__ __forceinline__ void cp_async_wait_all() { ptx_cp_async_wait_all(); }

// Groups, for a ring filled several stages ahead: commit after a stage's copies; cp_async_wait_pending<N>() returns
// once all but this thread's N most recent groups have landed.
__device__ __forceinline__ void cp_async_commit() { ptx_cp_async_commit(); }

template <int N>
__device__ __forceinline__ void cp_async_wait_pending() { ptx_cp_async_wait_group<N>(); }

// Copy `rows` x `row_bytes` (a multiple of 16) from global (row stride gstride bytes) into shared
// (row stride sstride bytes) with cp.async, threads [first, first + nthreads) taking 16-byte pieces
// round-robin; rows >= valid_rows are zero-filled.
__device__ __forceinline__ void cp_async_tile(void* smem, int sstride, const void* gmem, long long gstride,
                                              int rows, int row_bytes, int valid_rows, int tid, int nthreads) {
  const int per_row = row_bytes / 16;
  for (int i = tid; i < rows * per_row; i += nthreads) {
    const int r = i / per_row, c = (i % per_row) * 16;
    const bool ok = r < valid_rows;
    const char* src = static_cast<const char*>(gmem) + (ok ? r * gstride + c : 0);
    cp_async_16(static_cast<char*>(smem) + r * sstride + c, src, ok);
  }
}

}  // namespace kdg

#line 4 "templates/mma16/dstate_pass.cu.j2"
// ===== dstate_pass: dstate_pass, the reverse dS chain and its checkpoints =====
// grid (N sequences, HV heads, V / 16 value slices), 128 threads (role "all"), chunks last to first: the value
// columns of dS evolve independently, so each CTA carries its 16 rows alone; warp w holds key part r = w mod 4 of
// the m16 row tile w / 4.
// Per chunk only what the next dS needs (dstate_chain): each warp's part of dVn, the parts summed through
// shared memory, β⊙dX, each warp's part of the dS update; then chunk c − 2's tiles are issued into a three-stage
// ring (they land while chunk c − 1 computes). Barrier "sync" (__syncthreads, twice per chunk): chunk c's stage landed and chunk c + 1's
// is free; the dVn parts are written. At the top of each block's last chunk (8 chunks a block) dSᵀ goes to
// ws_dstate_blocks[block_slot] in fp32: recurrence_bwd restarts every block from there. The pass stops at block 0's
// checkpoint; block 0's chunks, and dh0, are recurrence_bwd's. Its further entry point, the C pass of a training
// call cut into segments (kernel.entries, docs/segments.md §6), writes no checkpoint, runs through block 0 too and
// writes the dS entering the sequence into dstate_start: from dht = 0 that is the segment's C, the part of its
// dS_in that does not pass through its end. The switch is a compile-time constant: the ordinary pass carries none
// of it (a run-time bound cost it 10-20%).

namespace kdg_dstate_pass {
using namespace kdg;

// key and value head dims; chunk: one m16 tile of tokens; ws_decay_total per (chunk, head): K values per channel
// (KDA) or 1 per head (GDN); dht stored [V, K] (state_v_first) or [K, V]
constexpr int K = 128, V = 128, C = 16, KD = 128, BLOCK = 8;
constexpr bool STATE_V_FIRST = false;
typedef float cc_t;  // A and Mqk in the forward workspace

constexpr int VS = 16;   // value rows of this CTA's slice
constexpr int ROW_TILES = VS / 16;     // m16 tiles of value rows
constexpr int NW = ROW_TILES * 4;   // warps: one per (row tile, key part)
constexpr int RT = 128;
// shared-memory row strides (bf16 elements) of the plan's [.][K], [.][V] and [.][C] tiles
constexpr int LDK = 136, LDV = 24, LDC = 24;
constexpr int CC_PER_THREAD = (C * C + RT - 1) / RT;   // elements of A (and of Mqk) a thread carries to the next stage
constexpr int DT_PER_THREAD = (K + RT - 1) / RT;  // and of decay_total
static_assert(RT == 32 * NW && VS % 16 == 0 && V % VS == 0, "m16 tiles of value rows");
static_assert(C <= RT, "β in one pass of the threads");

__device__ __forceinline__ int state_index(int k, int v) { return STATE_V_FIRST ? v * K + k : k * V + v; }

#line 1 "templates/mma16/dstate_chain.cuh.j2"
// ---- the dS chain: one chunk's step of the reverse recurrence. dstate_pass and recurrence_bwd both call these,
//      so recurrence_bwd, restarting from dstate_pass's checkpoints, computes every dS bit for bit alike ----------
// dS = ∂L/∂S lives in fp32 registers as dSᵀ, 16 value rows per warp, in tiles of 16 rows × 8 key columns.

// The bf16 residuals x − bf16(x) of two adjacent accumulator tiles, as an A fragment: frag_a_from_c(f0, f1) +
// frag_a_residual(f0, f1) carries ~16 mantissa bits of an operand whose bf16 rounding the result cannot absorb.
__device__ __forceinline__ float bf16_residual(float x) { return x - __bfloat162float(__float2bfloat16_rn(x)); }

__device__ __forceinline__ FragA frag_a_residual(const FragC& f0, const FragC& f1) {
  FragA a;
  a.x[0] = pack_bf16(bf16_residual(f0.x[0]), bf16_residual(f0.x[1]));
  a.x[1] = pack_bf16(bf16_residual(f0.x[2]), bf16_residual(f0.x[3]));
  a.x[2] = pack_bf16(bf16_residual(f1.x[0]), bf16_residual(f1.x[1]));
  a.x[3] = pack_bf16(bf16_residual(f1.x[2]), bf16_residual(f1.x[3]));
  return a;
}

__device__ __forceinline__ FragC frag_neg(FragC f) {
#pragma unroll
  for (int e = 0; e < 4; ++e) f.x[e] = -f.x[e];
  return f;
}

// (e) dVnᵀ = dOᵀ·Mqk + dhᵀ·k_to_endᵀ, dh as bf16 hi + lo: a per-head decay's gradient sums k̂⊙b_kr terms that
//     cancel, and dh's bf16 rounding alone took it past 0.02 for 1 seed in 16 (float64 model of the kernel).
//     The key contraction is split in DVN_PARTS parts (the plan's dvn_parts), each its own accumulator, added
//     in a fixed tree order: dstate_pass gives each part to a warp, recurrence_bwd runs them all in one warp,
//     both with these functions, so the sums are the same bits. adO: the A fragment (m = v, k = token i) = dO[i][v] of the
//     warp's rows; Mqk [C][LDC], k_to_end [C][LDK].
constexpr int DVN_PARTS = 4;
constexpr int PART_KS = K / 16 / DVN_PARTS;  // 16-column key steps per part
constexpr int PART_TILES = 2 * PART_KS;      // dS tiles (8 columns each) per part
static_assert(K % (16 * DVN_PARTS) == 0 && (DVN_PARTS & (DVN_PARTS - 1)) == 0,
              "the key parts tile by 16 and pair off in the sum's tree");

// Part r of dVnᵀ: dS holds the part's PART_TILES tiles (columns 16·PART_KS·r ...); part 0 starts from dOᵀ·Mqk.
__device__ __forceinline__ void chain_dvn_part(const FragC* dS, int r, const FragA& adO, const bf16* Mqk,
                                               const bf16* k_to_end, int lane, FragC (&P)[2]) {
  frag_zero(P[0]);
  frag_zero(P[1]);
  if (r == 0) {
    FragB b[2];
    load_frag_b_kn(b, Mqk, LDC, lane);                                      // (k = i, n = j) = Mqk[i][j]
    mma_16816(P[0], adO, b[0]);
    mma_16816(P[1], adO, b[1]);
  }
#pragma unroll
  for (int ks = 0; ks < PART_KS; ++ks) {
    const FragA hi = frag_a_from_c(dS[2 * ks], dS[2 * ks + 1]);
    const FragA lo = frag_a_residual(dS[2 * ks], dS[2 * ks + 1]);
    FragB b[2];
    load_frag_b_nk(b, k_to_end + (r * PART_KS + ks) * 16, LDK, lane);      // (k = key channel, n = j) = k_to_end[j][k]
    mma_16816(P[0], hi, b[0]);
    mma_16816(P[1], hi, b[1]);
    mma_16816(P[0], lo, b[0]);
    mma_16816(P[1], lo, b[1]);
  }
}

// dVnᵀ from the parts, added pairwise in the one tree order both kernels use ((P0 + P1) + (P2 + P3) for four).
__device__ __forceinline__ void chain_dvn_sum(const FragC (&P)[DVN_PARTS][2], FragC (&dVn)[2]) {
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float s[DVN_PARTS];
#pragma unroll
      for (int r = 0; r < DVN_PARTS; ++r) s[r] = P[r][nt].x[e];
#pragma unroll
      for (int w = 1; w < DVN_PARTS; w *= 2)
#pragma unroll
        for (int r = 0; r + w < DVN_PARTS; r += 2 * w) s[r] += s[r + w];
      dVn[nt].x[e] = s[0];
    }
}

// (f) dXᵀ = dVnᵀ·A    (g) (β⊙dX)ᵀ, columns i = tokens. A [C][LDC], beta [C].
__device__ __forceinline__ void chain_dx(const FragC (&dVn)[2], const bf16* A, const float* beta, int lane,
                                         FragC (&dX)[2], FragC (&bdX)[2]) {
  frag_zero(dX[0]);
  frag_zero(dX[1]);
  const FragA a = frag_a_from_c(dVn[0], dVn[1]);
  FragB b[2];
  load_frag_b_kn(b, A, LDC, lane);                                          // (k = i, n = j) = A[i][j]
  mma_16816(dX[0], a, b[0]);
  mma_16816(dX[1], a, b[1]);
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) bdX[nt].x[e] = dX[nt].x[e] * beta[nt * 8 + frag_c_col(lane, e)];
}

// (k) dSᵀ ← dhᵀ·diag(decay_total) + dOᵀ·q_decayed − (β⊙dX)ᵀ·k_decayed for NT tiles of dS, columns 8·t0 ...
//     (each tile's update is independent: any split of the tiles gives the same bits). q_decayed, k_decayed
//     [C][LDK], decay_total [K].
template <int NT>
__device__ __forceinline__ void chain_dstate(FragC* dS, int t0, const FragA& adO, const FragC (&bdX)[2],
                                             const bf16* q_decayed, const bf16* k_decayed, const float* decay_total,
                                             int lane) {
  static_assert(NT % 2 == 0, "tiles go in pairs (one 16-column operand)");
  const FragA anbdX = frag_a_from_c(frag_neg(bdX[0]), frag_neg(bdX[1]));
#pragma unroll
  for (int np = 0; np < NT / 2; ++np) {
    FragB bq[2], bk[2];
    const int col = (t0 + 2 * np) * 8;
    load_frag_b_kn(bq, q_decayed + col, LDK, lane);                        // (k = i, n = key channel) = q_decayed[i][n]
    load_frag_b_kn(bk, k_decayed + col, LDK, lane);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      FragC& d = dS[2 * np + half];
#pragma unroll
      for (int e = 0; e < 4; ++e) d.x[e] *= decay_total[col + half * 8 + frag_c_col(lane, e)];
      mma_16816(d, adO, bq[half]);
      mma_16816(d, anbdX, bk[half]);
    }
  }
}

// A checkpoint of dSᵀ: fp32 [V][K] per (slot, head); NT tiles of this warp's rows v0.., columns 8·t0 ...; stored
// exactly, so a restart is exact.
template <int NT>
__device__ __forceinline__ void store_dstate(float* dst, const FragC* dS, int v0, int t0, int lane) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; e += 2)
      *reinterpret_cast<float2*>(dst + (v0 + frag_c_row(lane, e)) * K + (t0 + nt) * 8 + frag_c_col(lane, e)) =
          make_float2(dS[nt].x[e], dS[nt].x[e + 1]);
}

template <int NT>
__device__ __forceinline__ void load_dstate(FragC* dS, const float* src, int v0, int t0, int lane) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
      const float2 x = *reinterpret_cast<const float2*>(src + (v0 + frag_c_row(lane, e)) * K + (t0 + nt) * 8 +
                                                        frag_c_col(lane, e));
      dS[nt].x[e] = x.x;
      dS[nt].x[e + 1] = x.y;
    }
}
#line 42 "templates/mma16/dstate_pass.cu.j2"
static_assert(NW == ROW_TILES * DVN_PARTS, "a warp per part of the dVn contraction of each row tile");

// A chunk's fp32 workspace values, held in registers from their loads (issued before this chunk's math, which
// hides their latency) to their stores into the next stage (after it). A and Mqk are masked to L×L as
// recurrence_bwd masks them, so both kernels read the same operands.
struct StageScalars {
  float A[CC_PER_THREAD], Mqk[CC_PER_THREAD];
  float beta, decay_total[DT_PER_THREAD];
};

__device__ __forceinline__ StageScalars load_scalars(const SeqChunk& p, int h, int HV, const cc_t* ws_A,
                                                     const cc_t* ws_Mqk, const float* ws_beta,
                                                     const float* ws_decay_total, int tid) {
  const long long ws = p.index * HV + h;
  StageScalars r;
#pragma unroll
  for (int j = 0; j < CC_PER_THREAD; ++j) {
    const int idx = tid + j * RT, i = idx / C, jj = idx % C;
    const bool in = idx < C * C && i < p.L && jj < p.L;
    r.A[j] = in ? to_f32(ws_A[ws * C * C + idx]) : 0.f;
    r.Mqk[j] = in ? to_f32(ws_Mqk[ws * C * C + idx]) : 0.f;
  }
  r.beta = tid < p.L ? ws_beta[ws * C + tid] : 0.f;
#pragma unroll
  for (int j = 0; j < DT_PER_THREAD; ++j) {
    const int k = tid + j * RT;
    r.decay_total[j] = k < K ? ws_decay_total[ws * KD + (KD == 1 ? 0 : k)] : 0.f;
  }
  return r;
}

__device__ __forceinline__ void store_scalars(const StageScalars& r, bf16* A, bf16* Mqk, float* beta,
                                              float* decay_total, int tid) {
#pragma unroll
  for (int j = 0; j < CC_PER_THREAD; ++j) {
    const int idx = tid + j * RT, i = idx / C, jj = idx % C;
    if (idx < C * C) {
      A[i * LDC + jj] = __float2bfloat16_rn(r.A[j]);
      Mqk[i * LDC + jj] = __float2bfloat16_rn(r.Mqk[j]);
    }
  }
  if (tid < C) beta[tid] = r.beta;
#pragma unroll
  for (int j = 0; j < DT_PER_THREAD; ++j)
    if (tid + j * RT < K) decay_total[tid + j * RT] = r.decay_total[j];
}

}  // namespace kdg_dstate_pass

#line 94 "templates/mma16/dstate_pass.cu.j2"
extern "C" __global__ void __launch_bounds__(128, 1) dstate_starts(
    const bf16* __restrict__ dout,
#line 958 "kda_lb5_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_mma16_sm90a/backward_entries.cu"
    const bf16* __restrict__ ws_q_decayed,
    const bf16* __restrict__ ws_k_decayed,
    const bf16* __restrict__ ws_k_to_end,
    const float* __restrict__ ws_decay_total,
    const float* __restrict__ ws_A,
    const float* __restrict__ ws_Mqk,
    const float* __restrict__ ws_beta,
    const float* __restrict__ dht,
    float* __restrict__ ws_dstate_blocks,
    float* __restrict__ grad_h0,
    float* __restrict__ dstate_start,
    const long long* __restrict__ cu_seqlens,
    const int* __restrict__ chunk_offsets,
    int HV) {
#line 96 "templates/mma16/dstate_pass.cu.j2"
  using namespace kdg_dstate_pass;
#line 975 "kda_lb5_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_mma16_sm90a/backward_entries.cu"
  // shared memory: 51904 B, dynamic (above the static limit)
  KDG_DYNAMIC_SMEM(smem_raw);
  bf16* const s_k_decayed = reinterpret_cast<bf16*>(smem_raw + 0);  // k_decayed [16 x 128] bf16, ld 136, 3 stages
  [[maybe_unused]] constexpr int ld_k_decayed = 136;
  constexpr int stride_k_decayed = 2176;  // elements per stage / warp copy
  bf16* const s_k_to_end = reinterpret_cast<bf16*>(smem_raw + 13056);  // k_to_end [16 x 128] bf16, ld 136, 3 stages
  [[maybe_unused]] constexpr int ld_k_to_end = 136;
  constexpr int stride_k_to_end = 2176;  // elements per stage / warp copy
  bf16* const s_q_decayed = reinterpret_cast<bf16*>(smem_raw + 26112);  // q_decayed [16 x 128] bf16, ld 136, 3 stages
  [[maybe_unused]] constexpr int ld_q_decayed = 136;
  constexpr int stride_q_decayed = 2176;  // elements per stage / warp copy
  bf16* const s_dO = reinterpret_cast<bf16*>(smem_raw + 39168);  // dO [16 x 16] bf16, ld 24, 3 stages
  [[maybe_unused]] constexpr int ld_dO = 24;
  constexpr int stride_dO = 384;  // elements per stage / warp copy
  bf16* const s_A = reinterpret_cast<bf16*>(smem_raw + 41472);  // A [16 x 16] bf16, ld 24, 3 stages
  [[maybe_unused]] constexpr int ld_A = 24;
  constexpr int stride_A = 384;  // elements per stage / warp copy
  bf16* const s_Mqk = reinterpret_cast<bf16*>(smem_raw + 43776);  // Mqk [16 x 16] bf16, ld 24, 3 stages
  [[maybe_unused]] constexpr int ld_Mqk = 24;
  constexpr int stride_Mqk = 384;  // elements per stage / warp copy
  float* const s_beta = reinterpret_cast<float*>(smem_raw + 46080);  // beta [16] f32, ld 16, 3 stages
  constexpr int stride_beta = 16;  // elements per stage / warp copy
  float* const s_decay_total = reinterpret_cast<float*>(smem_raw + 46272);  // decay_total [128] f32, ld 128, 3 stages
  constexpr int stride_decay_total = 128;  // elements per stage / warp copy
  float* const s_dvn_parts = reinterpret_cast<float*>(smem_raw + 47808);  // dvn_parts [4 x 32 x 8] f32, ld 8
  [[maybe_unused]] constexpr int ld_dvn_parts = 8;
#line 98 "templates/mma16/dstate_pass.cu.j2"
  static_assert(ld_k_decayed == LDK && ld_k_to_end == LDK && ld_q_decayed == LDK && ld_dO == LDV && ld_A == LDC &&
                ld_Mqk == LDC, "the plan's row strides are the ones the code uses");
  const int n = blockIdx.x, h = blockIdx.y, slice = blockIdx.z * VS;  // the slice's value rows slice..
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int rt = warp / DVN_PARTS, part_of_k = warp % DVN_PARTS;
  const int v0 = slice + rt * 16, t0 = part_of_k * PART_TILES;             // this warp's rows v0.. and tiles t0..
  // the sequence's place, read once: the loop's copies are addressed from it (a read of cu_seqlens per chunk sat on
  // the chain's path; the compiler cannot hoist it past the checkpoint stores)
  const SeqChunks seq = sequence_chunks(cu_seqlens, chunk_offsets, 0, C, n);
  const int nchunks = seq.count();
  const long long sh = (long long)(n * HV + h) * K * V;       // (sequence, head) block of dht / dh0

#line 15 "templates/skeleton.j2"
  // ---- step dstate_in (all, vrows): dSᵀ rows of this warp from dht (or zeros) ----
#line 111 "templates/mma16/dstate_pass.cu.j2"
  FragC dS[PART_TILES];                          // dSᵀ: element (v0 + row, 8·(t0 + nt) + col)
#pragma unroll
  for (int nt = 0; nt < PART_TILES; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      dS[nt].x[e] = dht == nullptr ? 0.f
                                   : dht[sh + state_index((t0 + nt) * 8 + frag_c_col(lane, e), v0 + frag_c_row(lane, e))];

  if (nchunks == 0) {                            // an empty sequence has no block: its dh0 is dht
#line 15 "templates/skeleton.j2"
    // ---- step dstate_out (all, thread): an empty sequence's dh0 is its dht (recurrence_bwd has no block there; slice 0 copies it) ----
#line 121 "templates/mma16/dstate_pass.cu.j2"
    float* out = dstate_start;
    if (out != nullptr && blockIdx.z == 0)
      for (int idx = tid; idx < K * V; idx += RT) out[sh + idx] = dht == nullptr ? 0.f : dht[sh + idx];
    return;
  }
  // the first chunk the pass runs: block 0's first (the C pass) or block 1's
  constexpr int stop = 0;

  // The chunks of this pass are a ring of STAGES stages filled DEPTH chunks ahead: chunk ci in stage
  // (nchunks − 1 − ci) mod STAGES. Copies are issued DEPTH iterations before their use, so their latency hides
  // behind the chain's work; the fp32 values travel in registers and are stored the iteration before their use.
  constexpr int STAGES = 3, DEPTH = STAGES - 1;
  static_assert(DEPTH == 2, "the register hand-off below holds two chunks' fp32 values");
  auto stage_of = [&](int ci) { return (nchunks - 1 - ci) % STAGES; };
  // the tiles of chunk ci into its stage: cp.async now (rows >= L zero-filled) as one commit group; the fp32
  // values returned (zeros when the pass does not run chunk ci)
  auto issue_tiles = [&](int ci) {
    StageScalars r{};
    if (ci >= stop) {
      const int st = stage_of(ci);
      const SeqChunk p = seq.at(ci);
      const long long ws = p.index * HV + h;
      cp_async_tile(s_k_decayed + st * stride_k_decayed, LDK * 2, ws_k_decayed + ws * C * K, K * 2, C, K * 2, p.L, tid, RT);
      cp_async_tile(s_k_to_end + st * stride_k_to_end, LDK * 2, ws_k_to_end + ws * C * K, K * 2, C, K * 2, p.L, tid, RT);
      cp_async_tile(s_q_decayed + st * stride_q_decayed, LDK * 2, ws_q_decayed + ws * C * K, K * 2, C, K * 2, p.L, tid, RT);
      cp_async_tile(s_dO + st * stride_dO, LDV * 2, dout + (p.t0 * HV + h) * V + slice, (long long)HV * V * 2, C, VS * 2,
                    p.L, tid, RT);
      r = load_scalars(p, h, HV, ws_A, ws_Mqk, ws_beta, ws_decay_total, tid);
    }
    cp_async_commit();                           // one group per chunk, empty past the pass's last
    return r;
  };
  auto store_stage = [&](const StageScalars& r, int ci) {
    const int st = stage_of(ci);
    store_scalars(r, s_A + st * stride_A, s_Mqk + st * stride_Mqk, s_beta + st * stride_beta,
                  s_decay_total + st * stride_decay_total, tid);
  };
#line 15 "templates/skeleton.j2"
  // ---- step prefill (all, tile): the pass's first two chunks into the first two stages of the ring ----
#line 159 "templates/mma16/dstate_pass.cu.j2"
  StageScalars ahead;                            // chunk ci − 1's fp32 values, loaded an iteration ago
  if (nchunks > stop) {
    store_stage(issue_tiles(nchunks - 1), nchunks - 1);
    ahead = issue_tiles(nchunks - 2);
  }

  for (int ci = nchunks - 1;; --ci) {
#line 15 "templates/skeleton.j2"
    // ---- step checkpoint (all, vrows): at the top of a block's last chunk: dSᵀ, the gradient of the state leaving the block ----
#line 167 "templates/mma16/dstate_pass.cu.j2"
    if (stop > 0 && (ci == nchunks - 1 || ci % BLOCK == BLOCK - 1))
      store_dstate<PART_TILES>(ws_dstate_blocks + (block_slot(chunk_offsets, 0, C, BLOCK, n, ci / BLOCK) * HV + h) * V * K, dS,
                               v0, t0, lane);
    if (ci < stop) break;                        // block 0 is recurrence_bwd's (but the C pass's)
    const int st = stage_of(ci);
    cp_async_wait_pending<DEPTH - 1>();          // chunk ci's group landed (chunk ci − 1's may be in flight)
    __syncthreads();                             // barrier "sync": stage st landed, chunk ci + 1's stage is free

#line 15 "templates/skeleton.j2"
    // ---- step dvn_part (all, kpart): this warp's key part of dVnᵀ = dOᵀ·Mqk + (dh_hi + dh_lo)ᵀ·k_to_endᵀ ----
#line 176 "templates/mma16/dstate_pass.cu.j2"
    const FragA adO = load_frag_a_trans(s_dO + st * stride_dO + rt * 16, LDV, lane);   // (m = v, k = token i) = dO[i][v]
    {
      FragC mine[2];
      chain_dvn_part(dS, part_of_k, adO, s_Mqk + st * stride_Mqk, s_k_to_end + st * stride_k_to_end, lane, mine);
      float4* out = reinterpret_cast<float4*>(s_dvn_parts + (warp * 32 + lane) * 8);
      out[0] = make_float4(mine[0].x[0], mine[0].x[1], mine[0].x[2], mine[0].x[3]);
      out[1] = make_float4(mine[1].x[0], mine[1].x[1], mine[1].x[2], mine[1].x[3]);
    }
    __syncthreads();                             // barrier "sync": every part is written

#line 15 "templates/skeleton.j2"
    // ---- step dvn_sum (all, vrows): dVnᵀ: the parts added in a fixed tree order (every warp, the same bits) ----
#line 187 "templates/mma16/dstate_pass.cu.j2"
    FragC dVn[2];
    {
      FragC part[DVN_PARTS][2];
#pragma unroll
      for (int r = 0; r < DVN_PARTS; ++r) {
        const float4* in = reinterpret_cast<const float4*>(s_dvn_parts + ((rt * DVN_PARTS + r) * 32 + lane) * 8);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const float4 x = in[nt];
          part[r][nt].x[0] = x.x;
          part[r][nt].x[1] = x.y;
          part[r][nt].x[2] = x.z;
          part[r][nt].x[3] = x.w;
        }
      }
      chain_dvn_sum(part, dVn);
    }

#line 15 "templates/skeleton.j2"
    // ---- step dx (all, vrows): (β⊙dX)ᵀ = diag(β)·(dVnᵀ·A) ----
#line 206 "templates/mma16/dstate_pass.cu.j2"
    FragC dX[2], bdX[2];
    chain_dx(dVn, s_A + st * stride_A, s_beta + st * stride_beta, lane, dX, bdX);

#line 15 "templates/skeleton.j2"
    // ---- step dstate (all, kpart): this warp's key part of dSᵀ ← dSᵀ⊙decay_total + dOᵀ·q_decayed − (β⊙dX)ᵀ·k_decayed ----
#line 210 "templates/mma16/dstate_pass.cu.j2"
    chain_dstate<PART_TILES>(dS, t0, adO, bdX, s_q_decayed + st * stride_q_decayed, s_k_decayed + st * stride_k_decayed,
                             s_decay_total + st * stride_decay_total, lane);

#line 15 "templates/skeleton.j2"
    // ---- step load (all, tile): after chunk c's chain, chunk c − 2 into the stage chunk c + 1 left: cp.async tiles (a commit group), the fp32 values via registers, stored into their stage at the end of chunk c − 1 ----
#line 214 "templates/mma16/dstate_pass.cu.j2"
    // issued after the chain (measured as fast as before it: the load queue, not a register hand-off, bounds the
    // pass, benchmarks/NOTES.md session 7); they land while chunk ci − 1 computes
    const StageScalars later = issue_tiles(ci - DEPTH);   // into the stage chunk ci + 1 left
    store_stage(ahead, ci - 1);                  // chunk ci − 1 runs next iteration, after its sync
    ahead = later;
  }
#line 15 "templates/skeleton.j2"
  // ---- step start_out (all, kpart): the C pass (entry dstate_starts, a cut training call): no checkpoints, block 0 run too, and the dS entering the sequence written to dstate_start ----
#line 222 "templates/mma16/dstate_pass.cu.j2"
#pragma unroll
  for (int nt = 0; nt < PART_TILES; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      dstate_start[sh + state_index((t0 + nt) * 8 + frag_c_col(lane, e), v0 + frag_c_row(lane, e))] = dS[nt].x[e];
#line 228 "templates/mma16/dstate_pass.cu.j2"
}



