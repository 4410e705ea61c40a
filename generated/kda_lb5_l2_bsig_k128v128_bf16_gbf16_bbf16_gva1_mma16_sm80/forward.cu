// kdagen 0.1.0 generated CUDA: kda_lb5_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_mma16_sm80 (forward)
// configuration: recurrence kda_lb5_l2_bsig (graph e0c1580ceb2fa342, decay vector in [-5.0, 0.0]), K=128 V=128, io bf16, g bf16, beta bf16, state f32, GVA 1, varlen False, state layout kv, sm_80
// family mma16, chunk 16, exponent form factored
// kernels: prepare (grid ['chunks', 'HV'], 128 threads, 35392 B smem), recurrence (grid ['N', 'HV', 2], 160 threads, 39072 B smem)
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

#line 5 "templates/mma16/prepare.cu.j2"
// ===== prepare: "prepare" (factored exponent form, vector decay) =====
// grid (chunks, HV): one CTA per (chunk, value head); 128 threads, 8 per token row.
// Plan steps: prologue -> cumsum -> decay -> products -> inverse, separated by barrier "sync".
// Writes the chunk's workspace: ws_q_decayed = scale·q̂⊙e^Γ, ws_k_decayed = k̂⊙e^Γ, ws_k_to_end = k̂⊙e^(Γl−Γ)
// (bf16 [C,K]), ws_decay_total = e^Γl (fp32 [128]), ws_A = (I + Mkk)^-1 and ws_Mqk (fp32 [C,C]), ws_beta (fp32 [C]);
// rows >= the chunk's length L are zero. Γ is kept in log2 units (Γ₂ = Γ·log2 e) and used through exp2f.
extern "C" __global__ void __launch_bounds__(128, 4) prepare(
    const bf16* __restrict__ in_q,
#line 733 "kda_lb5_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_mma16_sm80/forward.cu"
    const bf16* __restrict__ in_k,
    const bf16* __restrict__ in_g,
    const bf16* __restrict__ in_beta,
    const float* __restrict__ in_dt_bias,
    const float* __restrict__ in_A_log,
    float sc_scale,
    int T,
    int N,
    bf16* __restrict__ ws_q_decayed,
    bf16* __restrict__ ws_k_decayed,
    bf16* __restrict__ ws_k_to_end,
    float* __restrict__ ws_decay_total,
    float* __restrict__ ws_A,
    float* __restrict__ ws_Mqk,
    float* __restrict__ ws_beta) {
#line 13 "templates/mma16/prepare.cu.j2"
  constexpr int C = 16, K = 128, KD = 128, G = 1;
  constexpr int LANES = 8, KPT = 16, THREADS = 128;
  constexpr float LOG2E = 1.4426950408889634f;
  static_assert(LANES * KPT == K && C * LANES == THREADS, "row mapping: C rows x LANES threads x KPT channels");
#line 754 "kda_lb5_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_mma16_sm80/forward.cu"
  // shared memory: 35392 B, static
  __shared__ __align__(16) unsigned char smem_raw[35392];
  float* const s_gamma = reinterpret_cast<float*>(smem_raw + 0);  // gamma [16 x 128] f32, ld 128
  [[maybe_unused]] constexpr int ld_gamma = 128;
  float* const s_beta = reinterpret_cast<float*>(smem_raw + 8192);  // beta [16] f32, ld 16
  float* const s_q_decayed = reinterpret_cast<float*>(smem_raw + 8256);  // q_decayed [16 x 128] f32, ld 136
  [[maybe_unused]] constexpr int ld_q_decayed = 136;
  float* const s_k_decayed = reinterpret_cast<float*>(smem_raw + 16960);  // k_decayed [16 x 128] f32, ld 136
  [[maybe_unused]] constexpr int ld_k_decayed = 136;
  float* const s_k_inv = reinterpret_cast<float*>(smem_raw + 25664);  // k_inv [16 x 128] f32, ld 136
  [[maybe_unused]] constexpr int ld_k_inv = 136;
  float* const s_Mkk = reinterpret_cast<float*>(smem_raw + 34368);  // Mkk [16 x 16] f32, ld 16
  [[maybe_unused]] constexpr int ld_Mkk = 16;

#line 19 "templates/mma16/prepare.cu.j2"
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int chunk = blockIdx.x, h = blockIdx.y, HV = gridDim.y, hq = h / G;

  // the chunk: first token t0, valid rows L (a surplus CTA of the grid's upper bound exits)
  kdg::ChunkAt at;
  if (!kdg::locate_chunk(nullptr, nullptr, T, N, C, chunk, at)) return;
  const long long t0 = at.t0;
  const int L = at.L;
  const long long ws_ch = (long long)chunk * HV + h;  // this (chunk, head) in the workspaces

#line 15 "templates/skeleton.j2"
  // ---- step prologue (all, row): emitted from the DSL graph: q̂, k̂, per-step decay a (stored ×log2e), β ----
#line 30 "templates/mma16/prepare.cu.j2"
  const int row = tid / LANES, sub = tid % LANES, ch0 = sub * KPT;
  const bool valid = row < L;
  const long long tok = t0 + (valid ? row : 0);
  [[maybe_unused]] auto row_sum = [](float x) { return kdg::group_sum<LANES>(x); };  // the emitted block's row reduction
#line 38 "templates/mma16/prepare.cu.j2"
  const float* in_A_log_row = in_A_log + h;
#line 36 "templates/mma16/prepare.cu.j2"
  const bf16* in_beta_row = in_beta + (tok * HV + h);
#line 38 "templates/mma16/prepare.cu.j2"
  const float* in_dt_bias_row = in_dt_bias + h * K + ch0;
#line 36 "templates/mma16/prepare.cu.j2"
  const bf16* in_g_row = in_g + (tok * HV + h) * K + ch0;
#line 36 "templates/mma16/prepare.cu.j2"
  const bf16* in_k_row = in_k + (tok * (HV / G) + hq) * K + ch0;
#line 36 "templates/mma16/prepare.cu.j2"
  const bf16* in_q_row = in_q + (tok * (HV / G) + hq) * K + ch0;
#line 41 "templates/mma16/prepare.cu.j2"
  // -- emitted from the DSL graph (kdagen.codegen.expr): q_hat, k_hat, decay, beta_val, scale_val --
#line 801 "kda_lb5_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_mma16_sm80/forward.cu"
  // A_log: head_param
  const float n_A_log = *in_A_log_row;
  // beta: token_input
  const float n_beta = valid ? kdg::to_f32(*in_beta_row) : 0.f;
  // const_5: const
  const float n_const_5 = -5.0f;
  // dt_bias: head_param
  float n_dt_bias[KPT];
  kdg::load_row(n_dt_bias, in_dt_bias_row, true);
  // g: token_input
  float n_g[KPT];
  kdg::load_row(n_g, in_g_row, valid);
  // k: token_input
  float n_k[KPT];
  kdg::load_row(n_k, in_k_row, valid);
  // q: token_input
  float n_q[KPT];
  kdg::load_row(n_q, in_q_row, valid);
  // scale: scalar
  const float n_scale = sc_scale;
  // exp_1 = exp(A_log)
  const float n_exp_1 = expf(n_A_log);
  // add_0 = add(g, dt_bias)
  float n_add_0[KPT];
  #pragma unroll
  for (int j = 0; j < KPT; ++j) n_add_0[j] = (n_g[j] + n_dt_bias[j]);
  // l2norm_7 = l2norm(k)
  float n_l2norm_7[KPT];
  {
    float ss = 0.f;
    #pragma unroll
    for (int j = 0; j < KPT; ++j) ss += n_k[j] * n_k[j];
    const float r = rsqrtf(row_sum(ss) + 1e-06f);
    #pragma unroll
    for (int j = 0; j < KPT; ++j) n_l2norm_7[j] = n_k[j] * r;
  }
  // mul_2 = mul(exp_1, add_0)
  float n_mul_2[KPT];
  #pragma unroll
  for (int j = 0; j < KPT; ++j) n_mul_2[j] = (n_exp_1 * n_add_0[j]);
  // l2norm_6 = l2norm(q)
  float n_l2norm_6[KPT];
  {
    float ss = 0.f;
    #pragma unroll
    for (int j = 0; j < KPT; ++j) ss += n_q[j] * n_q[j];
    const float r = rsqrtf(row_sum(ss) + 1e-06f);
    #pragma unroll
    for (int j = 0; j < KPT; ++j) n_l2norm_6[j] = n_q[j] * r;
  }
  // sigmoid_3 = sigmoid(mul_2)
  float n_sigmoid_3[KPT];
  #pragma unroll
  for (int j = 0; j < KPT; ++j) n_sigmoid_3[j] = kdg::sigmoid(n_mul_2[j]);
  // mul_4 = mul(const_5, sigmoid_3)
  float n_mul_4[KPT];
  #pragma unroll
  for (int j = 0; j < KPT; ++j) n_mul_4[j] = (n_const_5 * n_sigmoid_3[j]);
  // sigmoid_8 = sigmoid(beta)
  const float n_sigmoid_8 = kdg::sigmoid(n_beta);
  float q_hat[KPT];
  #pragma unroll
  for (int j = 0; j < KPT; ++j) q_hat[j] = n_l2norm_6[j];
  float k_hat[KPT];
  #pragma unroll
  for (int j = 0; j < KPT; ++j) k_hat[j] = n_l2norm_7[j];
  float decay[KPT];
  #pragma unroll
  for (int j = 0; j < KPT; ++j) decay[j] = n_mul_4[j];
  const float beta_val = n_sigmoid_8;
  const float scale_val = n_scale;

#line 43 "templates/mma16/prepare.cu.j2"
  // -- end of the emitted block --
  // Tail rows carry no token: zero decay (Γ stays flat, so Γ at row C-1 is Γl), β, q̂ and k̂.
#pragma unroll
  for (int j = 0; j < KPT; ++j) {
    q_hat[j] = valid ? q_hat[j] : 0.f;
    k_hat[j] = valid ? k_hat[j] : 0.f;
#line 50 "templates/mma16/prepare.cu.j2"
    s_gamma[row * ld_gamma + ch0 + j] = valid ? decay[j] * LOG2E : 0.f;
#line 56 "templates/mma16/prepare.cu.j2"
  }
  if (sub == 0) {
#line 61 "templates/mma16/prepare.cu.j2"
    s_beta[row] = valid ? beta_val : 0.f;
  }
  __syncthreads();  // barrier "sync"

#line 15 "templates/skeleton.j2"
  // ---- step cumsum (all, column): Γ₂ = in-chunk inclusive cumsum (tail rows carry a = 0) ----
#line 66 "templates/mma16/prepare.cu.j2"
  kdg::column_cumsum(s_gamma, C, KD, ld_gamma, tid, THREADS);
  __syncthreads();  // barrier "sync"

  // ---- step decay (all, row) ---- (all |x| <= |k̂|, |q̂|·scale for decays <= 0)
  {
    float q_decayed[KPT], k_decayed[KPT], k_to_end[KPT], k_inv[KPT];
#pragma unroll
    for (int j = 0; j < KPT; ++j) {
      const int gc = ch0 + j;
      const float g2 = s_gamma[row * ld_gamma + gc], gl2 = s_gamma[(C - 1) * ld_gamma + gc];
      const float e = exp2f(g2);
      q_decayed[j] = scale_val * q_hat[j] * e;
      k_decayed[j] = k_hat[j] * e;
      k_to_end[j] = k_hat[j] * exp2f(gl2 - g2);
#line 81 "templates/mma16/prepare.cu.j2"
      k_inv[j] = k_hat[j] * exp2f(-g2);  // <= 2^(C·|lb|·log2 e) < 2^126: the planner proved the bound
#line 83 "templates/mma16/prepare.cu.j2"
    }
    kdg::store_row(ws_q_decayed + (ws_ch * C + row) * K + ch0, q_decayed);
    kdg::store_row(ws_k_decayed + (ws_ch * C + row) * K + ch0, k_decayed);
    kdg::store_row(ws_k_to_end + (ws_ch * C + row) * K + ch0, k_to_end);
#line 88 "templates/mma16/prepare.cu.j2"
    kdg::store_row(s_q_decayed + row * ld_q_decayed + ch0, q_decayed);
    kdg::store_row(s_k_decayed + row * ld_k_decayed + ch0, k_decayed);
    kdg::store_row(s_k_inv + row * ld_k_inv + ch0, k_inv);
#line 93 "templates/mma16/prepare.cu.j2"
    if (row == 0) {
#pragma unroll
      for (int j = 0; j < KPT; ++j) ws_decay_total[ws_ch * K + ch0 + j] = exp2f(s_gamma[(C - 1) * ld_gamma + ch0 + j]);
    }
#line 100 "templates/mma16/prepare.cu.j2"
    if (sub == 0) ws_beta[ws_ch * C + row] = s_beta[row];
  }
  __syncthreads();  // barrier "sync"

#line 15 "templates/skeleton.j2"
  // ---- step products (all, mma:w0=Mkk,w1=Mqk): Mkk = β·tril₋₁(k_decayed·k_invᵀ), Mqk = tril₀(q_decayed·k_invᵀ): 16×16×K mma, bf16x3 ----
#line 105 "templates/mma16/prepare.cu.j2"
  float* const mqk_out = ws_Mqk + ws_ch * C * C;
#line 107 "templates/mma16/prepare.cu.j2"
  if (warp < 2) {  // warp 0: k_decayed·k_invᵀ, warp 1: q_decayed·k_invᵀ (e^(Γi−Γj) = 2^Γ₂i · 2^−Γ₂j folded into the operands), bf16x3
    const float* left = warp == 0 ? s_k_decayed : s_q_decayed;
    kdg::FragC acc[2];
    kdg::frag_zero(acc[0]);
    kdg::frag_zero(acc[1]);
#pragma unroll
    for (int kk = 0; kk < K / 16; ++kk) {
      kdg::FragA ah, al;
      kdg::load_frag_a_split(ah, al, left + kk * 16, ld_k_decayed, lane);
      kdg::FragB bh[2], bl[2];
      kdg::load_frag_b_nk_split(bh, bl, s_k_inv + kk * 16, ld_k_inv, lane);
      kdg::mma_16816_x3(acc[0], ah, al, bh[0], bl[0]);
      kdg::mma_16816_x3(acc[1], ah, al, bh[1], bl[1]);
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int i = kdg::frag_c_row(lane, e), j = nt * 8 + kdg::frag_c_col(lane, e);
        if (warp == 0) s_Mkk[i * ld_Mkk + j] = i > j ? s_beta[i] * acc[nt].x[e] : 0.f;
        else mqk_out[i * C + j] = i >= j ? acc[nt].x[e] : 0.f;
      }
    }
  }
