// The chain of an inference forward cut into segments (kdagen.ops.segmented, docs/segments.md §4): every segment's
// incoming state from the segments' affine maps, in one launch. For sequence n, value head h and segment j
// (stored at n·S + j):
//   S_in(0) = first[n]  (zero when first is null),   S_in(j + 1) = M_j · S_in(j) + B_j
// in the kv layout (state [K, V]); with state_v_first (state [V, K]) S_in(j + 1) = S_in(j) · M_j + B_j, which is
// the same recurrence on the transposed state. Both are written below on X = the state seen as [K, ·] (X = S, or
// Sᵀ with v_first): X(j + 1) = A_j · X(j) + B_jᵀ-as-X, A_j = M_j (kv) or M_jᵀ (v_first).
//
// The columns of X are independent, so one CTA takes CHAIN_COLS of them for one (n, h) and walks the S segments in
// order; thread r owns row r (D threads, D = K = V ≤ 128). Per segment, A_j is staged through shared memory
// CHAIN_STAGE columns at a time (coalesced reads of M_j in either layout) and each thread sums its row in fp32 FMAs
// in a fixed order: deterministic, and no TF32 rounding of the carried state.
#define CHAIN_COLS 8
#define CHAIN_STAGE 32
#define CHAIN_MAX_D 128

// offset of X[row, col] in a D × D state stored in the kv layout (row-major X) or the v_first one (row-major Xᵀ)
__device__ __forceinline__ long chain_at(int row, int col, int D, int v_first) {
  return v_first ? (long)col * D + row : (long)row * D + col;
}

extern "C" __global__ void __launch_bounds__(CHAIN_MAX_D) segment_chain(
    const float* M, const float* B, const float* first, float* h_in, int S, int HV, int D, int v_first) {
  __shared__ float x[CHAIN_MAX_D][CHAIN_COLS];             // X(j): this CTA's columns
  __shared__ float a[CHAIN_MAX_D][CHAIN_STAGE + 1];        // A_j[:, m0 : m0 + CHAIN_STAGE] (+1: no bank conflicts)
  const int n = blockIdx.x / HV, head = blockIdx.x % HV, col0 = blockIdx.y * CHAIN_COLS, r = threadIdx.x;
  const long mat = (long)D * D;
  const long pair0 = ((long)n * S * HV + head) * mat;      // segment 0 of (n, head); segment j is j·HV·mat further
  float acc[CHAIN_COLS];
  const float* f = first ? first + ((long)n * HV + head) * mat : nullptr;
#pragma unroll
  for (int c = 0; c < CHAIN_COLS; ++c) acc[c] = f ? f[chain_at(r, col0 + c, D, v_first)] : 0.f;
  for (int j = 0;; ++j) {
    const long seg = pair0 + (long)j * HV * mat;
#pragma unroll
    for (int c = 0; c < CHAIN_COLS; ++c) h_in[seg + chain_at(r, col0 + c, D, v_first)] = acc[c];
    if (j == S - 1) break;
#pragma unroll
    for (int c = 0; c < CHAIN_COLS; ++c) {
      x[r][c] = acc[c];
      acc[c] = B[seg + chain_at(r, col0 + c, D, v_first)];
    }
    for (int m0 = 0; m0 < D; m0 += CHAIN_STAGE) {
      __syncthreads();                                     // x written; the previous stage of a read
      for (int i = r; i < D * CHAIN_STAGE; i += blockDim.x) {
        // kv: A[row, m] = M[row·D + m], consecutive m contiguous; v_first: A[row, m] = M[m·D + row], rows contiguous
        const int row = v_first ? i % D : i / CHAIN_STAGE, m = v_first ? i / D : i % CHAIN_STAGE;
        a[row][m] = M[seg + (v_first ? (long)(m0 + m) * D + row : (long)row * D + m0 + m)];
      }
      __syncthreads();
#pragma unroll 8
      for (int m = 0; m < CHAIN_STAGE; ++m) {
        const float coef = a[r][m];
#pragma unroll
        for (int c = 0; c < CHAIN_COLS; ++c) acc[c] = fmaf(coef, x[m0 + m][c], acc[c]);
      }
    }
    __syncthreads();                                       // every read of x before the next segment writes it
  }
}
