// kdagen common: where sequences and chunks lie on the packed token axis. One helper for every kernel:
// packed batches pass cu_seqlens (int64 [N+1]) and chunk_offsets (int32 [N+1]: each sequence's first chunk in
// the chunk-indexed workspaces); fixed-length batches pass nullptr for both and T, the tokens per sequence.
// Chunks never straddle sequences; a sequence's last chunk may be short (L < C valid rows).
namespace kdg {

struct Span {
  long long begin, end;  // tokens [begin, end)
};

// The tokens of sequence n.
__device__ __forceinline__ Span sequence_span(const long long* cu_seqlens, int T, int n) {
  if (cu_seqlens != nullptr) return {cu_seqlens[n], cu_seqlens[n + 1]};
  return {(long long)n * T, (long long)(n + 1) * T};
}

// The index of sequence n's first chunk in the workspaces.
__device__ __forceinline__ long long first_chunk(const int* chunk_offsets, int T, int C, int n) {
  return chunk_offsets != nullptr ? (long long)chunk_offsets[n] : (long long)n * ((T + C - 1) / C);
}

// Chunk ci of sequence n, for head-parallel kernels that walk a sequence's chunks: its index in the
// workspaces, its first token and its valid rows.
struct SeqChunk {
  long long index;
  long long t0;
  int L;
};

// The chunks of sequence n, its place read once (a loop over them then reads no sequence table per chunk).
struct SeqChunks {
  long long first;  // its first chunk's index in the workspaces
  Span span;
  int C;
  __device__ __forceinline__ SeqChunk at(int ci) const {
    const long long t0 = span.begin + (long long)ci * C;
    return {first + ci, t0, (int)min((long long)C, span.end - t0)};
  }
  __device__ __forceinline__ int count() const { return (int)((span.end - span.begin + C - 1) / C); }
};

__device__ __forceinline__ SeqChunks sequence_chunks(const long long* cu_seqlens, const int* chunk_offsets, int T, int C,
                                                     int n) {
  return {first_chunk(chunk_offsets, T, C, n), sequence_span(cu_seqlens, T, n), C};
}

struct ChunkAt {
  int seq;       // the sequence it belongs to
  long long t0;  // its first token
  int L;         // its valid rows (<= C)
};

// Chunk c of a chunk-parallel grid (an upper bound on the chunk count): false for a surplus CTA. Packed
// batches find the sequence by binary search over chunk_offsets (empty sequences own no chunk).
__device__ __forceinline__ bool locate_chunk(const long long* cu_seqlens, const int* chunk_offsets, int T, int N,
                                             int C, int c, ChunkAt& at) {
  if (chunk_offsets != nullptr) {
    if (c >= chunk_offsets[N]) return false;
    int lo = 0, hi = N - 1;  // the last n with chunk_offsets[n] <= c
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (chunk_offsets[mid] <= c) lo = mid; else hi = mid - 1;
    }
    at.seq = lo;
    at.t0 = cu_seqlens[lo] + (long long)(c - chunk_offsets[lo]) * C;
  } else {
    const int per_seq = (T + C - 1) / C;
    if (c >= N * per_seq) return false;
    at.seq = c / per_seq;
    at.t0 = (long long)at.seq * T + (long long)(c % per_seq) * C;
  }
  const Span s = sequence_span(cu_seqlens, T, at.seq);
  at.L = (int)min((long long)C, s.end - at.t0);
  return true;
}

// Blocks of G consecutive chunks of one sequence (the backward's checkpoints): block b of sequence n owns slot
// ⌊first_chunk(n) / G⌋ + n + b. Slots are distinct and below chunks / G + N for any batch (⌊(a + m) / G⌋ + 1 ≥
// ⌊a / G⌋ + ⌈m / G⌉), so a grid of that many CTAs covers every block with no host sync.
__device__ __forceinline__ long long block_slot(const int* chunk_offsets, int T, int C, int G, int n, int b) {
  return first_chunk(chunk_offsets, T, C, n) / G + n + b;
}

// The blocks of sequence n.
__device__ __forceinline__ int sequence_blocks(const int* chunk_offsets, int T, int C, int G, int n) {
  const long long chunks = first_chunk(chunk_offsets, T, C, n + 1) - first_chunk(chunk_offsets, T, C, n);
  return (int)((chunks + G - 1) / G);
}

// The (sequence, block) owning slot s, by binary search over the sequences' first slots: false for a slot no block
// owns (a surplus CTA).
__device__ __forceinline__ bool locate_block(const int* chunk_offsets, int T, int C, int N, int G, long long s, int& n,
                                             int& b) {
  int lo = 0, hi = N - 1;  // the last n whose first slot is <= s
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (block_slot(chunk_offsets, T, C, G, mid, 0) <= s) lo = mid; else hi = mid - 1;
  }
  n = lo;
  b = (int)(s - block_slot(chunk_offsets, T, C, G, lo, 0));
  return b < sequence_blocks(chunk_offsets, T, C, G, lo);
}

}  // namespace kdg