#line 179 "templates/mma16/prepare.cu.j2"
  __syncthreads();  // barrier "sync"

#line 15 "templates/skeleton.j2"
  // ---- step inverse (all, column16): A = (I + Mkk)⁻¹: forward substitution in fp32, lane j owns column j ----
#line 182 "templates/mma16/prepare.cu.j2"
  if (warp == 0 && lane < C) {
    const int jc = lane;
    float col[C];
#pragma unroll
    for (int i = 0; i < C; ++i) {
      float acc = i == jc ? 1.f : 0.f;
#pragma unroll
      for (int m = 0; m < i; ++m) acc -= s_Mkk[i * ld_Mkk + m] * col[m];
      col[i] = i < jc ? 0.f : acc;
    }
    float* const a_out = ws_A + ws_ch * C * C;
#pragma unroll
    for (int i = 0; i < C; ++i) a_out[i * C + jc] = i < L ? col[i] : 0.f;
  }
}

#line 7 "templates/mma16/recurrence.cu.j2"
// ===== recurrence: "recurrence" (forward) =====
#line 9 "templates/mma16/recurrence.cu.j2"
// grid (N, HV, V/64): one CTA per (sequence, value head, V slice of 64); 160 threads.
#line 14 "templates/mma16/recurrence.cu.j2"
// Roles: warps 0..3 "mma" each own 16 value rows of the transposed state Sᵀ [V_slice, K] as fp32 mma
// accumulators for the whole sequence; warp 4 "load" streams each chunk through a 2-stage cp.async
// ring (pipeline "chunk_ring": mbarriers ready[s] <- 32 producer lanes, free[s] <- 128 consumer threads).
// Per chunk, in the transposed form (every product's accumulator is the next one's A operand, in registers):
//   P = Sᵀ·k_decayedᵀ,  Q = Sᵀ·q_decayedᵀ,  Xᵀ = β⊙(vᵀ − P),  Vnᵀ = Xᵀ·Aᵀ,  Oᵀ = Q + Vnᵀ·Mqkᵀ,  Sᵀ ← Sᵀ⊙decay_total + Vnᵀ·k_to_end.
extern "C" __global__ void __launch_bounds__(160, 2) recurrence(
    const bf16* __restrict__ v,
#line 992 "kda_lb5_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_mma16_sm80/forward.cu"
    const float* __restrict__ h0,
    const bf16* __restrict__ ws_k_decayed,
    const bf16* __restrict__ ws_k_to_end,
    const float* __restrict__ ws_decay_total,
    const float* __restrict__ ws_A,
    const float* __restrict__ ws_beta,
    const bf16* __restrict__ ws_q_decayed,
    const float* __restrict__ ws_Mqk,
    int T,
    int N,
    bf16* __restrict__ o,
    float* __restrict__ ht,
    float* __restrict__ ws_state_blocks) {
#line 21 "templates/mma16/recurrence.cu.j2"
  constexpr int C = 16, K = 128, V = 128;
  constexpr int VS = 64, MMA_WARPS = 4, STAGES = 2, BLOCK = 8;
  constexpr int NT8 = K / 8;  // 16x8 accumulator tiles per warp along K
  static_assert(VS == MMA_WARPS * 16 && C == 16 && K % 16 == 0, "a warp's 16 value rows, 16-token chunks");
#line 1011 "kda_lb5_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_mma16_sm80/forward.cu"
  // shared memory: 39072 B, static
  __shared__ __align__(16) unsigned char smem_raw[39072];
  kdg::u64* const bar_ready = reinterpret_cast<kdg::u64*>(smem_raw + 0);  // mbarrier ready[2], arrive count 32
  kdg::u64* const bar_free = reinterpret_cast<kdg::u64*>(smem_raw + 16);  // mbarrier free[2], arrive count 128
  bf16* const s_v = reinterpret_cast<bf16*>(smem_raw + 32);  // v [16 x 64] bf16, ld 72, 2 stages
  [[maybe_unused]] constexpr int ld_v = 72;
  constexpr int stride_v = 1152;  // elements per stage / warp copy
  bf16* const s_q_decayed = reinterpret_cast<bf16*>(smem_raw + 4640);  // q_decayed [16 x 128] bf16, ld 136, 2 stages
  [[maybe_unused]] constexpr int ld_q_decayed = 136;
  constexpr int stride_q_decayed = 2176;  // elements per stage / warp copy
  bf16* const s_k_decayed = reinterpret_cast<bf16*>(smem_raw + 13344);  // k_decayed [16 x 128] bf16, ld 136, 2 stages
  [[maybe_unused]] constexpr int ld_k_decayed = 136;
  constexpr int stride_k_decayed = 2176;  // elements per stage / warp copy
  bf16* const s_k_to_end = reinterpret_cast<bf16*>(smem_raw + 22048);  // k_to_end [16 x 128] bf16, ld 136, 2 stages
  [[maybe_unused]] constexpr int ld_k_to_end = 136;
  constexpr int stride_k_to_end = 2176;  // elements per stage / warp copy
  float* const s_A = reinterpret_cast<float*>(smem_raw + 30752);  // A [16 x 16] f32, ld 16, 2 stages
  [[maybe_unused]] constexpr int ld_A = 16;
  constexpr int stride_A = 256;  // elements per stage / warp copy
  float* const s_Mqk = reinterpret_cast<float*>(smem_raw + 32800);  // Mqk [16 x 16] f32, ld 16, 2 stages
  [[maybe_unused]] constexpr int ld_Mqk = 16;
  constexpr int stride_Mqk = 256;  // elements per stage / warp copy
  float* const s_beta = reinterpret_cast<float*>(smem_raw + 34848);  // beta [16] f32, ld 16, 2 stages
  constexpr int stride_beta = 16;  // elements per stage / warp copy
  float* const s_decay_total = reinterpret_cast<float*>(smem_raw + 34976);  // decay_total [128] f32, ld 128, 2 stages
  constexpr int stride_decay_total = 128;  // elements per stage / warp copy
  bf16* const s_o = reinterpret_cast<bf16*>(smem_raw + 36000);  // o [16 x 16] bf16, ld 24, per warp ×4
  [[maybe_unused]] constexpr int ld_o = 24;
  constexpr int stride_o = 384;  // elements per stage / warp copy

#line 27 "templates/mma16/recurrence.cu.j2"
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int* const offsets = nullptr;
#line 30 "templates/mma16/recurrence.cu.j2"
  const int n = blockIdx.x;
#line 35 "templates/mma16/recurrence.cu.j2"
  const int h = blockIdx.y, HV = gridDim.y, v0 = blockIdx.z * VS;
  const kdg::Span seq = kdg::sequence_span(nullptr, T, n);
  const long long bos = seq.begin, eos = seq.end;
  const long long chunk0 = kdg::first_chunk(offsets, T, C, n);
  const int num_chunks = (int)((eos - bos + C - 1) / C);
#line 41 "templates/mma16/recurrence.cu.j2"
  const int c_begin = 0, c_end = num_chunks;
#line 23 "templates/skeleton.j2"
  // barriers (plan): ready[2] × 32 (load/thread); free[2] × 128 (mma/thread)
#line 25 "templates/skeleton.j2"
  if (threadIdx.x == 0) {
#line 27 "templates/skeleton.j2"
    for (int kdg_s = 0; kdg_s < 2; ++kdg_s) kdg::mbarrier_init(&bar_ready[kdg_s], 32);
#line 27 "templates/skeleton.j2"
    for (int kdg_s = 0; kdg_s < 2; ++kdg_s) kdg::mbarrier_init(&bar_free[kdg_s], 128);
#line 32 "templates/skeleton.j2"
  }
  __syncthreads();


#line 42 "templates/skeleton.j2"
  const int kdg_warp = threadIdx.x / 32;
#line 1070 "kda_lb5_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_mma16_sm80/forward.cu"
  if (kdg_warp >= 0 && kdg_warp < 4) {  // role "mma": warps 0..3
#line 77 "templates/mma16/recurrence.cu.j2"
      // this warp's 16 rows of Sᵀ, vr0 .. vr0+15 of the full V
      const int vr0 = v0 + warp * 16;
      kdg::FragC S[NT8];  // S[t]: Sᵀ rows vr0.., columns 8t..8t+7
#line 15 "templates/skeleton.j2"
      // ---- step state_in (mma, strip): Sᵀ rows of this warp from h0 (or zeros) ----
#line 81 "templates/mma16/recurrence.cu.j2"
    #pragma unroll
      for (int t = 0; t < NT8; ++t) {
    #pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int vr = vr0 + kdg::frag_c_row(lane, e), d = t * 8 + kdg::frag_c_col(lane, e);
#line 89 "templates/mma16/recurrence.cu.j2"
          S[t].x[e] = h0 ? h0[(((long long)n * HV + h) * K + d) * V + vr] : 0.f;
#line 93 "templates/mma16/recurrence.cu.j2"
        }
      }
#line 96 "templates/mma16/recurrence.cu.j2"
      // Sᵀ (or zeros) of this warp's rows into checkpoint slot `slot`, [V, K] fp32 per (slot, head)
      auto store_block = [&](long long slot, bool zero) {
        float* const out = ws_state_blocks + (slot * HV + h) * (long long)V * K;
    #pragma unroll
        for (int t = 0; t < NT8; ++t)
    #pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int vr = vr0 + kdg::frag_c_row(lane, 2 * half), d = t * 8 + kdg::frag_c_col(lane, 0);
            *reinterpret_cast<float2*>(out + (long long)vr * K + d) =
                zero ? make_float2(0.f, 0.f) : make_float2(S[t].x[2 * half], S[t].x[2 * half + 1]);
          }
      };
