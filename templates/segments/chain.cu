// The chain of a call cut into segments (kdagen.ops.segmented, docs/segments.md §4 and §6): every segment's
// incoming state from the segments' affine maps, in one launch. For sequence n, value head h and segment j
// (stored at n·S + j):
//   S_in(0) = first[n]  (zero when first is null),   S_in(j + 1) = M_j · S_in(j) + B_j
// in the kv layout (state [K, V]); with state_v_first (state [V, K]) S_in(j + 1) = S_in(j) · M_j + B_j, which is
// the same recurrence on the transposed state. Both are written below on X = the state seen as [K, ·] (X = S, or
// Sᵀ with v_first): X(j + 1) = A_j · X(j) + B_jᵀ-as-X, A_j = M_j (kv) or M_jᵀ (v_first). A training call's
// backward runs the same chain over the segments in reverse with the maps transposed.
//
// The columns of X are independent, so one CTA takes CHAIN_COLS of them for one (n, h) and walks the S segments in
// order. Thread (r, p) owns row r and the p-th of CHAIN_PARTS ranges of the sum's index m: per position it sums
// A_j[r, m]·X(j)[m, c] over its range (fp32 FMAs in m order), the parts meet in shared memory, and thread (r, p)
// adds them in part order (after B_j) for its CHAIN_COLS / CHAIN_PARTS columns: deterministic, no TF32 rounding of
// the carried state, and a dependent chain per position CHAIN_PARTS times shorter than one thread per row walking
// all of m. A_j sits whole in shared memory (row pitch D + 1: no bank is met twice, in either layout); A_(j+1) is
// loaded into registers while position j sums, and stored there after it. Two barriers per position.
// CHAIN_COLS (state columns per CTA), CHAIN_PARTS (ranges of m) and CHAIN_D (the state size D = K = V: one module per
// D, so every loop has a known trip count) are defined in front of this text by kdagen.ops.segmented.chain_source;
// kdagen.ops.segmented.chain_smem_bytes sizes the dynamic shared memory.
#ifndef KDG_DYNAMIC_SMEM
#define KDG_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

// offset of X[row, col] in a D × D state stored in the kv layout (row-major X) or the v_first one (row-major Xᵀ)
__device__ __forceinline__ long chain_at(int row, int col, int v_first) {
  return v_first ? (long)col * CHAIN_D + row : (long)row * CHAIN_D + col;
}

extern "C" __global__ void __launch_bounds__(CHAIN_D * CHAIN_PARTS) segment_chain(
    const float* M, const float* B, const float* first, float* h_in, int S, int HV, int v_first) {
  constexpr int D = CHAIN_D, OWN = CHAIN_COLS / CHAIN_PARTS;   // OWN: the columns a thread finishes
  constexpr int PER = D / CHAIN_PARTS;                     // the values of A_j a thread stages (and its m range)
  static_assert(OWN * CHAIN_PARTS == CHAIN_COLS && PER * CHAIN_PARTS == D && D % 32 == 0,
                "each part finishes as many columns and sums as many m; a warp's threads share their part");
  KDG_DYNAMIC_SMEM(smem);
  float* a = reinterpret_cast<float*>(smem);               // A_j [D][D + 1]
  float* x = a + D * (D + 1);                              // X(j) [D][CHAIN_COLS]: this CTA's columns
  float* parts = x + D * CHAIN_COLS;                       // [CHAIN_PARTS][D][CHAIN_COLS]: the parts' sums
  const int t = threadIdx.x, r = t % D, p = t / D;
  const int n = blockIdx.x / HV, head = blockIdx.x % HV, col0 = blockIdx.y * CHAIN_COLS, c0 = p * OWN;
  const long mat = (long)D * D, step = (long)HV * mat;    // one state; segment j + 1 of a pair is `step` further
  const long pair0 = ((long)n * S * HV + head) * mat;      // segment 0 of (n, head)
  // Thread t stages the elements e = t + k·D·CHAIN_PARTS of M_j as stored (row-major): row p + k·CHAIN_PARTS,
  // column r — consecutive threads read consecutive addresses. Element (i, l) of M is A[i][l] (kv) or A[l][i].
  float staged[PER];
  const auto load_map = [&](long seg) {
#pragma unroll
    for (int k = 0; k < PER; ++k) staged[k] = M[seg + (long)(p + k * CHAIN_PARTS) * D + r];
  };
  const auto store_map = [&]() {
#pragma unroll
    for (int k = 0; k < PER; ++k) {
      const int i = p + k * CHAIN_PARTS;
      a[v_first ? r * (D + 1) + i : i * (D + 1) + r] = staged[k];
    }
  };
  float b[OWN];                                            // B_j of this thread's columns
  const auto load_b = [&](long seg) {
#pragma unroll
    for (int c = 0; c < OWN; ++c) b[c] = B[seg + chain_at(r, col0 + c0 + c, v_first)];
  };
  const float* f = first ? first + ((long)n * HV + head) * mat : nullptr;
#pragma unroll
  for (int c = 0; c < OWN; ++c) {
    const float v = f ? f[chain_at(r, col0 + c0 + c, v_first)] : 0.f;
    x[r * CHAIN_COLS + c0 + c] = v;
    h_in[pair0 + chain_at(r, col0 + c0 + c, v_first)] = v;
  }
  if (S == 1) return;
  load_map(pair0);
  load_b(pair0);
  store_map();
  if (S > 2) load_map(pair0 + step);                       // A_1, while position 0 sums
  __syncthreads();                                         // A_0 and X(0) in shared memory
  for (int j = 0; j + 1 < S; ++j) {
    const long seg = pair0 + (long)j * step;
    float sum[CHAIN_COLS];
#pragma unroll
    for (int c = 0; c < CHAIN_COLS; ++c) sum[c] = 0.f;
    const float* row = a + r * (D + 1);
#pragma unroll 8
    for (int m = p * PER; m < (p + 1) * PER; ++m) {
      const float coef = row[m];
#pragma unroll
      for (int c = 0; c < CHAIN_COLS; ++c) sum[c] = fmaf(coef, x[m * CHAIN_COLS + c], sum[c]);
    }
#pragma unroll
    for (int c = 0; c < CHAIN_COLS; ++c) parts[(p * D + r) * CHAIN_COLS + c] = sum[c];
    __syncthreads();                                       // every part written; A_j and X(j) read
#pragma unroll
    for (int c = 0; c < OWN; ++c) {
      float v = b[c];
#pragma unroll
      for (int q = 0; q < CHAIN_PARTS; ++q) v += parts[(q * D + r) * CHAIN_COLS + c0 + c];
      x[r * CHAIN_COLS + c0 + c] = v;
      h_in[seg + step + chain_at(r, col0 + c0 + c, v_first)] = v;
    }
    if (j + 2 < S) {
      load_b(seg + step);
      store_map();                                         // A_(j+1), loaded during position j
      if (j + 3 < S) load_map(seg + 2 * step);             // A_(j+2), while position j + 1 sums
    }
    __syncthreads();                                       // X(j + 1) and A_(j+1) in shared memory
  }
}
