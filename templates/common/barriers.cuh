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
