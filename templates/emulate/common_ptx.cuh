// Host emulation of templates/common/ptx.cuh (same functions, the semantics the PTX ISA gives them), for
// kdagen.codegen.emulate. Requires cuda_host.h.
namespace kdg {

__device__ __forceinline__ u32 smem_addr(const void* p) { return (u32)reinterpret_cast<std::uintptr_t>(p); }

__device__ __forceinline__ void ptx_mbarrier_init(u64* bar, int count) {
  std::lock_guard<std::mutex> lock(kdg_emu::block->mu);
  kdg_emu::Mbar& m = kdg_emu::block->mbar[bar];
  m.count = m.pending = count;
  m.phase = 0;
}

inline void mbarrier_arrive_emulated(u64* bar) {
  std::lock_guard<std::mutex> lock(kdg_emu::block->mu);
  kdg_emu::Mbar& m = kdg_emu::block->mbar.at(bar);
  if (--m.pending == 0) {
    m.pending = m.count;
    ++m.phase;
  }
}

__device__ __forceinline__ void ptx_mbarrier_arrive(u64* bar) { mbarrier_arrive_emulated(bar); }

// The phase with parity p has completed when the current (incomplete) phase has the other parity.
__device__ __forceinline__ bool ptx_mbarrier_test(u64* bar, int parity) {
  bool done;
  {
    std::lock_guard<std::mutex> lock(kdg_emu::block->mu);
    done = (int)(kdg_emu::block->mbar.at(bar).phase & 1u) != parity;
  }
  if (!done) std::this_thread::yield();
  return done;
}

inline std::barrier<>& named_barrier(int id, int threads) {
  std::lock_guard<std::mutex> lock(kdg_emu::block->mu);
  auto& b = kdg_emu::block->named[id];
  if (!b) b = std::make_unique<std::barrier<>>(threads);
  return *b;
}

__device__ __forceinline__ void ptx_bar_sync(int id, int threads) { named_barrier(id, threads).arrive_and_wait(); }
__device__ __forceinline__ void ptx_bar_arrive(int id, int threads) { (void)named_barrier(id, threads).arrive(); }

}  // namespace kdg
