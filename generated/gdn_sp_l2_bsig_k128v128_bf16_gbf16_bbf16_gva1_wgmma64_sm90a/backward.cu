// kdagen 0.1.0 generated CUDA: gdn_sp_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_wgmma64_sm90a (backward)
// configuration: recurrence gdn_sp_l2_bsig (graph 568195be1582f9ca, decay scalar in [-inf, -0.0]), K=128 V=128, io bf16, g bf16, beta bf16, state f32, GVA 1, varlen False, state layout kv, sm_90a
// family wgmma64, chunk 64, exponent form relative
// kernels: dstate (grid ['N', 'HV', 2], 256 threads, 215040 B smem), chunk_bwd (grid ['chunks', 'HV'], 384 threads, 218112 B smem), prepare_bwd (grid ['chunks', 'H'], 512 threads, 211456 B smem), param_reduce (grid ['(HV + 31) // 32', '2'], 256 threads, 1024 B smem)
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
// ===== templates/sm90/ptx.cuh =====
#line 1 "templates/sm90/ptx.cuh"
// kdagen sm90: inline PTX of the sm_90a instructions (Hopper): async-proxy fences, mbarrier transaction
// counts, bulk and bulk-tensor copies (TMA), wgmma, setmaxnreg, stmatrix. Only raw wrappers live here;
// wgmma.cuh and tma.cuh build on them. Emulated on the host by templates/emulate/sm90_ptx.cuh.
namespace kdg {

// ---- fences --------------------------------------------------------------------------------------------

// Orders this thread's generic-proxy shared-memory writes before later async-proxy accesses (a bulk copy
// or wgmma reading what plain stores or stmatrix wrote); put it before the barrier that publishes them.
__device__ __forceinline__ void ptx_fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Makes mbarrier.init visible to the async proxy (bulk copies completing on the barrier).
__device__ __forceinline__ void ptx_fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// ---- mbarrier transaction counts -----------------------------------------------------------------------

// Adds `bytes` to the current phase's tx-count, then arrives once.
__device__ __forceinline__ void ptx_mbarrier_arrive_expect_tx(u64* bar, u32 bytes) {
  asm volatile("{\n .reg .b64 state;\n mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n"
               :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// Adds `bytes` to the current phase's tx-count without arriving.
__device__ __forceinline__ void ptx_mbarrier_expect_tx(u64* bar, u32 bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n"
               :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// True once the phase with this parity has completed; the hardware may suspend the thread a while first.
__device__ __forceinline__ bool ptx_mbarrier_try_wait(u64* bar, int parity) {
  u32 done;
  asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
               " selp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
  return done != 0;
}

// ---- bulk copies (global -> shared, completing `bytes` of transactions on an mbarrier) -----------------

// One box of the tensor map at integer coordinates (innermost first; out-of-range elements read 0).
// `map` is the generic address of a __grid_constant__ kernel parameter (or of global/const memory).
__device__ __forceinline__ void ptx_tma_load_2d(void* dst, const void* map, int c0, int c1, u64* bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];\n"
               :: "r"(smem_addr(dst)), "l"(map), "r"(c0), "r"(c1), "r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void ptx_tma_load_3d(void* dst, const void* map, int c0, int c1, int c2, u64* bar) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4}], [%5];\n"
               :: "r"(smem_addr(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void ptx_tma_load_4d(void* dst, const void* map, int c0, int c1, int c2, int c3,
                                                u64* bar) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
               :: "r"(smem_addr(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
               : "memory");
}

// A contiguous copy: both addresses 16-byte aligned, bytes a multiple of 16.
__device__ __forceinline__ void ptx_bulk_load(void* dst, const void* src, u32 bytes, u64* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               :: "r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}

// A hint: `bytes` of global memory at p (both multiples of 16) fetched into L2 ahead of plain loads that will read
// them; nothing to wait for, nothing written.
__device__ __forceinline__ void ptx_prefetch_l2(const void* p, u32 bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" :: "l"(p), "r"(bytes) : "memory");
}

// Shared -> global: one box of a tensor map from a shared tile (laid out as a load of the same map writes it),
// committed into the issuing thread's bulk groups; elements outside the tensor are not written.
__device__ __forceinline__ void ptx_tma_store_2d(const void* map, int c0, int c1, const void* src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];\n"
               :: "l"(map), "r"(c0), "r"(c1), "r"(smem_addr(src)) : "memory");
}

__device__ __forceinline__ void ptx_bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Until at most N of this thread's committed bulk groups still read their shared sources.
template <int N>
__device__ __forceinline__ void ptx_bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(N) : "memory");
}

// ---- wgmma (warpgroup-collective: all 128 threads of 4 consecutive warps, the first a multiple of 4) ----

// Before the first wgmma that reads registers this warpgroup wrote (accumulators, A fragments).
__device__ __forceinline__ void ptx_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

// Closes the wgmmas issued since the last commit into one group.
__device__ __forceinline__ void ptx_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }

// Waits until at most N committed groups are still pending (their accumulators and operands are in use).
template <int N>
__device__ __forceinline__ void ptx_wgmma_wait() {
  static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0..7");
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory");
}

// Keeps the compiler from moving reads or writes of a register across the wgmma fence/commit/wait
// statements (which name no registers themselves).
__device__ __forceinline__ void ptx_fence_operand(float& x) { asm volatile("" : "+f"(x) :: "memory"); }
__device__ __forceinline__ void ptx_fence_operand(u32& x) { asm volatile("" : "+r"(x) :: "memory"); }

// Operand lists of the m64nNk16 accumulators: "%0, %1, ..." (KDG_WG_Rk: k registers) and the matching
// "+f"(d[i]) constraints (KDG_WG_Fk(i): k of them from d[i]).
#define KDG_WG_S(x) #x
#define KDG_WG_R(x) "%" KDG_WG_S(x)
#define KDG_WG_R4(t, a, b, c, d) KDG_WG_R(t##a) ", " KDG_WG_R(t##b) ", " KDG_WG_R(t##c) ", " KDG_WG_R(t##d)
#define KDG_WG_R10(t) KDG_WG_R4(t, 0, 1, 2, 3) ", " KDG_WG_R4(t, 4, 5, 6, 7) ", " KDG_WG_R(t##8) ", " KDG_WG_R(t##9)
#define KDG_WG_R_4 KDG_WG_R4(, 0, 1, 2, 3)
#define KDG_WG_R_8 KDG_WG_R_4 ", " KDG_WG_R4(, 4, 5, 6, 7)
#define KDG_WG_R_16 KDG_WG_R10() ", " KDG_WG_R4(1, 0, 1, 2, 3) ", " KDG_WG_R(14) ", " KDG_WG_R(15)
#define KDG_WG_R_32 KDG_WG_R10() ", " KDG_WG_R10(1) ", " KDG_WG_R10(2) ", " KDG_WG_R(30) ", " KDG_WG_R(31)
#define KDG_WG_R_64 KDG_WG_R10() ", " KDG_WG_R10(1) ", " KDG_WG_R10(2) ", " KDG_WG_R10(3) ", " KDG_WG_R10(4) \
  ", " KDG_WG_R10(5) ", " KDG_WG_R4(6, 0, 1, 2, 3)
#define KDG_WG_R_128 KDG_WG_R10() ", " KDG_WG_R10(1) ", " KDG_WG_R10(2) ", " KDG_WG_R10(3) ", " KDG_WG_R10(4) \
  ", " KDG_WG_R10(5) ", " KDG_WG_R10(6) ", " KDG_WG_R10(7) ", " KDG_WG_R10(8) ", " KDG_WG_R10(9) ", "    \
  KDG_WG_R10(10) ", " KDG_WG_R10(11) ", " KDG_WG_R4(12, 0, 1, 2, 3) ", " KDG_WG_R4(12, 4, 5, 6, 7)
#define KDG_WG_F4(i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define KDG_WG_F8(i) KDG_WG_F4(i), KDG_WG_F4((i) + 4)
#define KDG_WG_F16(i) KDG_WG_F8(i), KDG_WG_F8((i) + 8)
#define KDG_WG_F32(i) KDG_WG_F16(i), KDG_WG_F16((i) + 16)
#define KDG_WG_F64(i) KDG_WG_F32(i), KDG_WG_F32((i) + 32)
#define KDG_WG_F128(i) KDG_WG_F64(i), KDG_WG_F64((i) + 64)

// A and B from shared-memory descriptors; operands %C.. after the C = N/2 accumulators:
// desc_a, desc_b, scale_d, tnspA, tnspB.
#define KDG_WGMMA_SS(N, C, a, b, s, ta, tb)                                                              \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" #s ", 0;\n"                                       \
               " wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 {" KDG_WG_R_##C "}, %" #a     \
               ", %" #b ", p, 1, 1, %" #ta ", %" #tb ";\n}\n"                                           \
               : KDG_WG_F##C(0) : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TA), "n"(TB))

// A from registers (4 x b32: bf16 pairs) and B from a descriptor; operands after the accumulators:
// a0..a3, desc_b, scale_d, tnspB.
#define KDG_WGMMA_RS(N, C, a0, a1, a2, a3, b, s, tb)                                                     \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %" #s ", 0;\n"                                       \
               " wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 {" KDG_WG_R_##C "}, {%" #a0   \
               ", %" #a1 ", %" #a2 ", %" #a3 "}, %" #b ", p, 1, 1, %" #tb ";\n}\n"                      \
               : KDG_WG_F##C(0) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), \
                 "n"(TB))

// D(64 x N, f32) = A(64 x 16, bf16)·B(16 x N, bf16) + (scale_d ? D : 0), both operands in shared memory.
// TA / TB: 0 = K-major (A row-major, B stored N x K), 1 = MN-major (transposed).
template <int N, int TA, int TB>
__device__ __forceinline__ void ptx_wgmma_ss(float (&d)[N / 2], u64 desc_a, u64 desc_b, int scale_d) {
  static_assert((TA == 0 || TA == 1) && (TB == 0 || TB == 1), "transpose immediates are 0 or 1");
  if constexpr (N == 8) KDG_WGMMA_SS(8, 4, 4, 5, 6, 7, 8);
  else if constexpr (N == 16) KDG_WGMMA_SS(16, 8, 8, 9, 10, 11, 12);
  else if constexpr (N == 32) KDG_WGMMA_SS(32, 16, 16, 17, 18, 19, 20);
  else if constexpr (N == 64) KDG_WGMMA_SS(64, 32, 32, 33, 34, 35, 36);
  else if constexpr (N == 128) KDG_WGMMA_SS(128, 64, 64, 65, 66, 67, 68);
  else if constexpr (N == 256) KDG_WGMMA_SS(256, 128, 128, 129, 130, 131, 132);
  else static_assert(N == 8, "wgmma m64nNk16: N in {8, 16, 32, 64, 128, 256}");
}

// The same with A (64 x 16) from registers: the layout of wgmma.cuh's WgmmaFragA.
template <int N, int TB>
__device__ __forceinline__ void ptx_wgmma_rs(float (&d)[N / 2], const u32 (&a)[4], u64 desc_b, int scale_d) {
  static_assert(TB == 0 || TB == 1, "transpose immediates are 0 or 1");
  if constexpr (N == 8) KDG_WGMMA_RS(8, 4, 4, 5, 6, 7, 8, 9, 10);
  else if constexpr (N == 16) KDG_WGMMA_RS(16, 8, 8, 9, 10, 11, 12, 13, 14);
  else if constexpr (N == 32) KDG_WGMMA_RS(32, 16, 16, 17, 18, 19, 20, 21, 22);
  else if constexpr (N == 64) KDG_WGMMA_RS(64, 32, 32, 33, 34, 35, 36, 37, 38);
  else if constexpr (N == 128) KDG_WGMMA_RS(128, 64, 64, 65, 66, 67, 68, 69, 70);
  else if constexpr (N == 256) KDG_WGMMA_RS(256, 128, 128, 129, 130, 131, 132, 133, 134);
  else static_assert(N == 8, "wgmma m64nNk16: N in {8, 16, 32, 64, 128, 256}");
}

#undef KDG_WGMMA_SS
#undef KDG_WGMMA_RS
#undef KDG_WG_F128
#undef KDG_WG_F16
#undef KDG_WG_F32
#undef KDG_WG_F4
#undef KDG_WG_F64
#undef KDG_WG_F8
#undef KDG_WG_R
#undef KDG_WG_R10
#undef KDG_WG_R4
#undef KDG_WG_R_128
#undef KDG_WG_R_16
#undef KDG_WG_R_32
#undef KDG_WG_R_4
#undef KDG_WG_R_64
#undef KDG_WG_R_8
#undef KDG_WG_S

// ---- registers -----------------------------------------------------------------------------------------

// Raise / lower this warpgroup's per-thread register quota to N (all 4 warps execute it; the kernel needs
// a register cap at entry: __launch_bounds__(threads, 1)).
template <int N>
__device__ __forceinline__ void ptx_setmaxnreg_inc() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(N));
}

template <int N>
__device__ __forceinline__ void ptx_setmaxnreg_dec() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(N));
}

// ---- stmatrix (warp-collective, the inverse of ldmatrix) ------------------------------------------------

