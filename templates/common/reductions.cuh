// kdagen common: warp and row reductions, and the in-chunk column cumsum.
namespace kdg {

// Sum over groups of LANES lanes STRIDE apart (lanes l, l + STRIDE, ...: consecutive lanes by default; LANES ·
// STRIDE a power of two <= 32); every lane of the group gets the group's total. A token row spread over LANES
// threads reduces with this.
template <int LANES, int STRIDE = 1>
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int off = LANES / 2 * STRIDE; off >= STRIDE; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

__device__ __forceinline__ float warp_sum(float x) { return group_sum<32>(x); }

// Inclusive cumsum down the rows of a rows x cols fp32 tile in shared memory (row stride ld),
// in place; thread tid of nthreads handles columns tid, tid + nthreads, ... sequentially.
// Callers synchronise before (all rows written) and after (all columns summed).
__device__ __forceinline__ void column_cumsum(float* tile, int rows, int cols, int ld, int tid, int nthreads) {
  for (int c = tid; c < cols; c += nthreads) {
    float acc = 0.f;
    for (int r = 0; r < rows; ++r) {
      acc += tile[r * ld + c];
      tile[r * ld + c] = acc;
    }
  }
}

}  // namespace kdg