#line 110 "templates/mma16/recurrence.cu.j2"
      bf16* const o_stage = s_o + warp * stride_o;

#line 113 "templates/mma16/recurrence.cu.j2"
      for (int c = c_begin; c < c_end; ++c) {
        const int s = (c - c_begin) % STAGES;
        const long long t0 = bos + (long long)c * C;
        const int L = (int)min((long long)C, eos - t0);
#line 15 "templates/skeleton.j2"
        // ---- step checkpoint (mma, strip): at a block's first chunk, when kept: Sᵀ (fp32) for the backward's states; the sequence's unowned slots zeroed ----
#line 119 "templates/mma16/recurrence.cu.j2"
        if (ws_state_blocks != nullptr && c % BLOCK == 0) store_block(kdg::block_slot(offsets, T, C, BLOCK, n, c / BLOCK), false);
#line 121 "templates/mma16/recurrence.cu.j2"
        kdg::mbarrier_wait(&bar_ready[s], ((c - c_begin) / STAGES) & 1);
        const bf16* v_tile = s_v + s * stride_v;
        const bf16* k_decayed = s_k_decayed + s * stride_k_decayed;
        const bf16* k_to_end = s_k_to_end + s * stride_k_to_end;
        const float* A = s_A + s * stride_A;
        const float* beta = s_beta + s * stride_beta;
        const float* decay_total = s_decay_total + s * stride_decay_total;
#line 129 "templates/mma16/recurrence.cu.j2"
        const bf16* q_decayed = s_q_decayed + s * stride_q_decayed;
        const float* Mqk = s_Mqk + s * stride_Mqk;

#line 15 "templates/skeleton.j2"
        // ---- step state_products (mma, strip): P = Sᵀ·k_decayedᵀ, Q = Sᵀ·q_decayedᵀ (A operand from the state registers) ----
#line 134 "templates/mma16/recurrence.cu.j2"
        kdg::FragC P[2], Q[2];
        kdg::frag_zero(P[0]);
        kdg::frag_zero(P[1]);
#line 138 "templates/mma16/recurrence.cu.j2"
        kdg::frag_zero(Q[0]);
        kdg::frag_zero(Q[1]);
#line 141 "templates/mma16/recurrence.cu.j2"
    #pragma unroll
        for (int kk = 0; kk < K / 16; ++kk) {
          const kdg::FragA sa = kdg::frag_a_from_c(S[2 * kk], S[2 * kk + 1]);
          kdg::FragB b[2];
          kdg::load_frag_b_nk(b, k_decayed + kk * 16, ld_k_decayed, lane);  // (d, token) at k_decayed[token][d]
          kdg::mma_16816(P[0], sa, b[0]);
          kdg::mma_16816(P[1], sa, b[1]);
#line 149 "templates/mma16/recurrence.cu.j2"
          kdg::load_frag_b_nk(b, q_decayed + kk * 16, ld_q_decayed, lane);
          kdg::mma_16816(Q[0], sa, b[0]);
          kdg::mma_16816(Q[1], sa, b[1]);
#line 153 "templates/mma16/recurrence.cu.j2"
        }

        // ---- step delta (mma, strip): Xᵀ = β⊙(vᵀ − P) ---- (tail tokens have β = 0 and zero-filled v)
        kdg::FragC X[2];
    #pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
    #pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int vr = warp * 16 + kdg::frag_c_row(lane, e), tok = nt * 8 + kdg::frag_c_col(lane, e);
            X[nt].x[e] = beta[tok] * (kdg::to_f32(v_tile[tok * ld_v + vr]) - P[nt].x[e]);
          }
        }