// Four 8x8 b16 matrices: lane l supplies the (16-byte aligned) address of row (l & 7) of matrix (l >> 3);
// r[i] holds matrix i's elements (row l/4, columns 2(l%4), 2(l%4)+1), or with .trans (rows 2(l%4), +1;
// column l/4).
__device__ __forceinline__ void ptx_stmatrix_x4(void* row_ptr, const u32 (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
               :: "r"(smem_addr(row_ptr)), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}

__device__ __forceinline__ void ptx_stmatrix_x4_trans(void* row_ptr, const u32 (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n"
               :: "r"(smem_addr(row_ptr)), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
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

#line 5 "templates/unit.cu.j2"
// ===== templates/sm90/wgmma.cuh =====
#line 1 "templates/sm90/wgmma.cuh"
// kdagen sm90: wgmma.mma_async m64nNk16 bf16 -> f32 (sm_90a), on the raw wrappers of sm90/ptx.cuh.
//
// A warpgroup is 4 consecutive warps starting at a warp index divisible by 4; thread t = threadIdx.x % 128
// of it is lane l = t % 32 of warp w = t / 32, with g = l / 4 and q = l % 4.
//
// Accumulator D (64 x N, f32), N/2 floats per thread: element x[i] with j = i / 4 (the n8 column block)
// and e = i % 4 sits at
//     row 16w + g + 8(e / 2),   column 8j + 2q + (e % 2),
// i.e. each warp owns 16 rows and, per n8 block, the layout of mma.m16n8k16's C fragment.
//
// Register A (64 x 16, bf16), 4 x b32 per thread, each the bf16 pair (low half first) of two adjacent
// columns: x[0] = (row 16w + g,     columns 2q, 2q+1)    x[1] = (row 16w + g + 8, columns 2q, 2q+1)
//          x[2] = (row 16w + g,     columns 2q+8, 2q+9)  x[3] = (row 16w + g + 8, columns 2q+8, 2q+9)
// i.e. mma.m16n8k16's A fragment for the warp's 16 rows. Columns 16s..16s+15 of an accumulator are
// therefore, rounded to bf16, exactly an A fragment (wgmma_frag_a_from_acc): D = A·B chains on as A·B·B'.
//
// Shared-memory operands are described by a 64-bit descriptor (make_smem_desc) over a canonical layout of
// "core matrices" (8 rows of 16 bytes). With T = 8 bf16 per 16 bytes, the operand element (mn, k) of the
// instruction's MN x 16 slice (mn < 64 for A, < N for B) sits at the byte offset from the start address:
//   K-major (transpose 0), no swizzle:  (mn/8)·SBO + (k/8)·LBO + (mn%8)·16 + (k%8)·2
//   K-major, S-byte swizzle:            (mn/8)·SBO + (mn%8)·S + (k/8)·16 + (k%8)·2        (LBO unused)
//   MN-major (transpose 1), no swizzle: (mn/8)·SBO + (k/8)·LBO + (k%8)·16 + (mn%8)·2
//   MN-major, S-byte swizzle:           (mn/(S/2))·LBO + (k/8)·SBO + (k%8)·S + (mn%(S/2))·2
// and a swizzle of S = 32, 64, 128 bytes then XORs address bits [4, 4 + log2(S/16)) with the bits three
// places above them ([7, ...)) of the shared address: the pattern a bulk tensor copy with the same swizzle
// writes (tma.cuh, swizzle_offset), so a tile the copy wrote at an address aligned to 8·S bytes reads back
// by advancing the start address: +32 bytes per k-step inside a K-major swizzle span.
namespace kdg {

template <int N>
struct WgmmaAcc {
  static_assert(N == 8 || N == 16 || N == 32 || N == 64 || N == 128 || N == 256, "wgmma m64nNk16: N");
  float x[N / 2];
};

struct WgmmaFragA { u32 x[4]; };

// Descriptor fields: start address, leading / stride byte offsets (all >> 4, 14 bits each), base offset
// (bits 49-51) and the layout (bits 62-63: 0 none, 1 128-byte, 2 64-byte, 3 32-byte swizzle).
// base_offset stays 0 for tiles aligned to their swizzle pattern (8·S bytes), the only case kdagen uses
// (and the only one the emulator models).
__device__ __forceinline__ u64 make_smem_desc(const void* start, u32 lbo_bytes, u32 sbo_bytes, int swizzle_bytes,
                                              u32 base_offset = 0) {
  const u64 layout = swizzle_bytes == 128 ? 1 : swizzle_bytes == 64 ? 2 : swizzle_bytes == 32 ? 3 : 0;
  return static_cast<u64>((smem_addr(start) & 0x3FFFF) >> 4) | static_cast<u64>((lbo_bytes >> 4) & 0x3FFF) << 16 |
         static_cast<u64>((sbo_bytes >> 4) & 0x3FFF) << 32 | static_cast<u64>(base_offset & 7) << 49 | layout << 62;
}

// The same descriptor with its start address moved by `bytes` (a multiple of 16, staying in the window).
__device__ __forceinline__ u64 smem_desc_advance(u64 desc, u32 bytes) { return desc + (bytes >> 4); }

__device__ __forceinline__ void wgmma_fence() { ptx_wgmma_fence(); }
__device__ __forceinline__ void wgmma_commit() { ptx_wgmma_commit(); }
template <int Pending>
__device__ __forceinline__ void wgmma_wait() { ptx_wgmma_wait<Pending>(); }

// Pin the accumulator (or an A fragment) in place around fence / commit / wait: call it after writing it
// with ordinary code before wgmma_fence(), and after wgmma_wait() before reading it.
template <int N>
__device__ __forceinline__ void wgmma_fence_operand(WgmmaAcc<N>& d) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i) ptx_fence_operand(d.x[i]);
}

__device__ __forceinline__ void wgmma_fence_operand(WgmmaFragA& a) {
#pragma unroll
  for (int i = 0; i < 4; ++i) ptx_fence_operand(a.x[i]);
}

// d = A·B + (scale_d ? d : 0) with A and B in shared memory; TA / TB: 0 K-major, 1 MN-major.
template <int TA, int TB, int N>
__device__ __forceinline__ void wgmma_ss(WgmmaAcc<N>& d, u64 desc_a, u64 desc_b, int scale_d) {
  ptx_wgmma_ss<N, TA, TB>(d.x, desc_a, desc_b, scale_d);
}

// d = A·B + (scale_d ? d : 0) with A from registers; the registers are read at issue.
template <int TB, int N>
__device__ __forceinline__ void wgmma_rs(WgmmaAcc<N>& d, const WgmmaFragA& a, u64 desc_b, int scale_d) {
  ptx_wgmma_rs<N, TB>(d.x, a.x, desc_b, scale_d);
}

template <int N>
__device__ __forceinline__ void wgmma_zero(WgmmaAcc<N>& d) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d.x[i] = 0.f;
}

// Columns [16S, 16S + 16) of an accumulator, rounded to bf16, as the A fragment of the next wgmma.
template <int S, int N>
__device__ __forceinline__ WgmmaFragA wgmma_frag_a_from_acc(const WgmmaAcc<N>& d) {
  static_assert(S >= 0 && 16 * S < N, "column slice outside the accumulator");
  WgmmaFragA a;
#pragma unroll
  for (int r = 0; r < 4; ++r) a.x[r] = pack_bf16(d.x[8 * S + 2 * r], d.x[8 * S + 2 * r + 1]);
  return a;
}

// Row (0..63) and column (0..N-1) of accumulator element i held by warpgroup thread t (0..127).
__device__ __forceinline__ int wgmma_acc_row(int t, int i) {
  return 16 * (t >> 5) + ((t & 31) >> 2) + 8 * ((i & 3) >> 1);
}
__device__ __forceinline__ int wgmma_acc_col(int t, int i) { return 8 * (i >> 2) + 2 * (t & 3) + (i & 1); }

}  // namespace kdg

#line 5 "templates/unit.cu.j2"
// ===== templates/sm90/tma.cuh =====
#line 1 "templates/sm90/tma.cuh"
// kdagen sm90: bulk tensor copies (TMA) and bulk copies from global into shared memory, completing on an
// mbarrier by transaction count; bulk tensor stores back to global, in bulk groups; and the swizzle pattern the
// tensor copies write.
//
// An mbarrier phase completes once its pending arrivals reach 0 and its tx-count is 0: the thread that
// issues the copies calls mbarrier_arrive_expect_tx(bar, bytes of all of them) (it may do so before or
// after issuing them; each copy subtracts its bytes when it lands), the consumers wait on the phase's
// parity. Before the first copy can complete on a barrier, the initialising thread runs
// fence_mbarrier_init() after mbarrier_init, followed by a CTA barrier.
namespace kdg {

// A CUtensorMap (128 bytes), declared here because NVRTC has no cuda.h. The host encodes it
// (kdagen.runtime.tensormap; the CPU emulator has its own encoding); kernels take it by value as
// `const __grid_constant__ kdg::TensorMap name` and pass &name to the loads below.
struct alignas(64) TensorMap { unsigned long long opaque[16]; };

__device__ __forceinline__ void fence_proxy_async() { ptx_fence_proxy_async_shared(); }
__device__ __forceinline__ void fence_mbarrier_init() { ptx_fence_mbarrier_init(); }

__device__ __forceinline__ void mbarrier_arrive_expect_tx(u64* bar, u32 bytes) {
  ptx_mbarrier_arrive_expect_tx(bar, bytes);
}
__device__ __forceinline__ void mbarrier_expect_tx(u64* bar, u32 bytes) { ptx_mbarrier_expect_tx(bar, bytes); }

// Spin (try_wait may suspend the thread in hardware) until the phase with this parity has completed.
__device__ __forceinline__ void mbarrier_wait_try(u64* bar, int parity) {
  while (!ptx_mbarrier_try_wait(bar, parity)) {
  }
}

// One box at coordinates (innermost first, in elements; the box may reach outside the tensor, where it
// reads 0) into dst (128-byte aligned; aligned to 8 x the swizzle span for the pattern of swizzle_offset),
// completing the box's bytes on bar. The innermost coordinate times the element size must be a multiple
// of 16 bytes (the GPU raises an illegal-instruction error otherwise).
__device__ __forceinline__ void tma_load_2d(void* dst, const TensorMap* map, int c0, int c1, u64* bar) {
  ptx_tma_load_2d(dst, map, c0, c1, bar);
}

__device__ __forceinline__ void tma_load_3d(void* dst, const TensorMap* map, int c0, int c1, int c2, u64* bar) {
  ptx_tma_load_3d(dst, map, c0, c1, c2, bar);
}

__device__ __forceinline__ void tma_load_4d(void* dst, const TensorMap* map, int c0, int c1, int c2, int c3,
                                            u64* bar) {
  ptx_tma_load_4d(dst, map, c0, c1, c2, c3, bar);
}

// The reverse of tma_load_2d: the box at these coordinates written from src (laid out as the load writes it,
// swizzle included), asynchronously. The threads that wrote src run fence_proxy_async() and a barrier before the
// issuing thread calls this; it then commits (bulk_commit) and, before src is written again or the CTA exits,
// waits until the copy has read it (bulk_wait_read<N>: at most N younger groups still reading). Box elements
// outside the tensor are not written.
__device__ __forceinline__ void tma_store_2d(const TensorMap* map, int c0, int c1, const void* src) {
  ptx_tma_store_2d(map, c0, c1, src);
}
__device__ __forceinline__ void bulk_commit() { ptx_bulk_commit_group(); }
template <int N>
__device__ __forceinline__ void bulk_wait_read() { ptx_bulk_wait_group_read<N>(); }

// Ask L2 for `bytes` (a multiple of 16) of global memory at p (16-byte aligned) that plain loads will read later:
// one thread issues it, nobody waits for it.
__device__ __forceinline__ void prefetch_l2(const void* p, u32 bytes) { ptx_prefetch_l2(p, bytes); }

// `bytes` (a multiple of 16) from src to dst, both 16-byte aligned, completing them on bar.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, u32 bytes, u64* bar) {
  ptx_bulk_load(dst, src, bytes, bar);
}

// Where a tensor copy with this swizzle (0, 32, 64, 128 bytes) stores the byte at `offset` of its box,
// relative to a destination aligned to 8 x the swizzle span. The box is laid out innermost dimension
// fastest, and with a swizzle each row of the box (its inner dimension, at most one span) starts a new
// span: offset = row * span + byte within the row. The 16-byte chunk index (bits 4..) is then XORed with
// the bits three places above it (bits 7..), modulo the span's chunk count. A wgmma operand with the
// same swizzle reads the same pattern (wgmma.cuh).
__device__ __forceinline__ u32 swizzle_offset(u32 offset, int swizzle_bytes) {
  return swizzle_bytes ? offset ^ (((offset >> 7) & static_cast<u32>(swizzle_bytes / 16 - 1)) << 4) : offset;
}

}  // namespace kdg

#line 4 "templates/wgmma64/dstate.cu.j2"
// ===== dstate: the state gradient's reverse recurrence, chunk 64 on bulk tensor copies and wgmma =====
// grid (N, HV, 2): one CTA per (sequence, value head, 64 value rows), 256 threads. The producer warp group's
// first thread fills a 2-stage ring (pipeline "chunk_ring") with each chunk's workspace tiles and dO rows, chunks last
// to first; the consumer warp group owns dSᵀ (64 value rows × K) as fp32 wgmma accumulators for the whole sequence.
// Per chunk, with dh = dS (the gradient of the state leaving the chunk), in the transposed form:
//   dVnᵀ = dOᵀ·Mqk + dhᵀ·k_to_endᵀ;  dXᵀ = dVnᵀ·A;  dSᵀ ← dSᵀ⊙decay_total + dOᵀ·q_decayed − (β⊙dX)ᵀ·k_decayed.
// dh enters as bf16 hi + lo (a per-head decay's gradient sums terms of it that cancel), dVnᵀ too (it feeds the C×C
// product); dOᵀ is exact (bf16 data) and (β⊙dX)ᵀ bf16, as the forward's update takes Vnᵀ.
namespace kdg_dstate {
using namespace kdg;
constexpr int C = 64, K = 128, V = 128, KD = 1, DW = 4;
constexpr int STAGES = 2, VR = 64, KA = K / 64;
constexpr bool STATE_V_FIRST = false;
#line 3 "templates/wgmma64/operands.cuh.j2"
constexpr int SW = 128;              // the tiles' swizzle span (bytes): one row of 64 bf16
constexpr int ATOM = 64 * 64;        // elements of one 64-row × 64-column swizzled tile

// Columns [16kk, 16kk + 16) of an accumulator as the bf16 register operand of the next product.
template <int N>
__device__ __forceinline__ WgmmaFragA frag_of(const WgmmaAcc<N>& d, int kk) {
  WgmmaFragA a;
#pragma unroll
  for (int r = 0; r < 4; ++r) a.x[r] = pack_bf16(d.x[8 * kk + 2 * r], d.x[8 * kk + 2 * r + 1]);
  return a;
}

// As frag_of, each column times its factor f[column] (a number per token): the operand of Accᵀ·diag(f)·B.
template <int N>
__device__ __forceinline__ WgmmaFragA frag_of_scaled(const WgmmaAcc<N>& d, int kk, const float* f, int t) {
  WgmmaFragA a;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int i = 8 * kk + 2 * r, col = wgmma_acc_col(t, i);   // elements i, i + 1: columns col, col + 1
    a.x[r] = pack_bf16(d.x[i] * f[col], d.x[i + 1] * f[col + 1]);
  }
  return a;
}

// The same split into bf16 hi + lo (x ≈ hi + lo): the product keeps close to fp32 accuracy.
template <int N>
__device__ __forceinline__ void frag_split(const WgmmaAcc<N>& d, int kk, WgmmaFragA& hi, WgmmaFragA& lo) {
#pragma unroll
  for (int r = 0; r < 4; ++r) split_bf16(d.x[8 * kk + 2 * r], d.x[8 * kk + 2 * r + 1], hi.x[r], lo.x[r]);
}

// k step kk (16 columns) of a K-major swizzled operand made of 64-column tiles of `atom` elements (64 rows by
// default; a [V][K] state tile has V rows per 64 columns): 32 bytes per step in a span.
__device__ __forceinline__ u64 k_major(const bf16* tiles, int kk, int atom = ATOM) {
  return make_smem_desc(tiles + (kk / 4) * atom + (kk % 4) * 16, 16, 8 * SW, SW);
}

// k step kk (16 rows) of an MN-major operand stored as tiles of 64 columns (k_to_end: rows are tokens, columns key
// channels): 8 rows per stride step, one tile of `atom` elements per 64 columns. For A operands (transpose-A) too.
__device__ __forceinline__ u64 n_major(const bf16* tiles, int kk, int atom = ATOM) {
  return make_smem_desc(tiles + kk * 16 * 64, atom * 2, 8 * SW, SW);
}

// Element (row, col) of a tile of 64 columns as the 128-byte swizzle lays it out (what a tensor copy writes and the
// descriptors read): a pair of adjacent columns (col even) as one 32-bit word.
__device__ __forceinline__ u32* swizzled_pair(bf16* tile, int row, int col) {
  return reinterpret_cast<u32*>(reinterpret_cast<char*>(tile) + swizzle_offset(row * SW + col * 2, SW));
}
__device__ __forceinline__ float swizzled_at(const bf16* tile, int row, int col) {
  return __bfloat162float(*reinterpret_cast<const bf16*>(reinterpret_cast<const char*>(tile) +
                                                         swizzle_offset(row * SW + col * 2, SW)));
}

// Tokens [16k, 16k + 16) of a [token][64 value rows] swizzled tile, transposed, as the register operand (value rows
// × tokens) of warpgroup thread t: by ldmatrix.trans, the 8×8 block at tokens 8nb.., values 16·warp + 8h.. gives
// each lane exactly its pair (value row, tokens 2q and 2q + 1) of n8 block nb and row half h, which is the
// operand's register 2(nb − 2k) + h; four blocks per ldmatrix.x4. Also an accumulator's columns, exactly (bf16).
__device__ __forceinline__ WgmmaFragA rows_t(const bf16* tile, int t, int k) {
  const int lane = t & 31, m = lane >> 3, token = 16 * k + 8 * (m >> 1) + (lane & 7);
  WgmmaFragA a;
  ptx_ldmatrix_x4_trans(a.x, reinterpret_cast<const char*>(tile) + swizzle_offset(token * SW + (16 * (t >> 5) + 8 * (m & 1)) * 2, SW));
  return a;
}

// rows_t of a tile of raw input rows (v, dO), read from a sequence's chunk: the token rows at or past L belong to the
// next sequence and may not be finite, so they are selected away (never multiplied by a zero that a NaN survives).
__device__ __forceinline__ WgmmaFragA rows_t(const bf16* tile, int t, int k, int L) {
  WgmmaFragA a = rows_t(tile, t, k);
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int token = 16 * k + 8 * (r >> 1) + 2 * (t & 3);   // the pair's first token; the second is in the high half
    a.x[r] = token >= L ? 0u : token + 1 >= L ? (a.x[r] & 0xffffu) : a.x[r];
  }
  return a;
}

// K/16 register operands (the columns of a [64][K] accumulator as bf16 pairs) into K/64 swizzled 64-column tiles:
// the staging a bulk tensor store of the [64][K] block reads.
__device__ __forceinline__ void stage_frags(bf16* tiles, const WgmmaFragA (&f)[K / 16], int t) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int e = 8 * kk + 2 * r, col = wgmma_acc_col(t, e);
      *swizzled_pair(tiles + (col / 64) * ATOM, wgmma_acc_row(t, e), col % 64) = f[kk].x[r];
    }
}

// The same from the accumulator itself, rounded to bf16.
__device__ __forceinline__ void stage_pairs(bf16* tiles, const WgmmaAcc<K>& d, int t) {
#pragma unroll
  for (int e = 0; e < K / 2; e += 2) {
    const int col = wgmma_acc_col(t, e);
    *swizzled_pair(tiles + (col / 64) * ATOM, wgmma_acc_row(t, e), col % 64) = pack_bf16(d.x[e], d.x[e + 1]);
  }
}

// Element (k, v) of one (sequence, head) block of h0 / the final state, stored [V, K] when v_first.
__device__ __forceinline__ long long state_index(int k, int v, bool v_first) {
  return v_first ? (long long)v * K + k : (long long)k * V + v;
}
#line 18 "templates/wgmma64/dstate.cu.j2"
}  // namespace kdg_dstate

