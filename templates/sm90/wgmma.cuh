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
