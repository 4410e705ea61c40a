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
