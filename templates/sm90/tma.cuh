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
