// The chain of an inference forward cut into segments (kdagen.ops.segmented, docs/segments.md §4): every segment's
// incoming state from the segments' affine maps, in one launch. For sequence n, value head h and segment j
// (stored at n·S + j):
//   S_in(0) = first[n]  (zero when first is null),   S_in(j + 1) = M_j · S_in(j) + B_j
// in the kv layout (state [K, V]); with state_v_first (state [V, K]) S_in(j + 1) = S_in(j) · M_j + B_j, which is
// the same recurrence on the transposed state. Both are written below on X = the state seen as [K, ·] (X = S, or
// Sᵀ with v_first): X(j + 1) = A_j · X(j) + B_jᵀ-as-X, A_j = M_j (kv) or M_jᵀ (v_first).
//
// The columns of X are independent, so one CTA takes CHAIN_COLS of them for one (n, h) and walks the S segments in
// order; thread r owns row r (D threads, D = K = V, a multiple of CHAIN_STAGE up to 128). Per segment, A_j is
// staged through shared memory CHAIN_STAGE columns at a time (coalesced reads of M_j in either layout) and each
// thread sums its row in fp32 FMAs in a fixed order: deterministic, and no TF32 rounding of the carried state.
// A_j's stages are loaded into registers a whole segment ahead (D values a thread): a stage's sums are far shorter
// than a load's latency, so a prefetch one stage ahead left every stage waiting on memory (5 µs a position).
// CHAIN_COLS (state columns per CTA), CHAIN_STAGE (columns of A_j staged at a time) and CHAIN_MAX_D (the largest D)
// are defined in front of this text by kdagen.ops.segmented.chain_source, which checks D against them.

// offset of X[row, col] in a D × D state stored in the kv layout (row-major X) or the v_first one (row-major Xᵀ)
__device__ __forceinline__ long chain_at(int row, int col, int D, int v_first) {
  return v_first ? (long)col * D + row : (long)row * D + col;
}

extern "C" __global__ void __launch_bounds__(CHAIN_MAX_D) segment_chain(
    const float* M, const float* B, const float* first, float* h_in, int S, int HV, int D, int v_first) {
  __shared__ float x[CHAIN_MAX_D][CHAIN_COLS];             // X(j): this CTA's columns
  __shared__ float a[CHAIN_MAX_D][CHAIN_STAGE + 1];        // A_j[:, m0 : m0 + CHAIN_STAGE] (+1: no bank conflicts)
  const int n = blockIdx.x / HV, head = blockIdx.x % HV, col0 = blockIdx.y * CHAIN_COLS, r = threadIdx.x;
  const long mat = (long)D * D, step = (long)HV * mat;    // one state; segment j + 1 of a pair is `step` further
  const long pair0 = ((long)n * S * HV + head) * mat;      // segment 0 of (n, head)
  const int stages = D / CHAIN_STAGE;
  constexpr int MAX_STAGES = CHAIN_MAX_D / CHAIN_STAGE;
  float acc[CHAIN_COLS], b_next[CHAIN_COLS], staged[MAX_STAGES][CHAIN_STAGE];
  // The maps are all there before the chain starts, so their reads form one stream independent of the sums: stage
  // s of A_(j+1) (and B_(j+1)) is loaded into registers while segment j sums, right after stage s of A_j left the
  // same registers for shared memory.
  // Thread r stages the values k = 0 .. CHAIN_STAGE - 1 of A_j[:, m0 : m0 + CHAIN_STAGE] (D threads, D ·
  // CHAIN_STAGE values). kv: A[row, m] = M[row·D + m], consecutive threads take consecutive m (row k·D/32 + r/32,
  // m = r % 32); v_first: A[row, m] = M[m·D + row], consecutive threads consecutive rows (row r, m = k).
  const int row0 = v_first ? r : r / CHAIN_STAGE, row_k = v_first ? 0 : D / CHAIN_STAGE;
  const int m_r = v_first ? 0 : r % CHAIN_STAGE, m_k = v_first ? 1 : 0;
  const long at0 = v_first ? r : (long)row0 * D + m_r, at_k = v_first ? D : (long)row_k * D;
  const long at_m0 = v_first ? D : 1;                      // the offset of the stage's first column per m0
  const auto load_stage = [&](float (&into)[CHAIN_STAGE], long seg, int m0) {
    const float* src = M + seg + at0 + m0 * at_m0;
#pragma unroll
    for (int k = 0; k < CHAIN_STAGE; ++k) into[k] = src[k * at_k];
  };
  const float* f = first ? first + ((long)n * HV + head) * mat : nullptr;
#pragma unroll
  for (int c = 0; c < CHAIN_COLS; ++c) {
    acc[c] = f ? f[chain_at(r, col0 + c, D, v_first)] : 0.f;
    b_next[c] = S > 1 ? B[pair0 + chain_at(r, col0 + c, D, v_first)] : 0.f;
  }
  if (S > 1)
#pragma unroll
    for (int s = 0; s < MAX_STAGES; ++s)
      if (s < stages) load_stage(staged[s], pair0, s * CHAIN_STAGE);
  for (int j = 0;; ++j) {
    const long seg = pair0 + j * step;
#pragma unroll
    for (int c = 0; c < CHAIN_COLS; ++c) h_in[seg + chain_at(r, col0 + c, D, v_first)] = acc[c];
    if (j == S - 1) break;
#pragma unroll
    for (int c = 0; c < CHAIN_COLS; ++c) {
      x[r][c] = acc[c];
      acc[c] = b_next[c];
      if (j + 2 < S) b_next[c] = B[seg + step + chain_at(r, col0 + c, D, v_first)];
    }
#pragma unroll
    for (int s = 0; s < MAX_STAGES; ++s) {
      if (s >= stages) break;
      __syncthreads();                                     // x written; the previous stage of a read
#pragma unroll
      for (int k = 0; k < CHAIN_STAGE; ++k) a[row0 + k * row_k][m_r + k * m_k] = staged[s][k];
      __syncthreads();
      if (j + 2 < S) load_stage(staged[s], seg + step, s * CHAIN_STAGE);   // A_(j+1)'s stage s, a segment ahead
      const int m0 = s * CHAIN_STAGE;
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
