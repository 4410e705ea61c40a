// Host emulation of templates/sm80/ptx.cuh: mma.sync m16n8k16 (bf16) and m16n8k8 (tf32), cvt.rna.tf32, and ldmatrix with the fragment layouts of
// the PTX ISA (warp-collective: lanes exchange through the warp's slots), cp.async as an immediate copy.
namespace kdg {

inline float bf16_lo(u32 r) { return __bfloat162float(__ushort_as_bfloat16((unsigned short)(r & 0xffffu))); }
inline float bf16_hi(u32 r) { return __bfloat162float(__ushort_as_bfloat16((unsigned short)(r >> 16))); }

// mma.m16n8k16 row.col bf16 -> f32, fragment layouts of the PTX ISA: lane l, g = l/4, t = l%4.
__device__ __forceinline__ void ptx_mma_16816(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  kdg_emu::Warp& w = kdg_emu::warp();
  const int lane = kdg_emu::lane_id;
  for (int i = 0; i < 4; ++i) w.slot[lane][i] = a[i];
  for (int i = 0; i < 2; ++i) w.slot[lane][4 + i] = b[i];
  w.bar.arrive_and_wait();
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < 4; ++i) {  // a register i: rows g (+8 for i odd), columns 2t (+8 for i >= 2)
      const u32 r = (u32)w.slot[l][i];
      const int row = g + 8 * (i & 1), col = 2 * t + 8 * (i >> 1);
      A[row][col] = bf16_lo(r);
      A[row][col + 1] = bf16_hi(r);
    }
    for (int i = 0; i < 2; ++i) {  // b register i: k rows 2t (+8 for i = 1), column g
      const u32 r = (u32)w.slot[l][4 + i];
      B[2 * t + 8 * i][g] = bf16_lo(r);
      B[2 * t + 8 * i + 1][g] = bf16_hi(r);
    }
  }
  w.bar.arrive_and_wait();
  const int g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {  // c element i: row g (+8 for i >= 2), column 2t + (i & 1)
    const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    float acc = d[i];
    for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
    d[i] = acc;
  }
}

// A tf32 register's value: the fp32 bits with the low 13 mantissa bits ignored (cvt.rna.tf32 leaves them 0).
inline float tf32_value(u32 r) {
  const u32 bits = r & ~0x1fffu;
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}

// cvt.rna.tf32.f32: round the magnitude to 10 mantissa bits, ties away from zero (adding half an ulp to the
// bit pattern does that for either sign); infinities stay, NaNs stay NaN.
__device__ __forceinline__ u32 ptx_cvt_tf32(float x) {
  u32 bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u) return bits;
  return (bits + 0x1000u) & ~0x1fffu;
}

// mma.m16n8k8 row.col tf32 -> f32, fragment layouts of the PTX ISA: lane l, g = l/4, t = l%4;
// a: x[0] = (g, t), x[1] = (g+8, t), x[2] = (g, t+4), x[3] = (g+8, t+4); b: x[0] = (k t, n g), x[1] = (k t+4, n g).
__device__ __forceinline__ void ptx_mma_1688_tf32(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  kdg_emu::Warp& w = kdg_emu::warp();
  const int lane = kdg_emu::lane_id;
  for (int i = 0; i < 4; ++i) w.slot[lane][i] = a[i];
  for (int i = 0; i < 2; ++i) w.slot[lane][4 + i] = b[i];
  w.bar.arrive_and_wait();
  float A[16][8], B[8][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < 4; ++i) A[g + 8 * (i & 1)][t + 4 * (i >> 1)] = tf32_value((u32)w.slot[l][i]);
    for (int i = 0; i < 2; ++i) B[t + 4 * i][g] = tf32_value((u32)w.slot[l][4 + i]);
  }
  w.bar.arrive_and_wait();
  const int g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {  // c element i: row g (+8 for i >= 2), column 2t + (i & 1)
    const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    float acc = d[i];
    for (int k = 0; k < 8; ++k) acc += A[row][k] * B[k][col];
    d[i] = acc;
  }
}

inline void ldmatrix_x4_emulated(u32 (&r)[4], const void* row_ptr, bool trans) {
  kdg_emu::Warp& w = kdg_emu::warp();
  const int lane = kdg_emu::lane_id;
  kdg_emu::shared_address(row_ptr);  // ldmatrix reads the shared state space only: fails for any other pointer
  if (reinterpret_cast<std::uintptr_t>(row_ptr) % 16)
    kdg_emu::fail("ldmatrix: row address %p is not 16-byte aligned", row_ptr);
  w.slot[lane][0] = reinterpret_cast<std::uintptr_t>(row_ptr);
  w.bar.arrive_and_wait();
  for (int m = 0; m < 4; ++m) {  // matrix m: row i at the address of lane 8m + i
    unsigned short e[2];
    for (int k = 0; k < 2; ++k) {
      const int row = trans ? 2 * (lane % 4) + k : lane / 4;
      const int col = trans ? lane / 4 : 2 * (lane % 4) + k;
      const auto* p = reinterpret_cast<const unsigned short*>(w.slot[8 * m + row][0]);
      e[k] = p[col];
    }
    r[m] = (u32)e[0] | ((u32)e[1] << 16);
  }
  w.bar.arrive_and_wait();
}

__device__ __forceinline__ void ptx_ldmatrix_x4(u32 (&r)[4], const void* row_ptr) { ldmatrix_x4_emulated(r, row_ptr, false); }
__device__ __forceinline__ void ptx_ldmatrix_x4_trans(u32 (&r)[4], const void* row_ptr) { ldmatrix_x4_emulated(r, row_ptr, true); }

__device__ __forceinline__ void ptx_cp_async_16(void* smem, const void* gmem, int src_bytes) {
  if (src_bytes) std::memcpy(smem, gmem, 16); else std::memset(smem, 0, 16);
}

__device__ __forceinline__ void ptx_cp_async_4(void* smem, const void* gmem, int src_bytes) {
  if (src_bytes) std::memcpy(smem, gmem, 4); else std::memset(smem, 0, 4);
}

__device__ __forceinline__ void ptx_cp_async_arrive(u64* bar) { mbarrier_arrive_emulated(bar); }
__device__ __forceinline__ void ptx_cp_async_wait_all() {}
// copies land when issued here, so every group is complete at its commit and any wait is already satisfied
__device__ __forceinline__ void ptx_cp_async_commit() {}
template <int N>
__device__ __forceinline__ void ptx_cp_async_wait_group() {}

}  // namespace kdg
