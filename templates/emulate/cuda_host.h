// kdagen host emulation of the CUDA execution model, for running generated kernels on the CPU in
// tests (kdagen.codegen.emulate). Each CUDA thread is a std::thread; the blocks of a grid run one
// after another, so `__shared__` locals become function statics. Warp-collective operations
// (shuffles, ldmatrix, mma) exchange through per-warp slots between two warp barriers, warpgroup ones
// (wgmma, setmaxnreg) through per-warpgroup slots. It models semantics, not timing: copies complete at
// once, every mbarrier is a counter, a tx-count and a phase; wgmma runs when a wait_group covers it.
#pragma once
#include <cuda_bf16.h>
#include <vector_types.h>
#include <vector_functions.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cfloat>
#include <cmath>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#undef __global__
#undef __device__
#undef __shared__
#undef __launch_bounds__
#undef __grid_constant__
#define __global__
#define __device__
// Shared variables are statics in one section, so that shared-state-space addresses (smem_addr, wgmma
// descriptors) can be mapped back to them. Declare them in kernels: statics of inline or template
// functions do not land in the section.
#define __shared__ static __attribute__((section("kdg_shared")))
#define __launch_bounds__(...)
#define __grid_constant__

extern "C" __attribute__((weak, visibility("hidden"))) unsigned char __start_kdg_shared[], __stop_kdg_shared[];

namespace kdg_emu {

// A misuse the hardware would not report (or would hang on): say what and stop.
[[noreturn]] inline void fail(const char* format, ...) {
  std::va_list args;
  va_start(args, format);
  std::fputs("kdg emulator: ", stderr);
  std::vfprintf(stderr, format, args);
  std::fputc('\n', stderr);
  va_end(args);
  std::fflush(stderr);
  std::abort();
}

struct Warp {
  std::barrier<> bar{32};
  unsigned long long slot[32][6];
};

// A warpgroup (warps 4k..4k+3) meets in sync(); a thread missing for a minute means some warp skipped a
// warpgroup-collective instruction, which would hang the hardware: fail instead. wgmma groups wait in
// `groups` until a wait_group covers them.
struct WarpGroup {
  explicit WarpGroup(int threads) : threads(threads) {}
  const int threads;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  unsigned long long generation = 0;
  unsigned long long slot[128][8];
  std::vector<std::function<void()>> open;                  // issued since the last commit
  std::deque<std::vector<std::function<void()>>> groups;    // committed, not yet waited for