#line 15 "templates/skeleton.j2"
        // ---- step solve (mma, strip): Vnᵀ = Xᵀ·Aᵀ (bf16x3: X and A split hi + lo) ----
#line 167 "templates/mma16/recurrence.cu.j2"
        kdg::FragC Vn[2];
        {
          kdg::FragA xh, xl;
          kdg::frag_a_from_c_split(X[0], X[1], xh, xl);
          kdg::FragB bh[2], bl[2];
          kdg::load_frag_b_nk_split(bh, bl, A, ld_A, lane);
          kdg::frag_zero(Vn[0]);
          kdg::frag_zero(Vn[1]);
          kdg::mma_16816_x3(Vn[0], xh, xl, bh[0], bl[0]);
          kdg::mma_16816_x3(Vn[1], xh, xl, bh[1], bl[1]);
        }
        kdg::FragA vnh, vnl;  // Vnᵀ as an A operand, hi + lo
        kdg::frag_a_from_c_split(Vn[0], Vn[1], vnh, vnl);

#line 15 "templates/skeleton.j2"
        // ---- step output (mma, strip): Oᵀ = Q + Vnᵀ·Mqkᵀ (bf16x3); staged per warp for 16-byte stores ----
#line 183 "templates/mma16/recurrence.cu.j2"
        {
          kdg::FragB bh[2], bl[2];
          kdg::load_frag_b_nk_split(bh, bl, Mqk, ld_Mqk, lane);
          kdg::mma_16816_x3(Q[0], vnh, vnl, bh[0], bl[0]);
          kdg::mma_16816_x3(Q[1], vnh, vnl, bh[1], bl[1]);
    #pragma unroll
          for (int nt = 0; nt < 2; ++nt) {
    #pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int vr = kdg::frag_c_row(lane, e), tok = nt * 8 + kdg::frag_c_col(lane, e);
              o_stage[tok * ld_o + vr] = __float2bfloat16_rn(Q[nt].x[e]);
            }
          }
          __syncwarp();
          const int tok = lane >> 1, half = lane & 1;
          if (tok < L) {
            *reinterpret_cast<uint4*>(o + ((t0 + tok) * HV + h) * V + vr0 + half * 8) =
                *reinterpret_cast<const uint4*>(o_stage + tok * ld_o + half * 8);
          }
          __syncwarp();
        }

