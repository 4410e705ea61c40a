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