#line 25 "templates/wgmma64/dstate.cu.j2"
extern "C" __global__ void __launch_bounds__(256, 1) dstate(
    const __grid_constant__ kdg::TensorMap map_q_decayed,
#line 1270 "gdn_sp_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_wgmma64_sm90a/backward.cu"
    const __grid_constant__ kdg::TensorMap map_k_decayed,
    const __grid_constant__ kdg::TensorMap map_k_to_end,
    const __grid_constant__ kdg::TensorMap map_A,
    const __grid_constant__ kdg::TensorMap map_Mqk,
    const __grid_constant__ kdg::TensorMap map_dO,
    const float* __restrict__ ws_decay_total,
    const float* __restrict__ ws_beta,
    const __grid_constant__ kdg::TensorMap map_dh_hi,
    const __grid_constant__ kdg::TensorMap map_dh_lo,
    const float* __restrict__ dht,
    float* __restrict__ grad_h0,
    float* __restrict__ dstate_start,
    int T,
    int N) {
#line 27 "templates/wgmma64/dstate.cu.j2"
  using namespace kdg_dstate;
  constexpr bool starts = false;   // the C pass: no dh stores, dS entering → dstate_start
#line 1288 "gdn_sp_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_wgmma64_sm90a/backward.cu"
  // shared memory: 215040 B, dynamic (above the static limit)
  KDG_DYNAMIC_SMEM(smem_raw);
  kdg::u64* const bar_ready = reinterpret_cast<kdg::u64*>(smem_raw + 0);  // mbarrier ready[2], arrive count 1
  kdg::u64* const bar_free = reinterpret_cast<kdg::u64*>(smem_raw + 16);  // mbarrier free[2], arrive count 128
  bf16* const s_q_decayed = reinterpret_cast<bf16*>(smem_raw + 1024);  // q_decayed [2 x 64 x 64] bf16, ld 64, 2 stages
  [[maybe_unused]] constexpr int ld_q_decayed = 64;
  constexpr int stride_q_decayed = 8192;  // elements per stage / warp copy
  bf16* const s_k_decayed = reinterpret_cast<bf16*>(smem_raw + 33792);  // k_decayed [2 x 64 x 64] bf16, ld 64, 2 stages
  [[maybe_unused]] constexpr int ld_k_decayed = 64;
  constexpr int stride_k_decayed = 8192;  // elements per stage / warp copy
  bf16* const s_k_to_end = reinterpret_cast<bf16*>(smem_raw + 66560);  // k_to_end [2 x 64 x 64] bf16, ld 64, 2 stages
  [[maybe_unused]] constexpr int ld_k_to_end = 64;
  constexpr int stride_k_to_end = 8192;  // elements per stage / warp copy
  bf16* const s_A = reinterpret_cast<bf16*>(smem_raw + 99328);  // A [64 x 64] bf16, ld 64, 2 stages
  [[maybe_unused]] constexpr int ld_A = 64;
  constexpr int stride_A = 4096;  // elements per stage / warp copy
  bf16* const s_Mqk = reinterpret_cast<bf16*>(smem_raw + 115712);  // Mqk [64 x 64] bf16, ld 64, 2 stages
  [[maybe_unused]] constexpr int ld_Mqk = 64;
  constexpr int stride_Mqk = 4096;  // elements per stage / warp copy
  bf16* const s_dO = reinterpret_cast<bf16*>(smem_raw + 132096);  // dO [1 x 64 x 64] bf16, ld 64, 2 stages
  [[maybe_unused]] constexpr int ld_dO = 64;
  constexpr int stride_dO = 4096;  // elements per stage / warp copy
  float* const s_decay_total = reinterpret_cast<float*>(smem_raw + 148480);  // decay_total [4] f32, ld 4, 2 stages
  constexpr int stride_decay_total = 4;  // elements per stage / warp copy
  float* const s_beta = reinterpret_cast<float*>(smem_raw + 148512);  // beta [64] f32, ld 64, 2 stages
  constexpr int stride_beta = 64;  // elements per stage / warp copy
  bf16* const s_dh_out = reinterpret_cast<bf16*>(smem_raw + 149504);  // dh_out [4 x 64 x 64] bf16, ld 64, 2 stages
  [[maybe_unused]] constexpr int ld_dh_out = 64;
  constexpr int stride_dh_out = 16384;  // elements per stage / warp copy
#line 30 "templates/wgmma64/dstate.cu.j2"
  static_assert(C == 64 && K % 64 == 0 && V == VR * 2, "64-token chunks, 64-column tiles, 64 rows per CTA");
  constexpr u32 STAGE_BYTES = 74000;
  const int n = blockIdx.x, h = blockIdx.y, HV = gridDim.y, slice = blockIdx.z;
  const Span seq = sequence_span(nullptr, T, n);
  const long long chunk0 = first_chunk(nullptr, T, C, n);
  const int num_chunks = (int)((seq.end - seq.begin + C - 1) / C);
#line 23 "templates/skeleton.j2"
  // barriers (plan): ready[2] × 1 (producer/elected, 74000 tx bytes); free[2] × 128 (consumer/thread)
#line 25 "templates/skeleton.j2"
  if (threadIdx.x == 0) {
#line 27 "templates/skeleton.j2"
    for (int kdg_s = 0; kdg_s < 2; ++kdg_s) kdg::mbarrier_init(&bar_ready[kdg_s], 1);
#line 27 "templates/skeleton.j2"
    for (int kdg_s = 0; kdg_s < 2; ++kdg_s) kdg::mbarrier_init(&bar_free[kdg_s], 128);
#line 30 "templates/skeleton.j2"
    kdg::fence_mbarrier_init();
#line 32 "templates/skeleton.j2"
  }
  __syncthreads();


#line 42 "templates/skeleton.j2"
  const int kdg_warp = threadIdx.x / 32;
#line 1342 "gdn_sp_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_wgmma64_sm90a/backward.cu"
  if (kdg_warp >= 0 && kdg_warp < 4) {  // role "producer": warps 0..3
#line 15 "templates/skeleton.j2"
    // ---- step load (producer, tma): one elected thread, chunks last to first: expect the stage's bytes, then its boxes and copies ----
#line 41 "templates/wgmma64/dstate.cu.j2"
    if (threadIdx.x == 0) {
      for (int i = 0; i < num_chunks; ++i) {
        const int s = i % STAGES, c = num_chunks - 1 - i;
        mbarrier_wait_try(&bar_free[s], ((i / STAGES) & 1) ^ 1);
        mbarrier_arrive_expect_tx(&bar_ready[s], STAGE_BYTES);
        const int row = (int)(((chunk0 + c) * HV + h) * C);      // the chunk's first row in the [.][K] workspaces
        const int tok = (int)(seq.begin + (long long)c * C);
    #pragma unroll
        for (int a = 0; a < KA; ++a) {
          tma_load_2d(s_q_decayed + s * stride_q_decayed + a * ATOM, &map_q_decayed, a * 64, row, &bar_ready[s]);
          tma_load_2d(s_k_decayed + s * stride_k_decayed + a * ATOM, &map_k_decayed, a * 64, row, &bar_ready[s]);
          tma_load_2d(s_k_to_end + s * stride_k_to_end + a * ATOM, &map_k_to_end, a * 64, row, &bar_ready[s]);
        }
        tma_load_2d(s_A + s * stride_A, &map_A, 0, row, &bar_ready[s]);
        tma_load_2d(s_Mqk + s * stride_Mqk, &map_Mqk, 0, row, &bar_ready[s]);
        // dO rows past the sequence's end (the next sequence's) are selected away where they are read (rows_t)
        tma_load_3d(s_dO + s * stride_dO, &map_dO, slice * VR, h, tok, &bar_ready[s]);
        bulk_load(s_decay_total + s * stride_decay_total, ws_decay_total + ((chunk0 + c) * HV + h) * DW, DW * 4,
                  &bar_ready[s]);
        bulk_load(s_beta + s * stride_beta, ws_beta + ((chunk0 + c) * HV + h) * C, C * 4, &bar_ready[s]);
      }
    }

#line 1370 "gdn_sp_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_wgmma64_sm90a/backward.cu"
  } else if (kdg_warp >= 4 && kdg_warp < 8) {  // role "consumer": warps 4..7
#line 64 "templates/wgmma64/dstate.cu.j2"
    const int t = threadIdx.x % 128;     // the consumer warp group's thread
    const int v0 = slice * VR;           // its value rows of dS
    WgmmaAcc<K> dS;                      // dSᵀ: rows v0.., all K columns
#line 15 "templates/skeleton.j2"
    // ---- step dstate_in (consumer, wgmma_acc): dSᵀ rows of this group from dht or 0 ----
#line 68 "templates/wgmma64/dstate.cu.j2"
    #pragma unroll
    for (int i = 0; i < K / 2; ++i) {
      const int r = wgmma_acc_row(t, i), k = wgmma_acc_col(t, i);
      dS.x[i] = dht != nullptr ? dht[((long long)n * HV + h) * K * V + state_index(k, v0 + r, STATE_V_FIRST)] : 0.f;
    }

    for (int i = 0; i < num_chunks; ++i) {
      const int s = i % STAGES, c = num_chunks - 1 - i;
      const bf16* const q_decayed = s_q_decayed + s * stride_q_decayed;
      const bf16* const k_decayed = s_k_decayed + s * stride_k_decayed;
      const bf16* const k_to_end = s_k_to_end + s * stride_k_to_end;
      const bf16* const A = s_A + s * stride_A;
      const bf16* const Mqk = s_Mqk + s * stride_Mqk;
      const bf16* const dO = s_dO + s * stride_dO;
      const float* const decay_total = s_decay_total + s * stride_decay_total;
      const float* const beta = s_beta + s * stride_beta;

#line 15 "templates/skeleton.j2"
      // ---- step dh_out (consumer, wgmma_acc): dhᵀ, the gradient of the state leaving the chunk, split bf16 hi + lo: the dvn step's register operands, and staged for one thread's bulk tensor stores into ws_dstate_hi / _lo ----
#line 86 "templates/wgmma64/dstate.cu.j2"
      // dhᵀ split once into bf16 hi + lo register operands; the same pairs staged (tile per 64 key columns, hi then
      // lo, two stagings in turn) for the bulk tensor stores into ws_dstate_hi / _lo
      WgmmaFragA dh_hi[K / 16], dh_lo[K / 16], dOt[C / 16];
      bf16* const staged = s_dh_out + (i % 2) * stride_dh_out;
    #pragma unroll
      for (int kk = 0; kk < K / 16; ++kk) frag_split(dS, kk, dh_hi[kk], dh_lo[kk]);
      if (!starts) {
        stage_frags(staged, dh_hi, t);
        stage_frags(staged + KA * ATOM, dh_lo, t);
      }
    #pragma unroll
      for (int kk = 0; kk < K / 16; ++kk) {
        wgmma_fence_operand(dh_hi[kk]);
        wgmma_fence_operand(dh_lo[kk]);
      }
      if (!starts) {
        fence_proxy_async();                   // the staged pairs, before the stores (async proxy) read them
        if (t == 0) bulk_wait_read<0>();       // the previous chunk's stores have read the other staging
        named_barrier_sync(1, 128);            // barrier "dh_staged"
      }
      if (!starts && t == 0) {
        const int at = (int)(((chunk0 + c) * HV + h) * V + v0);   // the rows of ws_dstate_hi / _lo seen [.][K]
    #pragma unroll
        for (int a = 0; a < KA; ++a) {
          tma_store_2d(&map_dh_hi, a * 64, at, staged + a * ATOM);
          tma_store_2d(&map_dh_lo, a * 64, at, staged + (KA + a) * ATOM);
        }
        bulk_commit();
      }
      mbarrier_wait_try(&bar_ready[s], (i / STAGES) & 1);

#line 15 "templates/skeleton.j2"
      // ---- step dvn (consumer, wgmma_acc): dVnᵀ = dOᵀ·Mqk + (dh_hi + dh_lo)ᵀ·k_to_endᵀ: dOᵀ by ldmatrix.trans, Mqk read N-major ----
#line 118 "templates/wgmma64/dstate.cu.j2"
      // Every register operand is written before wgmma_fence, so no product waits on another.
    #pragma unroll
      for (int kk = 0; kk < C / 16; ++kk) {
        dOt[kk] = rows_t(dO, t, kk, (int)min((long long)C, seq.end - seq.begin - (long long)c * C));
        wgmma_fence_operand(dOt[kk]);
      }
      WgmmaAcc<C> dVn;
      wgmma_zero(dVn);
      wgmma_fence_operand(dVn);
      wgmma_fence();
    #pragma unroll
      for (int kk = 0; kk < C / 16; ++kk) wgmma_rs<1>(dVn, dOt[kk], n_major(Mqk, kk), 1);   // (k = j, n = i) = Mqk[j][i]
    #pragma unroll
      for (int kk = 0; kk < K / 16; ++kk) {
        wgmma_rs<0>(dVn, dh_hi[kk], k_major(k_to_end, kk), 1);                            // (k, n = i) = k_to_end[i][k]
        wgmma_rs<0>(dVn, dh_lo[kk], k_major(k_to_end, kk), 1);
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operand(dVn);

#line 15 "templates/skeleton.j2"
      // ---- step dx (consumer, wgmma_acc): dXᵀ = dVnᵀ·A: A read N-major, dVnᵀ split bf16 hi + lo ----
#line 140 "templates/wgmma64/dstate.cu.j2"
      WgmmaFragA vh[C / 16], vl[C / 16];
    #pragma unroll
      for (int kk = 0; kk < C / 16; ++kk) {
        frag_split(dVn, kk, vh[kk], vl[kk]);
        wgmma_fence_operand(vh[kk]);
        wgmma_fence_operand(vl[kk]);
      }
      WgmmaAcc<C> dX;
      wgmma_zero(dX);
      wgmma_fence_operand(dX);
      wgmma_fence();
    #pragma unroll
      for (int kk = 0; kk < C / 16; ++kk) {
        wgmma_rs<1>(dX, vh[kk], n_major(A, kk), 1);                                         // (k = i, n = j) = A[i][j]
        wgmma_rs<1>(dX, vl[kk], n_major(A, kk), 1);
      }
      wgmma_commit();
      // while dXᵀ is on the tensor cores: dSᵀ decayed by the chunk's total (no operand of these products: dh_out took
      // its bf16 split), off the chain's path
    #pragma unroll
      for (int j = 0; j < K / 2; ++j) dS.x[j] *= decay_total[KD == 1 ? 0 : wgmma_acc_col(t, j)];
      wgmma_wait<0>();
      wgmma_fence_operand(dX);

#line 15 "templates/skeleton.j2"
      // ---- step dstate_update (consumer, wgmma_acc): dSᵀ ← dSᵀ⊙decay_total + dOᵀ·q_decayed − (β⊙dX)ᵀ·k_decayed (both read N-major, β⊙dX formed here); the stage is released ----
#line 165 "templates/wgmma64/dstate.cu.j2"
      // −(β⊙dX)ᵀ as the register operand: columns are tokens j, scaled by β_j
      WgmmaFragA nbdx[C / 16];
    #pragma unroll
      for (int i2 = 0; i2 < C / 2; ++i2) dX.x[i2] *= -beta[wgmma_acc_col(t, i2)];
    #pragma unroll
      for (int kk = 0; kk < C / 16; ++kk) {
        nbdx[kk] = frag_of(dX, kk);
        wgmma_fence_operand(nbdx[kk]);
      }
      wgmma_fence_operand(dS);
      wgmma_fence();
    #pragma unroll
      for (int kk = 0; kk < C / 16; ++kk) {
        wgmma_rs<1>(dS, dOt[kk], n_major(q_decayed, kk), 1);                               // (k = j, n) = q_decayed[j][n]
        wgmma_rs<1>(dS, nbdx[kk], n_major(k_decayed, kk), 1);
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operand(dS);
      mbarrier_arrive(&bar_free[s]);           // every read of stage s is done: the producer may refill it
    }

#line 15 "templates/skeleton.j2"
    // ---- step dstate_out (consumer, wgmma_acc): dh0: dS after the first chunk (dht, or zero, for an empty sequence); the C pass of a cut training call (entry dstate_starts: no dh stored, dht = 0) writes it to dstate_start ----
#line 188 "templates/wgmma64/dstate.cu.j2"
    if (!starts && t == 0) bulk_wait_read<0>();   // the last stores have read their staging before the CTA exits
    float* const dS_in = starts ? dstate_start : grad_h0;   // the C pass: the dS entering the segment
    if (dS_in != nullptr) {
    #pragma unroll
      for (int i = 0; i < K / 2; ++i) {
        const int r = wgmma_acc_row(t, i), k = wgmma_acc_col(t, i);
        dS_in[((long long)n * HV + h) * K * V + state_index(k, v0 + r, STATE_V_FIRST)] = dS.x[i];
      }
    }

#line 50 "templates/skeleton.j2"
  }
#line 200 "templates/wgmma64/dstate.cu.j2"
}



#line 4 "templates/wgmma64/chunk_bwd.cu.j2"
// ===== chunk_bwd: a chunk's backward from S_c and dh, chunk 64 on bulk tensor copies and wgmma =====
// grid (chunks, HV): one CTA per (chunk, value head), 384 threads; surplus CTAs of the chunk upper bound exit.
// The producer's first thread loads the chunk once (mbarrier "loaded", by transaction count): k_decayed, k_to_end,
// A, Mqk, v and dO boxes, Sᵀ (the forward's S_c), dhᵀ as bf16 hi + lo (dstate's), β and decay_total.
// Phase 1, consumer group g on value rows 64g.., transposed (value rows are wgmma's M):
//   Pᵀ = vᵀ − Sᵀ·k_decayedᵀ;  Xᵀ = β⊙Pᵀ;  Vnᵀ = Xᵀ·Aᵀ;  dVnᵀ = dOᵀ·Mqk + dhᵀ·k_to_endᵀ;  dXᵀ = dVnᵀ·A;
//   dv = β⊙dX;  Σ_v dX⊙P;  Xᵀ, Vnᵀ, dVnᵀ, (β⊙dX)ᵀ handed over as bf16 [V][C] tiles;  Σ_v S⊙dh.
// Phase 2, token rows are wgmma's M, the handed tiles read through the descriptors' transpose bits:
//   group 0: dMqk = tril₀(dO·Vnᵀ), dA = dVn·Xᵀ, T = dA·Aᵀ, dMkk = −tril₋₁(Aᵀ·T);
//   the last group: dO·Sᵀ, −(β⊙dX)·Sᵀ, Vn·dhᵀ ([C][K] each).
// Outputs per (chunk, head) in their workspaces' dtypes (the [C][K] ones bf16, the rest fp32), rows past the
// chunk's end zero: the workspaces prepare_bwd reads.
namespace kdg_chunk_bwd {
using namespace kdg;
constexpr int C = 64, K = 128, V = 128, KD = 1, DW = 4;
constexpr int CONSUMERS = 2, VR = 64, KA = K / 64;
constexpr int SATOM = V * 64;            // elements of one 64-column tile of a [V][K] state tile
#line 3 "templates/wgmma64/operands.cuh.j2"
constexpr int SW = 128;              // the tiles' swizzle span (bytes): one row of 64 bf16
constexpr int ATOM = 64 * 64;        // elements of one 64-row × 64-column swizzled tile

// Columns [16kk, 16kk + 16) of an accumulator as the bf16 register operand of the next product.
template <int N>
__device__ __forceinline__ WgmmaFragA frag_of(const WgmmaAcc<N>& d, int kk) {
  WgmmaFragA a;
#pragma unroll
  for (int r = 0; r < 4; ++r) a.x[r] = pack_bf16(d.x[8 * kk + 2 * r], d.x[8 * kk + 2 * r + 1]);
  return a;
}

// As frag_of, each column times its factor f[column] (a number per token): the operand of Accᵀ·diag(f)·B.
template <int N>
__device__ __forceinline__ WgmmaFragA frag_of_scaled(const WgmmaAcc<N>& d, int kk, const float* f, int t) {
  WgmmaFragA a;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int i = 8 * kk + 2 * r, col = wgmma_acc_col(t, i);   // elements i, i + 1: columns col, col + 1
    a.x[r] = pack_bf16(d.x[i] * f[col], d.x[i + 1] * f[col + 1]);
  }
  return a;
}

// The same split into bf16 hi + lo (x ≈ hi + lo): the product keeps close to fp32 accuracy.
template <int N>
__device__ __forceinline__ void frag_split(const WgmmaAcc<N>& d, int kk, WgmmaFragA& hi, WgmmaFragA& lo) {
#pragma unroll
  for (int r = 0; r < 4; ++r) split_bf16(d.x[8 * kk + 2 * r], d.x[8 * kk + 2 * r + 1], hi.x[r], lo.x[r]);
}

// k step kk (16 columns) of a K-major swizzled operand made of 64-column tiles of `atom` elements (64 rows by
// default; a [V][K] state tile has V rows per 64 columns): 32 bytes per step in a span.
__device__ __forceinline__ u64 k_major(const bf16* tiles, int kk, int atom = ATOM) {
  return make_smem_desc(tiles + (kk / 4) * atom + (kk % 4) * 16, 16, 8 * SW, SW);
}

// k step kk (16 rows) of an MN-major operand stored as tiles of 64 columns (k_to_end: rows are tokens, columns key
// channels): 8 rows per stride step, one tile of `atom` elements per 64 columns. For A operands (transpose-A) too.
__device__ __forceinline__ u64 n_major(const bf16* tiles, int kk, int atom = ATOM) {
  return make_smem_desc(tiles + kk * 16 * 64, atom * 2, 8 * SW, SW);
}

// Element (row, col) of a tile of 64 columns as the 128-byte swizzle lays it out (what a tensor copy writes and the
// descriptors read): a pair of adjacent columns (col even) as one 32-bit word.
__device__ __forceinline__ u32* swizzled_pair(bf16* tile, int row, int col) {
  return reinterpret_cast<u32*>(reinterpret_cast<char*>(tile) + swizzle_offset(row * SW + col * 2, SW));
}
__device__ __forceinline__ float swizzled_at(const bf16* tile, int row, int col) {
  return __bfloat162float(*reinterpret_cast<const bf16*>(reinterpret_cast<const char*>(tile) +
                                                         swizzle_offset(row * SW + col * 2, SW)));
}

// Tokens [16k, 16k + 16) of a [token][64 value rows] swizzled tile, transposed, as the register operand (value rows
// × tokens) of warpgroup thread t: by ldmatrix.trans, the 8×8 block at tokens 8nb.., values 16·warp + 8h.. gives
// each lane exactly its pair (value row, tokens 2q and 2q + 1) of n8 block nb and row half h, which is the
// operand's register 2(nb − 2k) + h; four blocks per ldmatrix.x4. Also an accumulator's columns, exactly (bf16).
__device__ __forceinline__ WgmmaFragA rows_t(const bf16* tile, int t, int k) {
  const int lane = t & 31, m = lane >> 3, token = 16 * k + 8 * (m >> 1) + (lane & 7);
  WgmmaFragA a;
  ptx_ldmatrix_x4_trans(a.x, reinterpret_cast<const char*>(tile) + swizzle_offset(token * SW + (16 * (t >> 5) + 8 * (m & 1)) * 2, SW));
  return a;
}

// rows_t of a tile of raw input rows (v, dO), read from a sequence's chunk: the token rows at or past L belong to the
// next sequence and may not be finite, so they are selected away (never multiplied by a zero that a NaN survives).
__device__ __forceinline__ WgmmaFragA rows_t(const bf16* tile, int t, int k, int L) {
  WgmmaFragA a = rows_t(tile, t, k);
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int token = 16 * k + 8 * (r >> 1) + 2 * (t & 3);   // the pair's first token; the second is in the high half
    a.x[r] = token >= L ? 0u : token + 1 >= L ? (a.x[r] & 0xffffu) : a.x[r];
  }
  return a;
}

// K/16 register operands (the columns of a [64][K] accumulator as bf16 pairs) into K/64 swizzled 64-column tiles:
// the staging a bulk tensor store of the [64][K] block reads.
__device__ __forceinline__ void stage_frags(bf16* tiles, const WgmmaFragA (&f)[K / 16], int t) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int e = 8 * kk + 2 * r, col = wgmma_acc_col(t, e);
      *swizzled_pair(tiles + (col / 64) * ATOM, wgmma_acc_row(t, e), col % 64) = f[kk].x[r];
    }
}

