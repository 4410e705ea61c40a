// kdagen host emulation of the CUDA execution model, for running generated kernels on the CPU in
// tests (kdagen.codegen.emulate). Each CUDA thread is a std::thread; the blocks of a grid run one
// after another, so `__shared__` locals become function statics. Warp-collective operations
// (shuffles, ldmatrix, mma) exchange through per-warp slots between two warp barriers. It models
// semantics, not timing: cp.async copies complete at once, every mbarrier is a counter and a phase.
#pragma once
#include <cuda_bf16.h>
#include <vector_types.h>
#include <vector_functions.h>

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstring>
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
#define __global__
#define __device__
#define __shared__ static
#define __launch_bounds__(...)

namespace kdg_emu {

struct Warp {
  std::barrier<> bar{32};
  unsigned long long slot[32][6];
};

struct Mbar {
  int count = 0, pending = 0;
  unsigned phase = 0;  // completed phases
};

struct Block {
  explicit Block(int threads) : cta(threads), warps((threads + 31) / 32) {}
  std::barrier<> cta;
  std::vector<Warp> warps;
  std::mutex mu;
  std::map<const void*, Mbar> mbar;
  std::map<int, std::unique_ptr<std::barrier<>>> named;
  std::vector<unsigned char> dynamic_smem;
};

inline thread_local Block* block = nullptr;
inline thread_local int lane_id = 0, warp_id = 0;

inline Warp& warp() { return block->warps[warp_id]; }

}  // namespace kdg_emu

inline thread_local uint3 threadIdx, blockIdx;
inline dim3 gridDim, blockDim;

inline void __syncthreads() { kdg_emu::block->cta.arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { kdg_emu::warp().bar.arrive_and_wait(); }

template <class T>
inline T __shfl_xor_sync(unsigned, T x, int lane_mask, int = 32) {
  static_assert(sizeof(T) <= 8, "shuffle of a register-sized value");
  kdg_emu::Warp& w = kdg_emu::warp();
  std::memcpy(&w.slot[kdg_emu::lane_id][0], &x, sizeof(T));
  w.bar.arrive_and_wait();
  T y;
  std::memcpy(&y, &w.slot[kdg_emu::lane_id ^ lane_mask][0], sizeof(T));
  w.bar.arrive_and_wait();
  return y;
}

inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

namespace kdg_emu {

// Run body on a grid of blocks of `threads` threads (blocks one after another).
inline void launch(unsigned gx, unsigned gy, unsigned gz, unsigned threads, unsigned smem_bytes,
                   const std::function<void()>& body) {
  gridDim = dim3(gx, gy, gz);
  blockDim = dim3(threads, 1, 1);
  for (unsigned z = 0; z < gz; ++z)
    for (unsigned y = 0; y < gy; ++y)
      for (unsigned x = 0; x < gx; ++x) {
        Block b(threads);
        b.dynamic_smem.assign(smem_bytes + 16, 0);
        std::vector<std::thread> pool;
        for (unsigned t = 0; t < threads; ++t) {
          pool.emplace_back([&, t, x, y, z] {
            block = &b;
            lane_id = t % 32;
            warp_id = t / 32;
            threadIdx = make_uint3(t, 0, 0);
            blockIdx = make_uint3(x, y, z);
            body();
            b.warps[warp_id].bar.arrive_and_drop();  // an exited thread no longer holds others back
            b.cta.arrive_and_drop();
          });
        }
        for (auto& th : pool) th.join();
      }
}

inline unsigned char* dynamic_smem() {
  auto p = reinterpret_cast<std::uintptr_t>(block->dynamic_smem.data());
  return reinterpret_cast<unsigned char*>((p + 15) / 16 * 16);
}

}  // namespace kdg_emu

#define KDG_DYNAMIC_SMEM(name) unsigned char* name = kdg_emu::dynamic_smem()
