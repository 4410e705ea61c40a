// kdagen common: global -> shared copies.
// cp.async (sm_80+) moves 16 bytes without staging through registers; a false `valid` zero-fills
// the destination instead of reading (tail rows of a chunk). Completion is signalled either by
// cp_async_wait_all() or, for a pipeline, by cp_async_arrive(bar) on the stage's "ready" mbarrier:
// each calling thread contributes one arrival once all of its earlier copies have landed; or by commit groups
// (cp_async_commit, cp_async_wait_pending).
namespace kdg {

__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  ptx_cp_async_16(smem, gmem, valid ? 16 : 0);
}

__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, bool valid) {
  ptx_cp_async_4(smem, gmem, valid ? 4 : 0);
}

__device__ __forceinline__ void cp_async_arrive(u64* bar) { ptx_cp_async_arrive(bar); }

__device__ __forceinline__ void cp_async_wait_all() { ptx_cp_async_wait_all(); }

// Groups, for a ring filled several stages ahead: commit after a stage's copies; cp_async_wait_pending<N>() returns
// once all but this thread's N most recent groups have landed.
__device__ __forceinline__ void cp_async_commit() { ptx_cp_async_commit(); }

template <int N>
__device__ __forceinline__ void cp_async_wait_pending() { ptx_cp_async_wait_group<N>(); }

// Copy `rows` x `row_bytes` (a multiple of 16) from global (row stride gstride bytes) into shared
// (row stride sstride bytes) with cp.async, threads [first, first + nthreads) taking 16-byte pieces
// round-robin; rows >= valid_rows are zero-filled.
__device__ __forceinline__ void cp_async_tile(void* smem, int sstride, const void* gmem, long long gstride,
                                              int rows, int row_bytes, int valid_rows, int tid, int nthreads) {
  const int per_row = row_bytes / 16;
  for (int i = tid; i < rows * per_row; i += nthreads) {
    const int r = i / per_row, c = (i % per_row) * 16;
    const bool ok = r < valid_rows;
    const char* src = static_cast<const char*>(gmem) + (ok ? r * gstride + c : 0);
    cp_async_16(static_cast<char*>(smem) + r * sstride + c, src, ok);
  }
}

}  // namespace kdg
