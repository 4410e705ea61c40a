// kdagen common: tensor-core fragments of mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
// (sm_80 and sm_90a). Lane l of a warp: g = l >> 2 (group), t = l & 3 (thread in group).
//   FragA (16x16 bf16, M x K): x[0] = (g,   2t..2t+1)  x[1] = (g+8, 2t..2t+1)
//                              x[2] = (g,   2t+8..9)   x[3] = (g+8, 2t+8..9)
//   FragB (16x8 bf16, K x N):  x[0] = (k 2t..2t+1, n g)  x[1] = (k 2t+8..9, n g)
//   FragC (16x8 f32, M x N):   x[0..1] = (g, 2t..2t+1)    x[2..3] = (g+8, 2t..2t+1)
namespace kdg {

struct FragA { u32 x[4]; };
struct FragB { u32 x[2]; };
struct FragC { float x[4]; };

__device__ __forceinline__ void frag_zero(FragC& c) {
#pragma unroll
  for (int i = 0; i < 4; ++i) c.x[i] = 0.f;
}

// d += a * b on the tensor cores (fp32 accumulation).
__device__ __forceinline__ void mma_16816(FragC& d, const FragA& a, const FragB& b) { ptx_mma_16816(d.x, a.x, b.x); }

// The accumulators of two adjacent 16x8 tiles (columns 0..7 and 8..15) are, once rounded to bf16,
// exactly the A fragment of the 16x16 tile they form: the product chains on without shared memory.
__device__ __forceinline__ FragA frag_a_from_c(const FragC& lo, const FragC& hi) {
  FragA a;
  a.x[0] = pack_bf16(lo.x[0], lo.x[1]);
  a.x[1] = pack_bf16(lo.x[2], lo.x[3]);
  a.x[2] = pack_bf16(hi.x[0], hi.x[1]);
  a.x[3] = pack_bf16(hi.x[2], hi.x[3]);
  return a;
}

// x ≈ hi + lo, both bf16: lo carries the next 8 bits of the mantissa. Products formed as
// hi·hi' + lo·hi' + hi·lo' ("bf16x3") keep close to fp32 accuracy on the bf16 tensor cores.
__device__ __forceinline__ void split_bf16(float a, float b, u32& hi, u32& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  hi = *reinterpret_cast<const u32*>(&h);
  lo = pack_bf16(a - __low2float(h), b - __high2float(h));
}

__device__ __forceinline__ void frag_a_from_c_split(const FragC& lo_cols, const FragC& hi_cols, FragA& hi, FragA& lo) {
  split_bf16(lo_cols.x[0], lo_cols.x[1], hi.x[0], lo.x[0]);
  split_bf16(lo_cols.x[2], lo_cols.x[3], hi.x[1], lo.x[1]);
  split_bf16(hi_cols.x[0], hi_cols.x[1], hi.x[2], lo.x[2]);
  split_bf16(hi_cols.x[2], hi_cols.x[3], hi.x[3], lo.x[3]);
}

// d += (ah + al)·(bh + bl), dropping only al·bl.
__device__ __forceinline__ void mma_16816_x3(FragC& d, const FragA& ah, const FragA& al, const FragB& bh,
                                             const FragB& bl) {
  mma_16816(d, al, bh);
  mma_16816(d, ah, bl);
  mma_16816(d, ah, bh);
}

// The tf32 fragments of mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (fp32 operands, no hi/lo split:
// 10 mantissa bits, rounded to nearest by ptx_cvt_tf32; the accumulator is FragC):
//   FragA8 (16x8, M x K): x[0] = (g, t)  x[1] = (g+8, t)  x[2] = (g, t+4)  x[3] = (g+8, t+4)
//   FragB8 (8x8, K x N):  x[0] = (k t, n g)  x[1] = (k t+4, n g)
struct FragA8 { u32 x[4]; };
struct FragB8 { u32 x[2]; };

__device__ __forceinline__ void mma_1688_tf32(FragC& d, const FragA8& a, const FragB8& b) {
  ptx_mma_1688_tf32(d.x, a.x, b.x);
}

// Row (0..15) and column (0..7) of accumulator element i (0..3) held by this lane.
__device__ __forceinline__ int frag_c_row(int lane, int i) { return (lane >> 2) + ((i >> 1) << 3); }
__device__ __forceinline__ int frag_c_col(int lane, int i) { return ((lane & 3) << 1) + (i & 1); }

}  // namespace kdg