// The same from the accumulator itself, rounded to bf16.
__device__ __forceinline__ void stage_pairs(bf16* tiles, const WgmmaAcc<K>& d, int t) {
#pragma unroll
  for (int e = 0; e < K / 2; e += 2) {
    const int col = wgmma_acc_col(t, e);
    *swizzled_pair(tiles + (col / 64) * ATOM, wgmma_acc_row(t, e), col % 64) = pack_bf16(d.x[e], d.x[e + 1]);
  }
}

// Element (k, v) of one (sequence, head) block of h0 / the final state, stored [V, K] when v_first.
__device__ __forceinline__ long long state_index(int k, int v, bool v_first) {
  return v_first ? (long long)v * K + k : (long long)k * V + v;
}

#line 23 "templates/wgmma64/chunk_bwd.cu.j2"
// The pair of accumulator elements i, i + 1 as stored: rows past L (and, per `mask`, above the diagonal: 0 keeps
// j ≤ i, 1 keeps j < i, −1 keeps all) zero; `sign` −1 negates.
template <int N>
__device__ __forceinline__ float2 masked_pair(const WgmmaAcc<N>& d, int t, int i, int L, int mask, float sign) {
  const int r = wgmma_acc_row(t, i), c = wgmma_acc_col(t, i);
  const bool row_ok = r < L;
  return make_float2(row_ok && (mask < 0 || c + mask <= r) ? sign * d.x[i] : 0.f,
                     row_ok && (mask < 0 || c + 1 + mask <= r) ? sign * d.x[i + 1] : 0.f);
}
// An fp32 accumulator [64 token rows][N] to a row-major [C][N] output, masked (masked_pair).
template <int N>
__device__ __forceinline__ void store_rows(float* dst, const WgmmaAcc<N>& d, int t, int L, int mask, float sign) {
#pragma unroll
  for (int i = 0; i < N / 2; i += 2)
    *reinterpret_cast<float2*>(dst + (long long)wgmma_acc_row(t, i) * N + wgmma_acc_col(t, i)) =
        masked_pair(d, t, i, L, mask, sign);
}
// As bf16: a lane holds the pairs at columns c and c + 8 of a 16-column group; even and odd lanes of a quad swap
// one pair (shfl_xor 1) so each stores 4 adjacent elements (8 B) and the quad a whole 32-byte sector per row. All
// 32 lanes of the warp take part.
template <int N>
__device__ __forceinline__ void store_rows(bf16* dst, const WgmmaAcc<N>& d, int t, int L, int mask, float sign) {
  static_assert(N % 16 == 0, "bf16 rows are stored in 16-column groups");
  const bool odd = t & 1;
#pragma unroll
  for (int h = 0; h < 4; h += 2) {  // rows r and r + 8
    bf16* row = dst + (long long)wgmma_acc_row(t, h) * N + wgmma_acc_col(t, h) + (odd ? 6 : 0);
#pragma unroll
    for (int i = h; i < N / 2; i += 8) {  // the 16-column groups
      const float2 a = masked_pair(d, t, i, L, mask, sign), b = masked_pair(d, t, i + 4, L, mask, sign);
      const u32 lo = pack_bf16(a.x, a.y), hi = pack_bf16(b.x, b.y);
      const u32 got = __shfl_xor_sync(0xffffffffu, odd ? lo : hi, 1);
      *reinterpret_cast<uint2*>(row + 2 * (i - h)) = odd ? make_uint2(got, hi) : make_uint2(lo, got);
    }
  }
}

// An accumulator [64 rows][64] into a swizzled bf16 tile (as bf16, or its hi and lo parts).
__device__ __forceinline__ void put_tile(bf16* tile, const WgmmaAcc<64>& d, int t) {
#pragma unroll
  for (int i = 0; i < 32; i += 2)
    *swizzled_pair(tile, wgmma_acc_row(t, i), wgmma_acc_col(t, i)) = pack_bf16(d.x[i], d.x[i + 1]);
}
__device__ __forceinline__ void put_tile_split(bf16* hi, bf16* lo, const WgmmaAcc<64>& d, int t) {
#pragma unroll
  for (int i = 0; i < 32; i += 2) {
    u32 h, l;
    split_bf16(d.x[i], d.x[i + 1], h, l);
    *swizzled_pair(hi, wgmma_acc_row(t, i), wgmma_acc_col(t, i)) = h;
    *swizzled_pair(lo, wgmma_acc_row(t, i), wgmma_acc_col(t, i)) = l;
  }
}
}  // namespace kdg_chunk_bwd