#line 15 "templates/skeleton.j2"
        // ---- step update (mma, strip): Sᵀ ← Sᵀ⊙decay_total + (Vn_hi + Vn_lo)ᵀ·k_to_end ----
#line 221 "templates/mma16/recurrence.cu.j2"
    #pragma unroll
        for (int t2 = 0; t2 < K / 16; ++t2) {
          kdg::FragB b[2];
          kdg::load_frag_b_kn(b, k_to_end + t2 * 16, ld_k_to_end, lane);
    #pragma unroll
          for (int half = 0; half < 2; ++half) {
            kdg::FragC& acc = S[2 * t2 + half];
    #pragma unroll
            for (int e = 0; e < 4; ++e) acc.x[e] *= decay_total[(2 * t2 + half) * 8 + kdg::frag_c_col(lane, e)];
            kdg::mma_16816(acc, vnl, b[half]);
            kdg::mma_16816(acc, vnh, b[half]);
          }
        }
        kdg::mbarrier_arrive(&bar_free[s]);
      }
#line 237 "templates/mma16/recurrence.cu.j2"
      if (ws_state_blocks != nullptr) {       // step checkpoint: zeros in the slots after this sequence's blocks no block owns
        const long long total = (long long)N * T / C + N;      // the launch's "chunks"
        const long long next = n + 1 < N ? kdg::block_slot(offsets, T, C, BLOCK, n + 1, 0) : total / BLOCK + N;
        for (long long slot = kdg::block_slot(offsets, T, C, BLOCK, n, kdg::sequence_blocks(offsets, T, C, BLOCK, n));
             slot < next; ++slot)
          store_block(slot, true);
      }
