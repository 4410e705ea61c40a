// Host emulation of templates/common/ptx.cuh (same functions, the semantics the PTX ISA gives them), for
// kdagen.codegen.emulate. Requires cuda_host.h.
namespace kdg {

__device__ __forceinline__ u32 smem_addr(const void* p) { return kdg_emu::shared_address(p); }

__device__ __forceinline__ void ptx_mbarrier_init(u64* bar, int count) {
  std::lock_guard<std::mutex> lock(kdg_emu::block->mu);
  kdg_emu::block->mbar[bar] = kdg_emu::Mbar{count, count, 0, 0};
}

// Arrivals and transaction bytes on the current phase, which completes once its pending arrivals are 0 and
// its tx-count is 0 (bytes may complete before they are expected: the count goes negative meanwhile);
// then the arrivals are re-armed and the phase flips.
inline void mbarrier_update(u64* bar, int arrivals, long long tx_bytes, const char* what) {
  std::lock_guard<std::mutex> lock(kdg_emu::block->mu);
  const auto it = kdg_emu::block->mbar.find(bar);
  if (it == kdg_emu::block->mbar.end()) kdg_emu::fail("%s on %p: the mbarrier was never initialised", what, (void*)bar);
  kdg_emu::Mbar& m = it->second;
  m.tx += tx_bytes;
  m.pending -= arrivals;
  if (m.tx > (1 << 20) - 1 || m.tx < -((1 << 20) - 1))
    kdg_emu::fail("%s on %p: tx-count %lld outside the range +-(2^20 - 1)", what, (void*)bar, m.tx);
  if (m.pending < 0)
    kdg_emu::fail("%s on %p: more arrivals than the count %d in one phase", what, (void*)bar, m.count);
  if (m.pending == 0 && m.tx == 0) {
    m.pending = m.count;
    ++m.phase;
  }
}

inline void mbarrier_arrive_emulated(u64* bar) { mbarrier_update(bar, 1, 0, "mbarrier.arrive"); }

__device__ __forceinline__ void ptx_mbarrier_arrive(u64* bar) { mbarrier_arrive_emulated(bar); }

// The phase with parity p has completed when the current (incomplete) phase has the other parity.
__device__ __forceinline__ bool ptx_mbarrier_test(u64* bar, int parity) {
  bool done;
  {
    std::lock_guard<std::mutex> lock(kdg_emu::block->mu);
    const auto it = kdg_emu::block->mbar.find(bar);
    if (it == kdg_emu::block->mbar.end())
      kdg_emu::fail("mbarrier wait on %p: the mbarrier was never initialised", (void*)bar);
    done = (int)(it->second.phase & 1u) != parity;
  }
  if (!done) std::this_thread::yield();
  return done;
}

// bar.sync / bar.arrive: `threads` (a multiple of 32, the same for every participant of a phase) arrivals
// complete a phase and release its waiters; bar.arrive counts without waiting. Ids are per block.
inline void named_barrier_emulated(int id, int threads, bool wait) {
  if (id < 0 || id > 15) kdg_emu::fail("bar %d: barrier ids are 0..15", id);
  if (threads <= 0 || threads % 32 || threads > (int)blockDim.x)
    kdg_emu::fail("bar %d: thread count %d must be a positive multiple of 32 up to the block's %u", id, threads,
                  blockDim.x);
  kdg_emu::NamedBarrier* b;
  {
    std::lock_guard<std::mutex> lock(kdg_emu::block->mu);
    auto& slot = kdg_emu::block->named[id];
    if (!slot) slot = std::make_unique<kdg_emu::NamedBarrier>();
    b = slot.get();
  }
  std::unique_lock<std::mutex> lock(b->mu);
  if (b->arrived == 0) b->expected = threads;
  else if (b->expected != threads)
    kdg_emu::fail("bar %d: thread count %d differs from the %d of this phase", id, threads, b->expected);
  const unsigned long long gen = b->generation;
  if (++b->arrived == b->expected) {
    b->arrived = 0;
    ++b->generation;
    b->cv.notify_all();
  } else if (wait) {
    b->cv.wait(lock, [&] { return b->generation != gen; });
  }
}

__device__ __forceinline__ void ptx_bar_sync(int id, int threads) { named_barrier_emulated(id, threads, true); }
__device__ __forceinline__ void ptx_bar_arrive(int id, int threads) { named_barrier_emulated(id, threads, false); }

// ex2.approx.ftz, rcp.approx.ftz: at host precision, results below the smallest normal flushed to zero
__device__ __forceinline__ float ptx_ex2_ftz(float x) {
  const float y = std::exp2(x);
  return y < FLT_MIN ? 0.f : y;
}
__device__ __forceinline__ float ptx_rcp_ftz(float x) {
  const float y = 1.f / x;
  return std::fabs(y) < FLT_MIN ? 0.f * y : y;
}

}  // namespace kdg