extern "C" __global__ void __launch_bounds__(384, 1) chunk_bwd(
    const __grid_constant__ kdg::TensorMap map_k_decayed,
#line 1704 "gdn_sp_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_wgmma64_sm90a/backward.cu"
    const __grid_constant__ kdg::TensorMap map_k_to_end,
    const __grid_constant__ kdg::TensorMap map_A,
    const __grid_constant__ kdg::TensorMap map_Mqk,
    const __grid_constant__ kdg::TensorMap map_v,
    const __grid_constant__ kdg::TensorMap map_dO,
    const __grid_constant__ kdg::TensorMap map_ST,
    const __grid_constant__ kdg::TensorMap map_dh_hi,
    const __grid_constant__ kdg::TensorMap map_dh_lo,
    const float* __restrict__ ws_beta,
    const float* __restrict__ ws_decay_total,
    int T,
    int N,
    bf16* __restrict__ grad_v,
    bf16* __restrict__ ws_d_q_decayed,
    bf16* __restrict__ ws_d_k_decayed,
    bf16* __restrict__ ws_d_k_to_end,
    float* __restrict__ ws_dMqk,
    float* __restrict__ ws_dMkk,
    float* __restrict__ ws_d_decay_total,
    float* __restrict__ ws_dbeta) {
#line 79 "templates/wgmma64/chunk_bwd.cu.j2"
  using namespace kdg_chunk_bwd;
#line 1727 "gdn_sp_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_wgmma64_sm90a/backward.cu"
  // shared memory: 218112 B, dynamic (above the static limit)
  KDG_DYNAMIC_SMEM(smem_raw);
  kdg::u64* const bar_loaded = reinterpret_cast<kdg::u64*>(smem_raw + 0);  // mbarrier loaded[1], arrive count 1
  bf16* const s_k_decayed = reinterpret_cast<bf16*>(smem_raw + 1024);  // k_decayed [2 x 64 x 64] bf16, ld 64, alias kd_then_T
  [[maybe_unused]] constexpr int ld_k_decayed = 64;
  bf16* const s_k_to_end = reinterpret_cast<bf16*>(smem_raw + 17408);  // k_to_end [2 x 64 x 64] bf16, ld 64, alias kr_then_bdXT
  [[maybe_unused]] constexpr int ld_k_to_end = 64;
  bf16* const s_A = reinterpret_cast<bf16*>(smem_raw + 33792);  // A [64 x 64] bf16, ld 64
  [[maybe_unused]] constexpr int ld_A = 64;
  bf16* const s_Mqk = reinterpret_cast<bf16*>(smem_raw + 41984);  // Mqk [64 x 64] bf16, ld 64
  [[maybe_unused]] constexpr int ld_Mqk = 64;
  bf16* const s_v = reinterpret_cast<bf16*>(smem_raw + 50176);  // v [2 x 64 x 64] bf16, ld 64, alias v_then_XT
  [[maybe_unused]] constexpr int ld_v = 64;
  bf16* const s_dO = reinterpret_cast<bf16*>(smem_raw + 66560);  // dO [2 x 64 x 64] bf16, ld 64
  [[maybe_unused]] constexpr int ld_dO = 64;
  bf16* const s_ST = reinterpret_cast<bf16*>(smem_raw + 82944);  // ST [2 x 128 x 64] bf16, ld 64
  [[maybe_unused]] constexpr int ld_ST = 64;
  bf16* const s_dh_hi = reinterpret_cast<bf16*>(smem_raw + 115712);  // dh_hi [2 x 128 x 64] bf16, ld 64
  [[maybe_unused]] constexpr int ld_dh_hi = 64;
  bf16* const s_dh_lo = reinterpret_cast<bf16*>(smem_raw + 148480);  // dh_lo [2 x 128 x 64] bf16, ld 64
  [[maybe_unused]] constexpr int ld_dh_lo = 64;
  float* const s_beta = reinterpret_cast<float*>(smem_raw + 181248);  // beta [64] f32, ld 64
  float* const s_decay_total = reinterpret_cast<float*>(smem_raw + 181504);  // decay_total [4] f32, ld 4
  bf16* const s_XT = reinterpret_cast<bf16*>(smem_raw + 50176);  // XT [2 x 64 x 64] bf16, ld 64, alias v_then_XT
  [[maybe_unused]] constexpr int ld_XT = 64;
  bf16* const s_VnT = reinterpret_cast<bf16*>(smem_raw + 182272);  // VnT [2 x 64 x 64] bf16, ld 64
  [[maybe_unused]] constexpr int ld_VnT = 64;
  bf16* const s_dVnT = reinterpret_cast<bf16*>(smem_raw + 198656);  // dVnT [2 x 64 x 64] bf16, ld 64
  [[maybe_unused]] constexpr int ld_dVnT = 64;
  bf16* const s_bdXT = reinterpret_cast<bf16*>(smem_raw + 17408);  // bdXT [2 x 64 x 64] bf16, ld 64, alias kr_then_bdXT
  [[maybe_unused]] constexpr int ld_bdXT = 64;
  bf16* const s_T = reinterpret_cast<bf16*>(smem_raw + 1024);  // T [2 x 64 x 64] bf16, ld 64, alias kd_then_T
  [[maybe_unused]] constexpr int ld_T = 64;
  float* const s_dbeta_part = reinterpret_cast<float*>(smem_raw + 215040);  // dbeta_part [8 x 64] f32, ld 64
  [[maybe_unused]] constexpr int ld_dbeta_part = 64;
  float* const s_dgT_part = reinterpret_cast<float*>(smem_raw + 217088);  // dgT_part [2 x 128] f32, ld 128
  [[maybe_unused]] constexpr int ld_dgT_part = 128;
#line 81 "templates/wgmma64/chunk_bwd.cu.j2"
  static_assert(C == 64 && K % 64 == 0 && V == VR * CONSUMERS, "64-token chunks, 64-column tiles, 64 rows per group");
  constexpr u32 TX_BYTES = 180496;
  const int chunk = blockIdx.x, h = blockIdx.y, HV = gridDim.y;
  kdg::ChunkAt at;
  if (!kdg::locate_chunk(nullptr, nullptr, T, N, C, chunk, at)) return;
  const int L = at.L;
  const long long ws_ch = (long long)chunk * HV + h;   // this (chunk, head) in the workspaces
#line 23 "templates/skeleton.j2"
  // barriers (plan): loaded[1] × 1 (producer/elected, 180496 tx bytes)
#line 25 "templates/skeleton.j2"
  if (threadIdx.x == 0) {
#line 27 "templates/skeleton.j2"
    for (int kdg_s = 0; kdg_s < 1; ++kdg_s) kdg::mbarrier_init(&bar_loaded[kdg_s], 1);
#line 30 "templates/skeleton.j2"
    kdg::fence_mbarrier_init();
#line 32 "templates/skeleton.j2"
  }
  __syncthreads();


#line 42 "templates/skeleton.j2"
  const int kdg_warp = threadIdx.x / 32;
#line 1788 "gdn_sp_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_wgmma64_sm90a/backward.cu"
  if (kdg_warp >= 0 && kdg_warp < 4) {  // role "producer": warps 0..3, 40 registers
#line 46 "templates/skeleton.j2"
    kdg::ptx_setmaxnreg_dec<40>();
#line 15 "templates/skeleton.j2"
    // ---- step load (producer, tma): one elected thread: expect the chunk's bytes, then its boxes and copies (one stage: one chunk) ----
#line 93 "templates/wgmma64/chunk_bwd.cu.j2"
    if (threadIdx.x == 0) {
      mbarrier_arrive_expect_tx(&bar_loaded[0], TX_BYTES);
      const int row = (int)(ws_ch * C), vrow = (int)(ws_ch * V);
    #pragma unroll
      for (int a = 0; a < KA; ++a) {
        tma_load_2d(s_k_decayed + a * ATOM, &map_k_decayed, a * 64, row, &bar_loaded[0]);
        tma_load_2d(s_k_to_end + a * ATOM, &map_k_to_end, a * 64, row, &bar_loaded[0]);
    #pragma unroll
        for (int b = 0; b < V / 64; ++b) {
          tma_load_2d(s_ST + a * SATOM + b * ATOM, &map_ST, a * 64, vrow + b * 64, &bar_loaded[0]);
          tma_load_2d(s_dh_hi + a * SATOM + b * ATOM, &map_dh_hi, a * 64, vrow + b * 64, &bar_loaded[0]);
          tma_load_2d(s_dh_lo + a * SATOM + b * ATOM, &map_dh_lo, a * 64, vrow + b * 64, &bar_loaded[0]);
        }
      }
      tma_load_2d(s_A, &map_A, 0, row, &bar_loaded[0]);
      tma_load_2d(s_Mqk, &map_Mqk, 0, row, &bar_loaded[0]);
    #pragma unroll
      for (int g = 0; g < CONSUMERS; ++g) {
        tma_load_3d(s_v + g * ATOM, &map_v, g * VR, h, (int)at.t0, &bar_loaded[0]);
        tma_load_3d(s_dO + g * ATOM, &map_dO, g * VR, h, (int)at.t0, &bar_loaded[0]);
      }
      bulk_load(s_beta, ws_beta + ws_ch * C, C * 4, &bar_loaded[0]);
      bulk_load(s_decay_total, ws_decay_total + ws_ch * DW, DW * 4, &bar_loaded[0]);
    }

#line 1820 "gdn_sp_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_wgmma64_sm90a/backward.cu"
  } else if (kdg_warp >= 4 && kdg_warp < 12) {  // role "consumer": warps 4..11, 232 registers
#line 46 "templates/skeleton.j2"
    kdg::ptx_setmaxnreg_inc<232>();
#line 118 "templates/wgmma64/chunk_bwd.cu.j2"
    const int g = kdg_warp / 4 - 1;      // this consumer warp group
    const int t = threadIdx.x % 128;     // its thread
    const int tc = threadIdx.x - 128;    // the thread among all consumers
    const int v0 = g * VR;               // its value rows in phase 1
    mbarrier_wait_try(&bar_loaded[0], 0);

#line 15 "templates/skeleton.j2"
    // ---- step recompute (consumer, wgmma_acc): Pᵀ = vᵀ − Sᵀ·k_decayedᵀ, Xᵀ = β⊙Pᵀ, Vnᵀ = Xᵀ·Aᵀ (Xᵀ split bf16 hi + lo) ----
#line 125 "templates/wgmma64/chunk_bwd.cu.j2"
    WgmmaAcc<C> P, X, Vn;
    wgmma_zero(P);
    wgmma_fence_operand(P);
    wgmma_fence();
    #pragma unroll
    for (int kk = 0; kk < K / 16; ++kk) wgmma_ss<0, 0>(P, k_major(s_ST + v0 * 64, kk, SATOM), k_major(s_k_decayed, kk), 1);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operand(P);
    #pragma unroll
    for (int k = 0; k < C / 16; ++k) {   // Pᵀ ← vᵀ − Pᵀ (vᵀ by ldmatrix.trans), Xᵀ = β⊙Pᵀ
      const WgmmaFragA vv = rows_t(s_v + g * ATOM, t, k, L);
    #pragma unroll
      for (int mm = 0; mm < 4; ++mm) {
        const int i = 4 * (2 * k + (mm >> 1)) + 2 * (mm & 1);
        const __nv_bfloat162 vp = *reinterpret_cast<const __nv_bfloat162*>(&vv.x[mm]);
        P.x[i] = __low2float(vp) - P.x[i];
        P.x[i + 1] = __high2float(vp) - P.x[i + 1];
      }
    }
    #pragma unroll
    for (int i = 0; i < C / 2; ++i) X.x[i] = s_beta[wgmma_acc_col(t, i)] * P.x[i];
    WgmmaFragA xh[C / 16], xl[C / 16];   // read by the Vn products until the dvn step's wait
    {
    #pragma unroll
      for (int kk = 0; kk < C / 16; ++kk) {
        frag_split(X, kk, xh[kk], xl[kk]);
        wgmma_fence_operand(xh[kk]);
        wgmma_fence_operand(xl[kk]);
      }
      wgmma_zero(Vn);
      wgmma_fence_operand(Vn);
      wgmma_fence();
    #pragma unroll
      for (int kk = 0; kk < C / 16; ++kk) {
        wgmma_rs<0>(Vn, xh[kk], k_major(s_A, kk), 1);                       // (k = j, n = i) = A[i][j]
        wgmma_rs<0>(Vn, xl[kk], k_major(s_A, kk), 1);
      }
      wgmma_commit();
    }

#line 15 "templates/skeleton.j2"
    // ---- step dvn (consumer, wgmma_acc): dVnᵀ = dOᵀ·Mqk + (dh_hi + dh_lo)ᵀ·k_to_endᵀ ----
#line 167 "templates/wgmma64/chunk_bwd.cu.j2"
    WgmmaAcc<C> dVn, dX;
    {
      WgmmaFragA dOt[C / 16];
    #pragma unroll
      for (int kk = 0; kk < C / 16; ++kk) {
        dOt[kk] = rows_t(s_dO + g * ATOM, t, kk, L);
        wgmma_fence_operand(dOt[kk]);
      }
      wgmma_zero(dVn);
      wgmma_fence_operand(dVn);
      wgmma_fence();
    #pragma unroll
      for (int kk = 0; kk < C / 16; ++kk) wgmma_rs<1>(dVn, dOt[kk], n_major(s_Mqk, kk), 1);   // (k = j, n = i) = Mqk[j][i]
    #pragma unroll
      for (int kk = 0; kk < K / 16; ++kk) {
        wgmma_ss<0, 0>(dVn, k_major(s_dh_hi + v0 * 64, kk, SATOM), k_major(s_k_to_end, kk), 1);
        wgmma_ss<0, 0>(dVn, k_major(s_dh_lo + v0 * 64, kk, SATOM), k_major(s_k_to_end, kk), 1);
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operand(Vn);
      wgmma_fence_operand(dVn);
    #pragma unroll
      for (int kk = 0; kk < C / 16; ++kk) {
        wgmma_fence_operand(xh[kk]);
        wgmma_fence_operand(xl[kk]);
      }
    }

#line 15 "templates/skeleton.j2"
    // ---- step dx (consumer, wgmma_acc): dXᵀ = dVnᵀ·A (dVnᵀ split hi + lo); dv = β⊙dX; this warp's Σ_v dX⊙P ----
#line 197 "templates/wgmma64/chunk_bwd.cu.j2"
    {
      WgmmaFragA vh[C / 16], vl[C / 16];
    #pragma unroll
      for (int kk = 0; kk < C / 16; ++kk) {
        frag_split(dVn, kk, vh[kk], vl[kk]);
        wgmma_fence_operand(vh[kk]);
        wgmma_fence_operand(vl[kk]);
      }
      wgmma_zero(dX);
      wgmma_fence_operand(dX);
      wgmma_fence();
    #pragma unroll
      for (int kk = 0; kk < C / 16; ++kk) {
        wgmma_rs<1>(dX, vh[kk], n_major(s_A, kk), 1);                        // (k = i, n = j) = A[i][j]
        wgmma_rs<1>(dX, vl[kk], n_major(s_A, kk), 1);
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operand(dX);
    }
    {
      // this warp's Σ over its 16 value rows of dX⊙P per token: the two row halves in the thread, then the 8 lanes of a
      // column by shuffles (a fixed tree); lanes 0-3 hold the warp's sums for columns 8j + 2q + {0, 1}
      const int lane = t & 31, q = lane & 3;
      float part[C / 4];
    #pragma unroll
      for (int j = 0; j < C / 8; ++j)
    #pragma unroll
        for (int e = 0; e < 2; ++e) part[2 * j + e] = dX.x[4 * j + e] * P.x[4 * j + e] + dX.x[4 * j + 2 + e] * P.x[4 * j + 2 + e];
    #pragma unroll
      for (int m = 4; m < 32; m *= 2)
    #pragma unroll
        for (int j = 0; j < C / 4; ++j) part[j] += __shfl_xor_sync(0xffffffffu, part[j], m);
      if (lane < 4) {
    #pragma unroll
        for (int j = 0; j < C / 8; ++j)
    #pragma unroll
          for (int e = 0; e < 2; ++e) s_dbeta_part[(tc >> 5) * C + 8 * j + 2 * q + e] = part[2 * j + e];
      }
    }
    // dv = β⊙dX, straight from the accumulator (rows past the chunk's end are the next sequence's: not written)
    #pragma unroll
    for (int i = 0; i < C / 2; ++i) {
      const int r = wgmma_acc_row(t, i), j = wgmma_acc_col(t, i);
      dX.x[i] *= s_beta[j];
      if (j < L) grad_v[((at.t0 + j) * HV + h) * V + v0 + r] = __float2bfloat16_rn(dX.x[i]);
    }

#line 15 "templates/skeleton.j2"
    // ---- step handoff (consumer, wgmma_acc): Xᵀ, Vnᵀ, dVnᵀ, (β⊙dX)ᵀ as bf16 [V][C] tiles (over v and k_to_end, whose readers are done); this thread's Σ_v S⊙dh ----
#line 246 "templates/wgmma64/chunk_bwd.cu.j2"
    named_barrier_sync(1, 128 * CONSUMERS);    // barrier "tiles_free": v, k_to_end and Mqk are read by every group
    put_tile(s_XT + g * ATOM, X, t);
    put_tile(s_VnT + g * ATOM, Vn, t);
    put_tile(s_dVnT + g * ATOM, dVn, t);
    put_tile(s_bdXT + g * ATOM, dX, t);
    {
      // Σ_v S⊙dh for key channel k over this thread's part of the value rows
      constexpr int PARTS = 128 * CONSUMERS / K, ROWS = V / PARTS;
      const int k = tc % K, part = tc / K;
      const bf16* const st = s_ST + (k / 64) * SATOM;
      const bf16* const hi = s_dh_hi + (k / 64) * SATOM;
      const bf16* const lo = s_dh_lo + (k / 64) * SATOM;
      float sum = 0.f;
      for (int v = part * ROWS; v < (part + 1) * ROWS; ++v)
        sum += swizzled_at(st, v, k % 64) * (swizzled_at(hi, v, k % 64) + swizzled_at(lo, v, k % 64));
      s_dgT_part[part * K + k] = sum;
    }
    fence_proxy_async();                       // the tiles' generic stores, before wgmma reads them
    named_barrier_sync(2, 128 * CONSUMERS);    // barrier "handoff"

#line 15 "templates/skeleton.j2"
    // ---- step sums (consumer, thread): the partials of Σ_v dX⊙P and of e^Γl⊙Σ_v S⊙dh added in a fixed order ----
#line 267 "templates/wgmma64/chunk_bwd.cu.j2"
    if (tc < C) {
      float sum = 0.f;
      for (int w = 0; w < 4 * CONSUMERS; ++w) sum += s_dbeta_part[w * C + tc];
      ws_dbeta[ws_ch * C + tc] = tc < L ? sum : 0.f;
    }
    if (tc < K) {
      constexpr int PARTS = 128 * CONSUMERS / K;
      float sum = 0.f;
      for (int p = 0; p < PARTS; ++p) sum += s_dgT_part[p * K + tc];
      ws_d_decay_total[ws_ch * K + tc] = s_decay_total[KD == 1 ? 0 : tc] * sum;
    }

    if (g == 0) {
#line 15 "templates/skeleton.j2"
      // ---- step c_chain (consumer, wgmma_acc): group 0: dMqk = tril₀(dO·Vnᵀ), dA = dVn·Xᵀ, T = dA·Aᵀ (dA split hi + lo), dMkk = −tril₋₁(Aᵀ·T) (T staged as bf16 hi + lo tiles) ----
#line 281 "templates/wgmma64/chunk_bwd.cu.j2"
      WgmmaAcc<C> M, dA, Tm;
      wgmma_zero(M);
      wgmma_zero(dA);
      wgmma_fence_operand(M);
      wgmma_fence_operand(dA);
      wgmma_fence();
    #pragma unroll
      for (int kk = 0; kk < V / 16; ++kk) {
        wgmma_ss<0, 1>(M, k_major(s_dO, kk), n_major(s_VnT, kk), 1);      // (i, v) = dO[i][v]; (v, j) = Vnᵀ[v][j]
        wgmma_ss<1, 1>(dA, n_major(s_dVnT, kk), n_major(s_XT, kk), 1);    // (i, v) = dVnᵀ[v][i]; (v, j) = Xᵀ[v][j]
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operand(M);
      wgmma_fence_operand(dA);
      store_rows(ws_dMqk + ws_ch * C * C, M, t, L, 0, 1.f);
      {
        WgmmaFragA ah[C / 16], al[C / 16];
    #pragma unroll
        for (int kk = 0; kk < C / 16; ++kk) {
          frag_split(dA, kk, ah[kk], al[kk]);
          wgmma_fence_operand(ah[kk]);
          wgmma_fence_operand(al[kk]);
        }
        wgmma_zero(Tm);
        wgmma_fence_operand(Tm);
        wgmma_fence();
    #pragma unroll
        for (int kk = 0; kk < C / 16; ++kk) {
          wgmma_rs<0>(Tm, ah[kk], k_major(s_A, kk), 1);                     // (k = j, n = m) = A[m][j]
          wgmma_rs<0>(Tm, al[kk], k_major(s_A, kk), 1);
        }
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_fence_operand(Tm);
      }
      put_tile_split(s_T, s_T + ATOM, Tm, t);
      fence_proxy_async();
      named_barrier_sync(3, 128);              // barrier "t_staged"
      wgmma_zero(M);
      wgmma_fence_operand(M);
      wgmma_fence();
    #pragma unroll
      for (int kk = 0; kk < C / 16; ++kk) {
        wgmma_ss<1, 1>(M, n_major(s_A, kk), n_major(s_T, kk), 1);           // (m, i) = A[i][m]; (i, n) = T[i][n]
        wgmma_ss<1, 1>(M, n_major(s_A, kk), n_major(s_T + ATOM, kk), 1);
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operand(M);
      store_rows(ws_dMkk + ws_ch * C * C, M, t, L, 1, -1.f);
    }
    if (g == CONSUMERS - 1) {
#line 15 "templates/skeleton.j2"
      // ---- step k_products (consumer, wgmma_acc): the last group: dO·Sᵀ, −(β⊙dX)·Sᵀ, Vn·(dh_hi + dh_lo)ᵀ, each [C][K], stored as bf16 ----
#line 335 "templates/wgmma64/chunk_bwd.cu.j2"
      WgmmaAcc<K> D;
      // dO·Sᵀ: (i, v) = dO[i][v]; (v, k) = Sᵀ[v][k]
      wgmma_zero(D);
      wgmma_fence_operand(D);
      wgmma_fence();
    #pragma unroll
      for (int kk = 0; kk < V / 16; ++kk) wgmma_ss<0, 1>(D, k_major(s_dO, kk), n_major(s_ST, kk, SATOM), 1);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operand(D);
      store_rows(ws_d_q_decayed + ws_ch * C * K, D, t, L, -1, 1.f);
      // −(β⊙dX)·Sᵀ: (i, v) = (β⊙dX)ᵀ[v][i]
      wgmma_zero(D);
      wgmma_fence_operand(D);
      wgmma_fence();
    #pragma unroll
      for (int kk = 0; kk < V / 16; ++kk) wgmma_ss<1, 1>(D, n_major(s_bdXT, kk), n_major(s_ST, kk, SATOM), 1);
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operand(D);
      store_rows(ws_d_k_decayed + ws_ch * C * K, D, t, L, -1, -1.f);
      // Vn·dhᵀ: (i, v) = Vnᵀ[v][i]; (v, k) = dhᵀ[v][k], hi + lo
      wgmma_zero(D);
      wgmma_fence_operand(D);
      wgmma_fence();
    #pragma unroll
      for (int kk = 0; kk < V / 16; ++kk) {
        wgmma_ss<1, 1>(D, n_major(s_VnT, kk), n_major(s_dh_hi, kk, SATOM), 1);
        wgmma_ss<1, 1>(D, n_major(s_VnT, kk), n_major(s_dh_lo, kk, SATOM), 1);
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operand(D);
      store_rows(ws_d_k_to_end + ws_ch * C * K, D, t, L, -1, 1.f);
    }

#line 50 "templates/skeleton.j2"
  }
#line 373 "templates/wgmma64/chunk_bwd.cu.j2"
}

#line 63 "templates/wgmma64/prepare_bwd.cu.j2"
// ===== prepare_bwd: prepare_bwd at chunk 64, from chunk_bwd's products to input gradients =====
// grid (chunks upper bound, H q/k heads), 512 threads (role "all"). Mappings:
//   row     the emitted blocks' (as mma16's prepare_bwd): token row i = pass·ROWS + tid / LPR, LPR lanes per row,
//           KPT consecutive channels each, PASSES passes of ROWS rows;
#line 71 "templates/wgmma64/prepare_bwd.cu.j2"
//   scan_then_thread  one warp scans the per-head decay's Γ, two rows per lane, then every thread (block_factors);
#line 73 "templates/wgmma64/prepare_bwd.cu.j2"
//   warp_channels  warp w owns channels [w·CW, w·CW + CW) of every row (contractions "mma"): every 16-row block pair
//           is a bf16 hi + lo mma.m16n8k16 product, dMqk and dMkk split once into tiles read by ldmatrix,
#line 80 "templates/wgmma64/prepare_bwd.cu.j2"
//           the per-head decay's pair factors e^(Γi−Γj) ≤ 1 in them: the other side is raw q̂, k̂.
#line 86 "templates/wgmma64/prepare_bwd.cu.j2"
// The CTA owns q/k head jh and loops over its G value heads h = jh·G + gi; dq̂, dk̂ summed over them in registers.
#line 95 "templates/wgmma64/prepare_bwd.cu.j2"
namespace kdg_prepare_bwd {
using namespace kdg;

constexpr int C = 64, B = 16, NB = C / B, K = 128, G = 1, THREADS = 512;
constexpr int LPR = 16, KPT = 8, ROWS = THREADS / LPR, PASSES = C / ROWS;
constexpr int PARTS = 4, OWN = NB / PARTS, WARPS = THREADS / 32;
constexpr float LOG2E = 1.4426950408889634f;
static_assert(LPR * KPT == K && ROWS * PASSES == C, "row mapping: whole rows per pass");
static_assert(PARTS * K == THREADS && OWN * PARTS == NB && K % 32 == 0, "column_blocks: whole blocks per thread");
#line 105 "templates/wgmma64/prepare_bwd.cu.j2"
constexpr int CW = K / WARPS, NT = CW / 8;         // mma: channels per warp, n-tiles of 8
constexpr int MID = 7;                           // the row of a block its factors are taken about
static_assert(NT * 8 * WARPS == K, "mma: whole n-tiles per warp");

#line 110 "templates/wgmma64/prepare_bwd.cu.j2"
// The emitted blocks reduce a token row with this.
__device__ __forceinline__ float row_sum(float x) { return group_sum<LPR>(x); }

}  // namespace kdg_prepare_bwd

extern "C" __global__ void __launch_bounds__(512, 1) prepare_bwd(
    const bf16* __restrict__ in_q,
#line 2134 "gdn_sp_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_wgmma64_sm90a/backward.cu"
    const bf16* __restrict__ in_k,
    const bf16* __restrict__ in_g,
    const bf16* __restrict__ in_beta,
    const float* __restrict__ in_dt_bias,
    const float* __restrict__ in_A_log,
    float sc_scale,
    const bf16* __restrict__ ws_d_q_decayed,
    const bf16* __restrict__ ws_d_k_decayed,
    const bf16* __restrict__ ws_d_k_to_end,
    const float* __restrict__ ws_dMqk,
    const float* __restrict__ ws_dMkk,
    const float* __restrict__ ws_d_decay_total,
    const float* __restrict__ ws_dbeta,
    bf16* __restrict__ grad_in_q,
    bf16* __restrict__ grad_in_k,
    bf16* __restrict__ grad_in_g,
    bf16* __restrict__ grad_in_beta,
    float* __restrict__ ws_part_dt_bias,
    float* __restrict__ ws_part_A_log,
    int T,
    int N) {
#line 117 "templates/wgmma64/prepare_bwd.cu.j2"
  using namespace kdg_prepare_bwd;
#line 2158 "gdn_sp_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_wgmma64_sm90a/backward.cu"
  // shared memory: 211456 B, dynamic (above the static limit)
  KDG_DYNAMIC_SMEM(smem_raw);
  float* const s_q_hat = reinterpret_cast<float*>(smem_raw + 0);  // q_hat [64 x 128] f32, ld 132
  [[maybe_unused]] constexpr int ld_q_hat = 132;
  float* const s_k_hat = reinterpret_cast<float*>(smem_raw + 33792);  // k_hat [64 x 128] f32, ld 132
  [[maybe_unused]] constexpr int ld_k_hat = 132;
  float* const s_U = reinterpret_cast<float*>(smem_raw + 67584);  // U [64 x 128] f32, ld 132
  [[maybe_unused]] constexpr int ld_U = 132;
  float* const s_W = reinterpret_cast<float*>(smem_raw + 101376);  // W [64 x 128] f32, ld 132
  [[maybe_unused]] constexpr int ld_W = 132;
  float* const s_dgc = reinterpret_cast<float*>(smem_raw + 135168);  // dgc [64 x 128] f32, ld 132
  [[maybe_unused]] constexpr int ld_dgc = 132;
  float* const s_beta = reinterpret_cast<float*>(smem_raw + 168960);  // beta [64] f32, ld 64
  float* const s_kR_part = reinterpret_cast<float*>(smem_raw + 169216);  // kR_part [64 x 16] f32, ld 16
  [[maybe_unused]] constexpr int ld_kR_part = 16;
  bf16* const s_dM = reinterpret_cast<bf16*>(smem_raw + 173312);  // dM [4 x 64 x 64] bf16, ld 72
  [[maybe_unused]] constexpr int ld_dM = 72;
  float* const s_kbr_total = reinterpret_cast<float*>(smem_raw + 210176);  // kbr_total [128] f32, ld 128
  float* const s_gamma = reinterpret_cast<float*>(smem_raw + 210688);  // gamma [3 x 64] f32, ld 64
  [[maybe_unused]] constexpr int ld_gamma = 64;
#line 120 "templates/wgmma64/prepare_bwd.cu.j2"
  constexpr int LDT = ld_q_hat, LDM = ld_dM, KRP = ld_kR_part;  // [C][K], [C][C] row pitches; kR partials
  static_assert(ld_k_hat == LDT && ld_U == LDT && ld_W == LDT && ld_dgc == LDT && LDM % 8 == 0,
                "one pitch per tile shape; 16-byte rows");
  bf16* const s_dMqk_hi = s_dM;                      // the split tiles, one after the other
  bf16* const s_dMqk_lo = s_dM + C * LDM;
  bf16* const s_dMkk_hi = s_dM + 2 * C * LDM;
  bf16* const s_dMkk_lo = s_dM + 3 * C * LDM;
#line 132 "templates/wgmma64/prepare_bwd.cu.j2"
  const int c = blockIdx.x, jh = blockIdx.y, H = gridDim.y, HV = H * G;  // jh: the q/k head
  ChunkAt at;                                        // the grid is an upper bound on the chunk count
  if (!locate_chunk(nullptr, nullptr, T, N, C, c, at)) return;
  const int tid = threadIdx.x, rl = tid % LPR, d0 = rl * KPT;      // row mapping
#line 140 "templates/wgmma64/prepare_bwd.cu.j2"
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4, ch0 = warp * CW;   // mma mapping
#line 142 "templates/wgmma64/prepare_bwd.cu.j2"
  const float core_scale = sc_scale;
  const long long tok0 = at.t0;
  const int L = at.L;

#line 15 "templates/skeleton.j2"
  // ---- step prefetch (all, thread0): one thread asks L2 for the chunk's gradients of every value head (bulk prefetches, not waited for): the later plain loads meet L2 ----
#line 147 "templates/wgmma64/prepare_bwd.cu.j2"
  if (tid == 0) {
    for (int gi = 0; gi < G; ++gi) {
      const long long ws = (long long)c * HV + jh * G + gi;
      kdg::prefetch_l2(ws_dMqk + ws * C * C, C * C * 4);
      kdg::prefetch_l2(ws_dMkk + ws * C * C, C * C * 4);
      kdg::prefetch_l2(ws_d_q_decayed + ws * C * K, C * K * (int)sizeof(*ws_d_q_decayed));
      kdg::prefetch_l2(ws_d_k_decayed + ws * C * K, C * K * (int)sizeof(*ws_d_k_decayed));
      kdg::prefetch_l2(ws_d_k_to_end + ws * C * K, C * K * (int)sizeof(*ws_d_k_to_end));
    }
  }

#line 15 "templates/skeleton.j2"
  // ---- step prologue_qk (all, row): emitted, in passes of threads / 16 rows: q̂, k̂ of the q/k head (rows past the chunk's end zero) ----
#line 2215 "gdn_sp_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_wgmma64_sm90a/backward.cu"
#pragma unroll
#line 160 "templates/wgmma64/prepare_bwd.cu.j2"
  for (int pass = 0; pass < PASSES; ++pass) {
    const int i = pass * ROWS + tid / LPR;
    const bool valid = i < L;
    const long long tok = tok0 + i;
#line 2222 "gdn_sp_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_wgmma64_sm90a/backward.cu"
    const bf16* in_k_row = in_k + (tok * H + jh) * K + d0;
    const bf16* in_q_row = in_q + (tok * H + jh) * K + d0;
    // k: token_input
    float n_k[KPT];
    kdg::load_row(n_k, in_k_row, valid);
    // q: token_input
    float n_q[KPT];
    kdg::load_row(n_q, in_q_row, valid);
    // l2norm_6 = l2norm(k)
    float n_l2norm_6[KPT];
    {
      float ss = 0.f;
      #pragma unroll
      for (int j = 0; j < KPT; ++j) ss += n_k[j] * n_k[j];
      const float r = rsqrtf(row_sum(ss) + 1e-06f);
      #pragma unroll
      for (int j = 0; j < KPT; ++j) n_l2norm_6[j] = n_k[j] * r;
    }
    // l2norm_5 = l2norm(q)
    float n_l2norm_5[KPT];
    {
      float ss = 0.f;
      #pragma unroll
      for (int j = 0; j < KPT; ++j) ss += n_q[j] * n_q[j];
      const float r = rsqrtf(row_sum(ss) + 1e-06f);
      #pragma unroll
      for (int j = 0; j < KPT; ++j) n_l2norm_5[j] = n_q[j] * r;
    }
    float qh_out[KPT];
    #pragma unroll
    for (int j = 0; j < KPT; ++j) qh_out[j] = n_l2norm_5[j];
    float kh_out[KPT];
    #pragma unroll
    for (int j = 0; j < KPT; ++j) kh_out[j] = n_l2norm_6[j];
#line 166 "templates/wgmma64/prepare_bwd.cu.j2"
#pragma unroll
    for (int e = 0; e < KPT; ++e) {
      s_q_hat[i * LDT + d0 + e] = valid ? qh_out[e] : 0.f;
      s_k_hat[i * LDT + d0 + e] = valid ? kh_out[e] : 0.f;
    }
  }
#line 173 "templates/wgmma64/prepare_bwd.cu.j2"
  kdg::FragC dq_sum[NB][NT], dk_sum[NB][NT];        // mma mapping: dq̂, dk̂ of the own elements, over value heads
#pragma unroll
  for (int I = 0; I < NB; ++I)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      kdg::frag_zero(dq_sum[I][nt]);
      kdg::frag_zero(dk_sum[I][nt]);
    }

#line 185 "templates/wgmma64/prepare_bwd.cu.j2"
#pragma unroll 1
  for (int gi = 0; gi < G; ++gi) {
    const int h = jh * G + gi;
    const long long ws = (long long)c * HV + h;     // this (chunk, value head) in the workspaces
    const auto* const d_qd = ws_d_q_decayed + ws * C * K;   // this (chunk, head)'s [C][K] gradients
    const auto* const d_kd = ws_d_k_decayed + ws * C * K;
    const auto* const d_kr = ws_d_k_to_end + ws * C * K;
    __syncthreads();                                // barrier "sync": q̂, k̂ written; the previous head is done

#line 15 "templates/skeleton.j2"
    // ---- step prologue_v (all, row): emitted, per value head: a (into U's tile; a per-head decay copied to every channel), β ----
#line 2286 "gdn_sp_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_wgmma64_sm90a/backward.cu"
#pragma unroll 2
#line 210 "templates/wgmma64/prepare_bwd.cu.j2"
    for (int pass = 0; pass < PASSES; ++pass) {
      const int i = pass * ROWS + tid / LPR;
      const bool valid = i < L;
      const long long tok = tok0 + i;
#line 2293 "gdn_sp_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_wgmma64_sm90a/backward.cu"
      const float* in_A_log_row = in_A_log + h;
      const bf16* in_beta_row = in_beta + tok * HV + h;
      const float* in_dt_bias_row = in_dt_bias + h;
      const bf16* in_g_row = in_g + tok * HV + h;
      // A_log: head_param
      const float n_A_log = *in_A_log_row;
      // beta: token_input
      const float n_beta = valid ? kdg::to_f32(*in_beta_row) : 0.f;
      // dt_bias: head_param
      const float n_dt_bias = *in_dt_bias_row;
      // g: token_input
      const float n_g = valid ? kdg::to_f32(*in_g_row) : 0.f;
      // exp_1 = exp(A_log)
      const float n_exp_1 = expf(n_A_log);
      // add_0 = add(g, dt_bias)
      const float n_add_0 = (n_g + n_dt_bias);
      // sigmoid_7 = sigmoid(beta)
      const float n_sigmoid_7 = kdg::sigmoid(n_beta);
      // softplus_2 = softplus(add_0)
      const float n_softplus_2 = kdg::softplus(n_add_0, 20.0f);
      // mul_3 = mul(exp_1, softplus_2)
      const float n_mul_3 = (n_exp_1 * n_softplus_2);
      // neg_4 = neg(mul_3)
      const float n_neg_4 = (-n_mul_3);
      const float a_out = n_neg_4;
      const float beta_out = n_sigmoid_7;
#line 216 "templates/wgmma64/prepare_bwd.cu.j2"
#pragma unroll
      for (int e = 0; e < KPT; ++e)                 // tail rows: a = 0 (α = 1), β = 0
        s_U[i * LDT + d0 + e] = valid ? a_out : 0.f;
      if (rl == 0) s_beta[i] = valid ? beta_out : 0.f;
    }
#line 222 "templates/wgmma64/prepare_bwd.cu.j2"
    __syncthreads();                                // barrier "sync": a and β written

#line 15 "templates/skeleton.j2"
    // ---- step block_factors (all, scan_then_thread): one warp scans Γ, the per-head decay's cumsum, down the chunk (a shuffle scan, two rows per lane) into gamma with each row's e^Γi and e^(Γl−Γi); then every thread copies them into U's and W's tiles (U_i = e^Γi, W_i = e^(Γl−Γi) in every channel) ----
#line 254 "templates/wgmma64/prepare_bwd.cu.j2"
    static_assert(C == 64 && LDT % 4 == 0, "block_factors: two rows per lane of one warp; 16-byte tile stores");
    if (tid < 32) {                                 // the per-head decay, a row's a in every channel alike: one warp
      // scans Γ down the chunk, two rows per lane, and forms each row's two factors once
      const int r = 2 * tid;
      const float a0 = s_U[r * LDT], a1 = s_U[(r + 1) * LDT];
      float incl = a0 + a1;                         // the lanes' pair sums, scanned (Hillis–Steele)
#pragma unroll
      for (int off = 1; off < 32; off *= 2) {
        const float up = __shfl_up_sync(0xffffffffu, incl, off);
        if (tid >= off) incl += up;
      }
      const float before = __shfl_up_sync(0xffffffffu, incl, 1);
      const float g0 = (tid ? before : 0.f) + a0, g1 = g0 + a1;                 // Γ of rows r, r + 1
      const float gl = __shfl_sync(0xffffffffu, g1, 31);                        // Γl
      s_gamma[r] = g0;
      s_gamma[r + 1] = g1;
      s_gamma[C + r] = exp2f(g0 * LOG2E);                                        // E_i = e^Γi
      s_gamma[C + r + 1] = exp2f(g1 * LOG2E);
      s_gamma[2 * C + r] = exp2f((gl - g0) * LOG2E);                             // e^(Γl−Γi)
      s_gamma[2 * C + r + 1] = exp2f((gl - g1) * LOG2E);
    }
    __syncthreads();
    for (int idx = 4 * tid; idx < C * K; idx += 4 * THREADS) {   // the rows' factors into every channel
      const int i = idx / K, j = idx % K;
      const float e = s_gamma[C + i], w = s_gamma[2 * C + i];
      *reinterpret_cast<float4*>(&s_U[i * LDT + j]) = make_float4(e, e, e, e);
      *reinterpret_cast<float4*>(&s_W[i * LDT + j]) = make_float4(w, w, w, w);
    }
#line 283 "templates/wgmma64/prepare_bwd.cu.j2"
    __syncthreads();

#line 15 "templates/skeleton.j2"
    // ---- step load_grads (all, thread): masked to tril₀ and tril₋₁, × e^(Γi−Γj) ≤ 1 (the per-head decay's pair factors), split once into bf16 hi + lo ----
#line 30 "templates/wgmma64/prepare_bwd.cu.j2"
    for (int idx = 4 * tid; idx < C * C; idx += 4 * THREADS) {   // 4 columns j..j+3 of row i
      const int i = idx / C, j = idx % C;
      float4 mq = *reinterpret_cast<const float4*>(&ws_dMqk[ws * C * C + idx]);
      float4 mk = *reinterpret_cast<const float4*>(&ws_dMkk[ws * C * C + idx]);
      float* q4 = &mq.x;
      float* k4 = &mk.x;
#pragma unroll
      for (int u = 0; u < 4; ++u) {                 // masked to tril₀ and tril₋₁
#line 39 "templates/wgmma64/prepare_bwd.cu.j2"
        const float F = j + u <= i ? expf(s_gamma[i] - s_gamma[j + u]) : 0.f;   // the pair factor e^(Γi−Γj) ≤ 1
        q4[u] = j + u <= i ? q4[u] * F : 0.f;
        k4[u] = j + u < i ? k4[u] * F : 0.f;
#line 46 "templates/wgmma64/prepare_bwd.cu.j2"
      }
#line 48 "templates/wgmma64/prepare_bwd.cu.j2"
      uint2 qh, ql, kh, kl;                         // split once: bf16 hi + lo
      kdg::split_bf16(q4[0], q4[1], qh.x, ql.x);
      kdg::split_bf16(q4[2], q4[3], qh.y, ql.y);
      kdg::split_bf16(k4[0], k4[1], kh.x, kl.x);
      kdg::split_bf16(k4[2], k4[3], kh.y, kl.y);
      *reinterpret_cast<uint2*>(&s_dMqk_hi[i * LDM + j]) = qh;
      *reinterpret_cast<uint2*>(&s_dMqk_lo[i * LDM + j]) = ql;
      *reinterpret_cast<uint2*>(&s_dMkk_hi[i * LDM + j]) = kh;
      *reinterpret_cast<uint2*>(&s_dMkk_lo[i * LDM + j]) = kl;
#line 61 "templates/wgmma64/prepare_bwd.cu.j2"
    }
#line 311 "templates/wgmma64/prepare_bwd.cu.j2"
    __syncthreads();

#line 15 "templates/skeleton.j2"
    // ---- step branch_grads (all, warp_channels): warp w, channels [8w, 8w + 8) of every row: b_q and R, then b_ki, as bf16 hi + lo mma.m16n8k16 products, every row block's sums live, each block's operand built once: dMqk, dMkk (or their transposes) by ldmatrix, the other side built in registers (raw k̂; scale·q̂, β·k̂); every block's chunk gradients asked for before the products ----
#line 315 "templates/wgmma64/prepare_bwd.cu.j2"
    // B fragment (K: 16 token rows from r0, N: 8 channels from ch) of mul·X·rs[row], split bf16
    // hi + lo
    auto frag_b = [&](const float* X, const float* S, const float* rs, float mul, int r0, int ch, kdg::FragB& hi,
                      kdg::FragB& lo) {
      float v[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = r0 + 2 * t + (e & 1) + 8 * (e >> 1);
        v[e] = mul * X[r * LDT + ch] * (S ? S[r * LDT + ch] : 1.f) * (rs ? rs[r] : 1.f);
      }
      kdg::split_bf16(v[0], v[1], hi.x[0], lo.x[0]);
      kdg::split_bf16(v[2], v[3], hi.x[1], lo.x[1]);
    };
#line 349 "templates/wgmma64/prepare_bwd.cu.j2"
    // Every row block's sums at once, so that each block's operand is built once per value head: the source blocks
    // in the outer loops, the accumulators of every target block live (unrolled: every register index a constant).
    kdg::FragC bq[NB][NT], R[NB][NT], bki[NB][NT];
#pragma unroll
    for (int I = 0; I < NB; ++I)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        kdg::frag_zero(bq[I][nt]);
        kdg::frag_zero(R[I][nt]);
        kdg::frag_zero(bki[I][nt]);
      }
    // every block's loaded gradients, asked for before the products so that their latency hides behind them (with
    // one CTA per SM nothing else would): as bf16 pairs, a word per lane's two adjacent columns, widened at use
    static_assert(sizeof(*d_qd) == 2, "branch_grads holds the chunk gradients as bf16 pairs");
    kdg::u32 w_qd[NB][NT][2], w_kd[NB][NT][2], w_kr[NB][NT][2];
#pragma unroll
    for (int I = 0; I < NB; ++I)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // elements 2h and 2h + 1: one row, adjacent columns
          const int at = (I * B + kdg::frag_c_row(lane, 2 * h)) * K + ch0 + 8 * nt + kdg::frag_c_col(lane, 2 * h);
          w_qd[I][nt][h] = *reinterpret_cast<const kdg::u32*>(d_qd + at);
          w_kd[I][nt][h] = *reinterpret_cast<const kdg::u32*>(d_kd + at);
          w_kr[I][nt][h] = *reinterpret_cast<const kdg::u32*>(d_kr + at);
        }
    // b_q, R: Σ_{J ≤ I} dM[I,J]·k̂_J, the source blocks J first to last
#pragma unroll
    for (int J = 0; J < NB; ++J) {
      kdg::FragB kh[NT], kl[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        frag_b(s_k_hat, nullptr, nullptr, 1.f, J * B, ch0 + 8 * nt + g, kh[nt], kl[nt]);
#line 386 "templates/wgmma64/prepare_bwd.cu.j2"
#pragma unroll
      for (int I = J; I < NB; ++I) {
#line 394 "templates/wgmma64/prepare_bwd.cu.j2"
        const int at = I * B * LDM + J * B;         // dM[I, J]
        const kdg::FragA aqh = kdg::load_frag_a(s_dMqk_hi + at, LDM, lane);
        const kdg::FragA aql = kdg::load_frag_a(s_dMqk_lo + at, LDM, lane);
        const kdg::FragA akh = kdg::load_frag_a(s_dMkk_hi + at, LDM, lane);
        const kdg::FragA akl = kdg::load_frag_a(s_dMkk_lo + at, LDM, lane);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          kdg::mma_16816_x3(bq[I][nt], aqh, aql, kh[nt], kl[nt]);
          kdg::mma_16816_x3(R[I][nt], akh, akl, kh[nt], kl[nt]);
        }
      }
    }
    // b_ki: Σ_{I2 ≥ I} dMqk[I2,I]ᵀ·(scale·q̂) + dMkk[I2,I]ᵀ·(β·k̂) over the rows of
    // I2, the source blocks I2 last to first
#pragma unroll
    for (int I2 = NB - 1; I2 >= 0; --I2) {
      kdg::FragB qh[NT], ql[NT], kh[NT], kl[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        frag_b(s_q_hat, nullptr, nullptr, core_scale, I2 * B, ch0 + 8 * nt + g, qh[nt], ql[nt]);
        frag_b(s_k_hat, nullptr, s_beta, 1.f, I2 * B, ch0 + 8 * nt + g, kh[nt], kl[nt]);
      }
#line 420 "templates/wgmma64/prepare_bwd.cu.j2"
#pragma unroll
      for (int I = 0; I <= I2; ++I) {
#line 425 "templates/wgmma64/prepare_bwd.cu.j2"
        const int at = I2 * B * LDM + I * B;        // dM[I2, I], read transposed
        const kdg::FragA aqh = kdg::load_frag_a_trans(s_dMqk_hi + at, LDM, lane);
        const kdg::FragA aql = kdg::load_frag_a_trans(s_dMqk_lo + at, LDM, lane);
        const kdg::FragA akh = kdg::load_frag_a_trans(s_dMkk_hi + at, LDM, lane);
        const kdg::FragA akl = kdg::load_frag_a_trans(s_dMkk_lo + at, LDM, lane);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          kdg::mma_16816_x3(bki[I][nt], aqh, aql, qh[nt], ql[nt]);
          kdg::mma_16816_x3(bki[I][nt], akh, akl, kh[nt], kl[nt]);
        }
      }
    }
#line 15 "templates/skeleton.j2"
    // ---- step branch_elements (all, warp_channels): each block's elements from the products' sums and the chunk gradients: b_kd, b_kr; dq̂ += b_q, dk̂ += Σb (registers); dgc; Σ_rows k̂⊙b_kr; Σ over the warp's channels of k̂⊙R ----
#line 441 "templates/wgmma64/prepare_bwd.cu.j2"
    // the elements of every block: b_q, b_kd, b_ki, b_kr; dq̂, dk̂ sums; dgc; Σ_rows k̂⊙b_kr and Σ_channels k̂⊙R
    // partials
    float kbr[NT][2] = {};
#pragma unroll
    for (int I = 0; I < NB; ++I) {
      float kR_rows[2] = {0.f, 0.f};
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#line 458 "templates/wgmma64/prepare_bwd.cu.j2"
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = I * B + kdg::frag_c_row(lane, e), ch = ch0 + 8 * nt + kdg::frag_c_col(lane, e);
          const bool valid = i < L;
          const float u = s_U[i * LDT + ch], w = s_W[i * LDT + ch];
          const float qv = s_q_hat[i * LDT + ch], kv = s_k_hat[i * LDT + ch];
#line 468 "templates/wgmma64/prepare_bwd.cu.j2"
          const float bq_i = bq[I][nt].x[e], R_i = R[I][nt].x[e], bki_i = bki[I][nt].x[e];
          const float E = u, Rend = w;
#line 471 "templates/wgmma64/prepare_bwd.cu.j2"
          const float g_qd = kdg::widen_bf16(w_qd[I][nt][e >> 1], e & 1);
          const float g_kd = kdg::widen_bf16(w_kd[I][nt][e >> 1], e & 1);
          const float g_kr = kdg::widen_bf16(w_kr[I][nt][e >> 1], e & 1);
          const float b_q = valid ? core_scale * (E * g_qd + bq_i) : 0.f;
          const float b_kd = valid ? E * g_kd + s_beta[i] * R_i : 0.f;
          const float b_kr = valid ? Rend * g_kr : 0.f;
          const float b_ki = valid ? bki_i : 0.f;
          dq_sum[I][nt].x[e] += b_q;
          dk_sum[I][nt].x[e] += b_kd + b_ki + b_kr;
          s_dgc[i * LDT + ch] = qv * b_q + kv * (b_kd - b_ki - b_kr);
          kbr[nt][e & 1] += kv * b_kr;
          kR_rows[e >> 1] += valid ? kv * R_i : 0.f;
        }
      }
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {               // the four lanes of a row (t), in a fixed tree
        float x = kR_rows[hh];
        x += __shfl_xor_sync(0xffffffffu, x, 1);
        x += __shfl_xor_sync(0xffffffffu, x, 2);
        if (t == 0) s_kR_part[(I * B + g + 8 * hh) * KRP + warp] = x;
      }
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int cc = 0; cc < 2; ++cc) {               // the eight row groups (g) of a column, in a fixed tree
        float x = kbr[nt][cc];
        x += __shfl_xor_sync(0xffffffffu, x, 4);
        x += __shfl_xor_sync(0xffffffffu, x, 8);
        x += __shfl_xor_sync(0xffffffffu, x, 16);
        if (g == 0) s_kbr_total[ch0 + 8 * nt + 2 * t + cc] = x;
      }
    __syncwarp();                                    // the warp's dgc columns and totals are written

#line 15 "templates/skeleton.j2"
    // ---- step reverse_cumsum (all, warp_channels): lane c of warp w, channel 8w + c: d_decay = suffix sum + d_decay_total + Σ_rows k̂⊙b_kr ----
#line 506 "templates/wgmma64/prepare_bwd.cu.j2"
    if (lane < CW) {
      const int ch = ch0 + lane;
      const float total = ws_d_decay_total[ws * K + ch] + s_kbr_total[ch];
      float rev = 0.f;
      for (int i = C - 1; i >= 0; --i) {
        rev += s_dgc[i * LDT + ch];
        s_dgc[i * LDT + ch] = rev + total;
      }
    }
#line 674 "templates/wgmma64/prepare_bwd.cu.j2"
    __syncthreads();

#line 15 "templates/skeleton.j2"
    // ---- step adjoint_v (all, row): emitted, in passes: the DSL backward graph per value head, seeded with d_decay and dβ = chunk_bwd's part + Σ k̂⊙R; each head parameter's per-token terms summed over this thread's rows into a pass-tall slice of W's tile (then U's) ----
#line 678 "templates/wgmma64/prepare_bwd.cu.j2"
    float part_dt_bias = 0.f;  // this thread's rows of ddt_bias
#line 678 "templates/wgmma64/prepare_bwd.cu.j2"
    float part_A_log = 0.f;  // this thread's rows of dA_log
#line 2564 "gdn_sp_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_wgmma64_sm90a/backward.cu"
#pragma unroll 2
#line 681 "templates/wgmma64/prepare_bwd.cu.j2"
    for (int pass = 0; pass < PASSES; ++pass) {
      const int i = pass * ROWS + tid / LPR;
      const bool valid = i < L;
      const long long tok = tok0 + i;
      float kR = 0.f;
#pragma unroll
      for (int w = 0; w < KRP; ++w) kR += s_kR_part[i * KRP + w];
      const float seed_beta = (valid ? ws_dbeta[ws * C + i] : 0.f) + kR;
#line 694 "templates/wgmma64/prepare_bwd.cu.j2"
      float seed_decay;                               // one decay per token: the sum over its channels
      {
        float x = 0.f;
#pragma unroll
        for (int e = 0; e < KPT; ++e) x += s_dgc[i * LDT + d0 + e];
        seed_decay = row_sum(x);
      }
#line 702 "templates/wgmma64/prepare_bwd.cu.j2"
      {
#line 2585 "gdn_sp_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_wgmma64_sm90a/backward.cu"
        const float* in_A_log_row = in_A_log + h;
        const bf16* in_beta_row = in_beta + tok * HV + h;
        const float* in_dt_bias_row = in_dt_bias + h;
        const bf16* in_g_row = in_g + tok * HV + h;
        // A_log: head_param
        const float n_A_log = *in_A_log_row;
        // beta: token_input
        const float n_beta = valid ? kdg::to_f32(*in_beta_row) : 0.f;
        // const_17: const
        const float n_const_17 = 1.0f;
        // d_beta: seed
        const float n_d_beta = seed_beta;
        // d_decay: seed
        const float n_d_decay = seed_decay;
        // dt_bias: head_param
        const float n_dt_bias = *in_dt_bias_row;
        // g: token_input
        const float n_g = valid ? kdg::to_f32(*in_g_row) : 0.f;
        // exp_1 = exp(A_log)
        const float n_exp_1 = expf(n_A_log);
        // add_0 = add(g, dt_bias)
        const float n_add_0 = (n_g + n_dt_bias);
        // neg_9 = neg(d_decay)
        const float n_neg_9 = (-n_d_decay);
        // mul_12 = mul(neg_9, exp_1)
        const float n_mul_12 = (n_neg_9 * n_exp_1);
        // sigmoid_13 = sigmoid(add_0)
        const float n_sigmoid_13 = kdg::sigmoid(n_add_0);
        // mul_14 = mul(mul_12, sigmoid_13)
        const float n_mul_14 = (n_mul_12 * n_sigmoid_13);
        // grad_g = grad(mul_14)
        const float n_grad_g = n_mul_14;
        // sigmoid_7 = sigmoid(beta)
        const float n_sigmoid_7 = kdg::sigmoid(n_beta);
        // mul_15 = mul(d_beta, sigmoid_7)
        const float n_mul_15 = (n_d_beta * n_sigmoid_7);
        // softplus_2 = softplus(add_0)
        const float n_softplus_2 = kdg::softplus(n_add_0, 20.0f);
        // mul_10 = mul(neg_9, softplus_2)
        const float n_mul_10 = (n_neg_9 * n_softplus_2);
        // sub_16 = sub(const_17, sigmoid_7)
        const float n_sub_16 = (n_const_17 - n_sigmoid_7);
        // mul_18 = mul(mul_15, sub_16)
        const float n_mul_18 = (n_mul_15 * n_sub_16);
        // grad_beta = grad(mul_18)
        const float n_grad_beta = n_mul_18;
        // sum_tokens_11 = sum_tokens(mul_10)
        const float n_sum_tokens_11 = n_mul_10;
        // mul_39 = mul(sum_tokens_11, exp_1)
        const float n_mul_39 = (n_sum_tokens_11 * n_exp_1);
        // grad_A_log = grad(mul_39)
        const float n_grad_A_log = n_mul_39;
        // sum_tokens_38 = sum_tokens(mul_14)
        const float n_sum_tokens_38 = n_mul_14;
        // grad_dt_bias = grad(sum_tokens_38)
        const float n_grad_dt_bias = n_sum_tokens_38;
        const float d_g = n_grad_g;
        const float d_beta = n_grad_beta;
        const float d_dt_bias = n_grad_dt_bias;
        const float d_A_log = n_grad_A_log;
        if (valid && rl == 0) store_f32(grad_in_g + tok * HV + h, d_g);
        if (valid && rl == 0) store_f32(grad_in_beta + tok * HV + h, d_beta);
#line 711 "templates/wgmma64/prepare_bwd.cu.j2"
        part_dt_bias += valid ? d_dt_bias : 0.f;   // a per-token scalar: equal on every lane
#line 711 "templates/wgmma64/prepare_bwd.cu.j2"
        part_A_log += valid ? d_A_log : 0.f;   // a per-token scalar: equal on every lane
#line 714 "templates/wgmma64/prepare_bwd.cu.j2"
      }
    }
#line 717 "templates/wgmma64/prepare_bwd.cu.j2"
    static_assert(2 <= 2 * 2, "head parameters: a slice of the two factor "
                  "tiles each (the plan's max_head_params)");
    // each parameter's row partials into a pass-tall slice of the factor tiles, W's then U's
    // (free since branch_grads)
#line 722 "templates/wgmma64/prepare_bwd.cu.j2"
    float* const rows_dt_bias =
        s_W + 0 * ROWS * LDT;
#line 722 "templates/wgmma64/prepare_bwd.cu.j2"
    float* const rows_A_log =
        s_W + 1 * ROWS * LDT;
#line 730 "templates/wgmma64/prepare_bwd.cu.j2"
    if (rl == 0) rows_dt_bias[(tid / LPR) * LDT] = part_dt_bias;
#line 730 "templates/wgmma64/prepare_bwd.cu.j2"
    if (rl == 0) rows_A_log[(tid / LPR) * LDT] = part_A_log;
#line 733 "templates/wgmma64/prepare_bwd.cu.j2"
    __syncthreads();
#line 15 "templates/skeleton.j2"
    // ---- step param_sums (all, column): each head parameter's row partials (a pass's rows) added in row order: the chunk's partial ----
#line 743 "templates/wgmma64/prepare_bwd.cu.j2"
    if (tid == 0) {
      float acc = 0.f;
      for (int r = 0; r < ROWS; ++r) acc += rows_dt_bias[r * LDT];
      ws_part_dt_bias[ws] = acc;
    }
#line 743 "templates/wgmma64/prepare_bwd.cu.j2"
    if (tid == 0) {
      float acc = 0.f;
      for (int r = 0; r < ROWS; ++r) acc += rows_A_log[r * LDT];
      ws_part_A_log[ws] = acc;
    }
#line 751 "templates/wgmma64/prepare_bwd.cu.j2"
  }