  void sync(const char* what, int index) {
    std::unique_lock<std::mutex> lock(mu);
    const unsigned long long gen = generation;
    if (++arrived == threads) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    if (!cv.wait_for(lock, std::chrono::seconds(60), [&] { return generation != gen; }))
      fail("%s: only %d of the 128 threads of warpgroup %d arrived (all 4 warps must execute it)", what, arrived,
           index);
  }
};

struct Mbar {
  int count = 0, pending = 0;
  long long tx = 0;    // transaction bytes expected minus completed in the current phase
  unsigned phase = 0;  // completed phases
};

// bar.sync / bar.arrive on one hardware barrier id: `expected` arrivals complete a phase.
struct NamedBarrier {
  std::mutex mu;
  std::condition_variable cv;
  int expected = 0, arrived = 0;
  unsigned long long generation = 0;
};

struct Block {
  Block(int threads, unsigned smem_bytes) : cta(threads), warps((threads + 31) / 32), dynamic_bytes(smem_bytes) {
    for (int first = 0; first < threads; first += 128)
      warpgroups.push_back(std::make_unique<WarpGroup>(threads - first < 128 ? threads - first : 128));
    dynamic_storage.assign(smem_bytes + 1024, 0);
    const auto p = reinterpret_cast<std::uintptr_t>(dynamic_storage.data());
    dynamic = reinterpret_cast<unsigned char*>((p + 1023) / 1024 * 1024);
  }
  std::barrier<> cta;
  std::vector<Warp> warps;
  std::vector<std::unique_ptr<WarpGroup>> warpgroups;
  std::mutex mu;
  std::map<const void*, Mbar> mbar;
  std::map<int, std::unique_ptr<NamedBarrier>> named;
  std::vector<unsigned char> dynamic_storage;
  unsigned char* dynamic = nullptr;  // 1024-byte aligned, like a swizzled tile must be
  unsigned dynamic_bytes;
  std::atomic<std::uintptr_t> static_anchor{0};  // see shared_address
};

inline thread_local Block* block = nullptr;
inline thread_local int lane_id = 0, warp_id = 0;

inline Warp& warp() { return block->warps[warp_id]; }

// This thread's warpgroup, for an instruction that needs all 128 of its threads.
inline WarpGroup& warpgroup(const char* what) {
  WarpGroup& wg = *block->warpgroups[warp_id / 4];
  if (wg.threads != 128) fail("%s: warpgroup %d has only %d threads", what, warp_id / 4, wg.threads);
  return wg;
}

// Shared-state-space addresses (what smem_addr returns and wgmma descriptors hold, 18 bits): dynamic
// shared memory from 0, then a window onto the unit's static shared variables. The section holds every
// kernel's, so the window is anchored at the first static variable a block translates (its kernel's
// statics lie near it). Both keep their host addresses modulo 1024, so swizzle patterns (functions of
// address bits 4..9) agree between host pointers and shared addresses.
constexpr unsigned kSharedWindow = 1u << 18;

inline std::uintptr_t section_begin() { return reinterpret_cast<std::uintptr_t>(__start_kdg_shared); }
inline std::uintptr_t section_end() { return reinterpret_cast<std::uintptr_t>(__stop_kdg_shared); }
inline unsigned static_window() { return (block->dynamic_bytes + 1023) / 1024 * 1024; }

inline std::uintptr_t static_anchor(std::uintptr_t first) {
  std::uintptr_t anchor = block->static_anchor.load();
  if (anchor) return anchor;
  const std::uintptr_t below = (kSharedWindow - static_window()) / 2 / 1024 * 1024;
  const std::uintptr_t lowest = section_begin() & ~std::uintptr_t(1023);
  const std::uintptr_t wanted = (first & ~std::uintptr_t(1023)) - below;
  anchor = wanted > lowest && first > below ? wanted : lowest;
  std::uintptr_t unset = 0;
  return block->static_anchor.compare_exchange_strong(unset, anchor) ? anchor : unset;
}

inline unsigned shared_address(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  const auto dyn = reinterpret_cast<std::uintptr_t>(block->dynamic);
  if (a >= dyn && a < dyn + block->dynamic_bytes) return static_cast<unsigned>(a - dyn);
  if (a < section_begin() || a >= section_end())
    fail("smem_addr(%p): not a shared-memory address (declare __shared__ variables in kernels)", p);
  const std::uintptr_t address = static_window() + (a - static_anchor(a));
  if (address >= kSharedWindow)
    fail("smem_addr(%p): this kernel's static shared variables span more than the emulator's shared window", p);
  return static_cast<unsigned>(address);
}

// The host pointer of `bytes` bytes at a shared-state-space address.
inline unsigned char* shared_pointer(unsigned address, unsigned bytes, const char* what) {
  if (address + bytes <= block->dynamic_bytes) return block->dynamic + address;
  const std::uintptr_t anchor = block->static_anchor.load(), p = anchor + (address - static_window());
  if (anchor && address >= static_window() && p >= section_begin() && p + bytes <= section_end())
    return reinterpret_cast<unsigned char*>(p);
  fail("%s: shared address 0x%x (+%u bytes) is outside shared memory", what, address, bytes);
}

// A kernel argument from the launch's argument array (memcpy: the array need not be aligned for T).
template <class T>
inline T arg(void* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace kdg_emu

inline thread_local uint3 threadIdx, blockIdx;
inline dim3 gridDim, blockDim;

inline void __syncthreads() { kdg_emu::block->cta.arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { kdg_emu::warp().bar.arrive_and_wait(); }

namespace kdg_emu {
// A full-warp shuffle: every lane offers x and reads the value of lane `from` (its own where `from` is outside the
// warp). Only full-warp masks and width 32 are modelled; the kernels use no other.
template <class T>
inline T shuffle(T x, int from) {
  static_assert(sizeof(T) <= 8, "shuffle of a register-sized value");
  Warp& w = warp();
  std::memcpy(&w.slot[lane_id][0], &x, sizeof(T));
  w.bar.arrive_and_wait();
  T y = x;
  if (from >= 0 && from < 32) std::memcpy(&y, &w.slot[from][0], sizeof(T));
  w.bar.arrive_and_wait();
  return y;
}
}  // namespace kdg_emu

// The lane operand is taken modulo 32, as shfl.sync reads its five low bits.
template <class T>
inline T __shfl_xor_sync(unsigned, T x, int lane_mask, int = 32) {
  return kdg_emu::shuffle(x, kdg_emu::lane_id ^ (lane_mask & 31));
}
// shfl.sync.up: lane l reads lane l − delta; the lanes below delta keep their own value
template <class T>
inline T __shfl_up_sync(unsigned, T x, unsigned delta, int = 32) {
  return kdg_emu::shuffle(x, static_cast<int>(kdg_emu::lane_id) - static_cast<int>(delta & 31));
}
template <class T>
inline T __shfl_sync(unsigned, T x, int src_lane, int = 32) { return kdg_emu::shuffle(x, src_lane & 31); }

inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline unsigned __float_as_uint(float x) { unsigned u; std::memcpy(&u, &x, 4); return u; }
inline float __uint_as_float(unsigned u) { float x; std::memcpy(&x, &u, 4); return x; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

namespace kdg_emu {

// Bulk stores this thread issued that no wait_group.read has performed yet (sm90_ptx.cuh): a thread that exits with
// any would leave the hardware reading shared memory the CTA has released.
inline thread_local int bulk_stores_pending = 0;

// Run body on a grid of blocks of `threads` threads (blocks one after another).
inline void launch(unsigned gx, unsigned gy, unsigned gz, unsigned threads, unsigned smem_bytes,
                   const std::function<void()>& body) {
  gridDim = dim3(gx, gy, gz);
  blockDim = dim3(threads, 1, 1);
  for (unsigned z = 0; z < gz; ++z)
    for (unsigned y = 0; y < gy; ++y)
      for (unsigned x = 0; x < gx; ++x) {
        Block b(threads, smem_bytes);
        std::vector<std::thread> pool;
        for (unsigned t = 0; t < threads; ++t) {
          pool.emplace_back([&, t, x, y, z] {
            block = &b;
            lane_id = t % 32;
            warp_id = t / 32;
            threadIdx = make_uint3(t, 0, 0);
            blockIdx = make_uint3(x, y, z);
            body();
            if (bulk_stores_pending)
              fail("thread %u exited with %d bulk stores no cp.async.bulk.wait_group.read covered", t,
                   bulk_stores_pending);
            b.warps[warp_id].bar.arrive_and_drop();  // an exited thread no longer holds others back
            b.cta.arrive_and_drop();
          });
        }
        for (auto& th : pool) th.join();
        for (std::size_t w = 0; w < b.warpgroups.size(); ++w)
          if (!b.warpgroups[w]->open.empty() || !b.warpgroups[w]->groups.empty())
            fail("warpgroup %zu exited with wgmma operations no wgmma.wait_group covered", w);
      }
}

inline unsigned char* dynamic_smem() { return block->dynamic; }

}  // namespace kdg_emu

#define KDG_DYNAMIC_SMEM(name) unsigned char* name = kdg_emu::dynamic_smem()