#line 15 "templates/skeleton.j2"
      // ---- step state_out (mma, strip): final state (if requested) ----
#line 245 "templates/mma16/recurrence.cu.j2"
      if (ht) {
    #pragma unroll
        for (int t = 0; t < NT8; ++t) {
    #pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int vr = vr0 + kdg::frag_c_row(lane, e), d = t * 8 + kdg::frag_c_col(lane, e);
#line 252 "templates/mma16/recurrence.cu.j2"
            ht[(((long long)n * HV + h) * K + d) * V + vr] = S[t].x[e];
#line 256 "templates/mma16/recurrence.cu.j2"
          }
        }
      }

#line 1245 "kda_lb5_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_mma16_sm80/forward.cu"
  } else if (kdg_warp >= 4 && kdg_warp < 5) {  // role "load": warps 4..4
#line 15 "templates/skeleton.j2"
    // ---- step load (load, cp.async): one chunk of workspace + v rows (tail rows zero-filled) ----
#line 50 "templates/mma16/recurrence.cu.j2"
        for (int c = c_begin; c < c_end; ++c) {
          const int s = (c - c_begin) % STAGES;
          kdg::mbarrier_wait(&bar_free[s], (((c - c_begin) / STAGES) & 1) ^ 1);
          const long long ws_ch = (chunk0 + c) * HV + h;
          const long long t0 = bos + (long long)c * C;
          const int L = (int)min((long long)C, eos - t0);
          kdg::cp_async_tile(s_v + s * stride_v, ld_v * 2, v + (t0 * HV + h) * V + v0, (long long)HV * V * 2,
                             C, VS * 2, L, lane, 32);
#line 59 "templates/mma16/recurrence.cu.j2"
          kdg::cp_async_tile(s_q_decayed + s * stride_q_decayed, ld_q_decayed * 2, ws_q_decayed + ws_ch * C * K, K * 2, C, K * 2, C, lane, 32);
#line 61 "templates/mma16/recurrence.cu.j2"
          kdg::cp_async_tile(s_k_decayed + s * stride_k_decayed, ld_k_decayed * 2, ws_k_decayed + ws_ch * C * K, K * 2, C, K * 2, C, lane, 32);
          kdg::cp_async_tile(s_k_to_end + s * stride_k_to_end, ld_k_to_end * 2, ws_k_to_end + ws_ch * C * K, K * 2, C, K * 2, C, lane, 32);
          kdg::cp_async_tile(s_A + s * stride_A, ld_A * 4, ws_A + ws_ch * C * C, C * 4, C, C * 4, C, lane, 32);
#line 65 "templates/mma16/recurrence.cu.j2"
          kdg::cp_async_tile(s_Mqk + s * stride_Mqk, ld_Mqk * 4, ws_Mqk + ws_ch * C * C, C * 4, C, C * 4, C, lane, 32);
#line 67 "templates/mma16/recurrence.cu.j2"
          kdg::cp_async_tile(s_beta + s * stride_beta, C * 4, ws_beta + ws_ch * C, C * 4, 1, C * 4, 1, lane, 32);
#line 69 "templates/mma16/recurrence.cu.j2"
          kdg::cp_async_tile(s_decay_total + s * stride_decay_total, K * 4, ws_decay_total + ws_ch * K, K * 4, 1, K * 4, 1, lane, 32);
#line 73 "templates/mma16/recurrence.cu.j2"
          kdg::cp_async_arrive(&bar_ready[s]);
        }
        kdg::cp_async_wait_all();

#line 50 "templates/skeleton.j2"
  }
#line 263 "templates/mma16/recurrence.cu.j2"
}