#line 15 "templates/skeleton.j2"
  // ---- step seeds (all, warp_channels): the GVA-summed dq̂, dk̂ from the registers into the tiles dgc and W ----
#line 754 "templates/wgmma64/prepare_bwd.cu.j2"
  __syncthreads();                                  // every reader of the dgc and W tiles is done
#line 756 "templates/wgmma64/prepare_bwd.cu.j2"
#pragma unroll
  for (int I = 0; I < NB; ++I)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int at = (I * B + kdg::frag_c_row(lane, e)) * LDT + ch0 + 8 * nt + kdg::frag_c_col(lane, e);
        s_dgc[at] = dq_sum[I][nt].x[e];
        s_W[at] = dk_sum[I][nt].x[e];
      }
#line 777 "templates/wgmma64/prepare_bwd.cu.j2"
  __syncthreads();

#line 15 "templates/skeleton.j2"
  // ---- step adjoint_qk (all, row): emitted, in passes: the q/k adjoint (L2 norm) seeded with the GVA-summed dq̂, dk̂ ----
#line 2709 "gdn_sp_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_wgmma64_sm90a/backward.cu"
#pragma unroll 2
#line 781 "templates/wgmma64/prepare_bwd.cu.j2"
  for (int pass = 0; pass < PASSES; ++pass) {
    const int i = pass * ROWS + tid / LPR;
    const bool valid = i < L;
    const long long tok = tok0 + i;
    float seed_query[KPT], seed_key[KPT];
#pragma unroll
    for (int e = 0; e < KPT; ++e) {
      seed_query[e] = s_dgc[i * LDT + d0 + e];
      seed_key[e] = s_W[i * LDT + d0 + e];
    }
#line 2722 "gdn_sp_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_wgmma64_sm90a/backward.cu"
    const bf16* in_k_row = in_k + (tok * H + jh) * K + d0;
    const bf16* in_q_row = in_q + (tok * H + jh) * K + d0;
    float given_l2norm_5[KPT];
    for (int e = 0; e < KPT; ++e) given_l2norm_5[e] = s_q_hat[i * ld_q_hat + d0 + e];
    float given_l2norm_6[KPT];
    for (int e = 0; e < KPT; ++e) given_l2norm_6[e] = s_k_hat[i * ld_k_hat + d0 + e];
    // const_22: const
    const float n_const_22 = 1e-06f;
    // d_key: seed
    const float (&n_d_key)[KPT] = seed_key;
    // d_query: seed
    const float (&n_d_query)[KPT] = seed_query;
    // k: token_input
    float n_k[KPT];
    kdg::load_row(n_k, in_k_row, valid);
    // l2norm_6: l2norm
    const float (&n_l2norm_6)[KPT] = given_l2norm_6;
    // q: token_input
    float n_q[KPT];
    kdg::load_row(n_q, in_q_row, valid);
    // l2norm_5: l2norm
    const float (&n_l2norm_5)[KPT] = given_l2norm_5;
    // mul_33 = mul(d_key, l2norm_6)
    float n_mul_33[KPT];
    #pragma unroll
    for (int j = 0; j < KPT; ++j) n_mul_33[j] = (n_d_key[j] * n_l2norm_6[j]);
    // mul_24 = mul(d_query, l2norm_5)
    float n_mul_24[KPT];
    #pragma unroll
    for (int j = 0; j < KPT; ++j) n_mul_24[j] = (n_d_query[j] * n_l2norm_5[j]);
    // rowsum_25 = rowsum(mul_24)
    float n_rowsum_25;
    {
      float s = 0.f;
      #pragma unroll
      for (int j = 0; j < KPT; ++j) s += n_mul_24[j];
      n_rowsum_25 = row_sum(s);
    }
    // mul_26 = mul(l2norm_5, rowsum_25)
    float n_mul_26[KPT];
    #pragma unroll
    for (int j = 0; j < KPT; ++j) n_mul_26[j] = (n_l2norm_5[j] * n_rowsum_25);
    // rowsum_34 = rowsum(mul_33)
    float n_rowsum_34;
    {
      float s = 0.f;
      #pragma unroll
      for (int j = 0; j < KPT; ++j) s += n_mul_33[j];
      n_rowsum_34 = row_sum(s);
    }
    // mul_35 = mul(l2norm_6, rowsum_34)
    float n_mul_35[KPT];
    #pragma unroll
    for (int j = 0; j < KPT; ++j) n_mul_35[j] = (n_l2norm_6[j] * n_rowsum_34);
    // square_19 = square(q)
    float n_square_19[KPT];
    #pragma unroll
    for (int j = 0; j < KPT; ++j) n_square_19[j] = kdg::square(n_q[j]);
    // rowsum_20 = rowsum(square_19)
    float n_rowsum_20;
    {
      float s = 0.f;
      #pragma unroll
      for (int j = 0; j < KPT; ++j) s += n_square_19[j];
      n_rowsum_20 = row_sum(s);
    }
    // add_21 = add(rowsum_20, const_22)
    const float n_add_21 = (n_rowsum_20 + n_const_22);
    // rsqrt_23 = rsqrt(add_21)
    const float n_rsqrt_23 = rsqrtf(n_add_21);
    // square_29 = square(k)
    float n_square_29[KPT];
    #pragma unroll
    for (int j = 0; j < KPT; ++j) n_square_29[j] = kdg::square(n_k[j]);
    // rowsum_30 = rowsum(square_29)
    float n_rowsum_30;
    {
      float s = 0.f;
      #pragma unroll
      for (int j = 0; j < KPT; ++j) s += n_square_29[j];
      n_rowsum_30 = row_sum(s);
    }
    // add_31 = add(rowsum_30, const_22)
    const float n_add_31 = (n_rowsum_30 + n_const_22);
    // rsqrt_32 = rsqrt(add_31)
    const float n_rsqrt_32 = rsqrtf(n_add_31);
    // sub_27 = sub(d_query, mul_26)
    float n_sub_27[KPT];
    #pragma unroll
    for (int j = 0; j < KPT; ++j) n_sub_27[j] = (n_d_query[j] - n_mul_26[j]);
    // mul_28 = mul(rsqrt_23, sub_27)
    float n_mul_28[KPT];
    #pragma unroll
    for (int j = 0; j < KPT; ++j) n_mul_28[j] = (n_rsqrt_23 * n_sub_27[j]);
    // grad_q = grad(mul_28)
    const float (&n_grad_q)[KPT] = n_mul_28;
    // sub_36 = sub(d_key, mul_35)
    float n_sub_36[KPT];
    #pragma unroll
    for (int j = 0; j < KPT; ++j) n_sub_36[j] = (n_d_key[j] - n_mul_35[j]);
    // mul_37 = mul(rsqrt_32, sub_36)
    float n_mul_37[KPT];
    #pragma unroll
    for (int j = 0; j < KPT; ++j) n_mul_37[j] = (n_rsqrt_32 * n_sub_36[j]);
    // grad_k = grad(mul_37)
    const float (&n_grad_k)[KPT] = n_mul_37;
    float d_q[KPT];
    #pragma unroll
    for (int j = 0; j < KPT; ++j) d_q[j] = n_grad_q[j];
    float d_k[KPT];
    #pragma unroll
    for (int j = 0; j < KPT; ++j) d_k[j] = n_grad_k[j];
    if (valid) kdg::store_row(grad_in_q + (tok * H + jh) * K + d0, d_q);
    if (valid) kdg::store_row(grad_in_k + (tok * H + jh) * K + d0, d_k);
#line 794 "templates/wgmma64/prepare_bwd.cu.j2"
  }
}

#line 5 "templates/mma16/param_reduce.cu.j2"
// ===== param_reduce: per-head parameter gradients, out[p] = Σ_c partial[c][p] in a fixed order =====
// grid (⌈widest / 32⌉, 2): blockIdx.y picks the parameter (dt_bias, A_log),
// lane x = tid % 32 its element p = 32·blockIdx.x + x (coalesced), row y = tid / 32 the chunks y, y+8,
// y+16, ... in order (step row_sums); after barrier "sync", row 0 adds the 8 row sums in order
// (step total). The same inputs give the same bits on every run (no atomics). Only the chunks that exist
// (N * ((T + 63) / 64)) are read: the chunk dim is an upper bound.
extern "C" __global__ void __launch_bounds__(256, 1) param_reduce(
    const float* __restrict__ ws_part_dt_bias,
#line 2850 "gdn_sp_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_wgmma64_sm90a/backward.cu"
    const float* __restrict__ ws_part_A_log,
    float* __restrict__ grad_in_dt_bias,
    float* __restrict__ grad_in_A_log,
    int T,
    int N,
    int HV) {
#line 13 "templates/mma16/param_reduce.cu.j2"
  constexpr int ROWS = 8;
#line 2859 "gdn_sp_l2_bsig_k128v128_bf16_gbf16_bbf16_gva1_wgmma64_sm90a/backward.cu"
  // shared memory: 1024 B, static
  __shared__ __align__(16) unsigned char smem_raw[1024];
  float* const s_rows = reinterpret_cast<float*>(smem_raw + 0);  // rows [8 x 32] f32, ld 32
  [[maybe_unused]] constexpr int ld_rows = 32;
#line 15 "templates/mma16/param_reduce.cu.j2"
  static_assert(ld_rows == 32 && ROWS * 32 == 256, "ROWS rows of 32 lanes");
  const float* partial;  // [chunks, width]
  float* out;
  int width;
  switch (blockIdx.y) {
#line 22 "templates/mma16/param_reduce.cu.j2"
    case 0: partial = ws_part_dt_bias; out = grad_in_dt_bias; width = HV; break;
#line 22 "templates/mma16/param_reduce.cu.j2"
    case 1: partial = ws_part_A_log; out = grad_in_A_log; width = HV; break;
#line 24 "templates/mma16/param_reduce.cu.j2"
    default: return;     // the grid has one row per parameter
  }
  const int num_chunks = N * ((T + 63) / 64);
  const int x = threadIdx.x % 32, y = threadIdx.x / 32, p = blockIdx.x * 32 + x;
#line 15 "templates/skeleton.j2"
  // ---- step row_sums (all, lanes): lane x takes element 32·blockIdx.x + x, row y the chunks y, y+8, ... in order ----
#line 29 "templates/mma16/param_reduce.cu.j2"
  float acc = 0.f;
  if (p < width)
    for (int c = y; c < num_chunks; c += ROWS) acc += partial[(long long)c * width + p];
  s_rows[y * ld_rows + x] = acc;
  __syncthreads();  // barrier "sync"
#line 15 "templates/skeleton.j2"
  // ---- step total (all, row0): row 0 adds the 8 row sums in order ----
#line 35 "templates/mma16/param_reduce.cu.j2"
  if (y == 0 && p < width) {
    float total = 0.f;
#pragma unroll
    for (int k = 0; k < ROWS; ++k) total += s_rows[k * ld_rows + x];
    out[p] = total;
  }
}

