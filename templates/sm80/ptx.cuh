// kdagen sm80: inline PTX of the sm_80 instruction set (also on sm_90a): mma.sync m16n8k16 (bf16) and m16n8k8
// (tf32), ldmatrix, cp.async. Emulated on the host by templates/emulate/sm80_ptx.cuh.
namespace kdg {

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d += a·b (register layouts in mma.cuh).
__device__ __forceinline__ void ptx_mma_16816(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32: d += a·b, operands fp32 registers rounded to tf32 by
// ptx_cvt_tf32 (register layouts in mma.cuh).
__device__ __forceinline__ void ptx_mma_1688_tf32(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// cvt.rna.tf32.f32: x rounded to a 10-bit mantissa, ties away from zero (the low 13 bits of the result are 0).
__device__ __forceinline__ u32 ptx_cvt_tf32(float x) {
  u32 r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// ldmatrix .x4: lane l supplies the address of row (l & 7) of 8x8 matrix (l >> 3); r[i] receives
// matrix i's elements (row l/4, columns 2(l%4), 2(l%4)+1), or with .trans (rows 2(l%4), +1; column l/4).
__device__ __forceinline__ void ptx_ldmatrix_x4(u32 (&r)[4], const void* row_ptr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(row_ptr)));
}

__device__ __forceinline__ void ptx_ldmatrix_x4_trans(u32 (&r)[4], const void* row_ptr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(row_ptr)));
}

// cp.async of 16 or 4 bytes; src_bytes = 0 zero-fills the destination without reading.
__device__ __forceinline__ void ptx_cp_async_16(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :: "r"(smem_addr(smem)), "l"(gmem), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void ptx_cp_async_4(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
               :: "r"(smem_addr(smem)), "l"(gmem), "r"(src_bytes) : "memory");
}

// One arrival on bar once all of this thread's earlier cp.async copies have landed.
__device__ __forceinline__ void ptx_cp_async_arrive(u64* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" :: "r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void ptx_cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
}

// Close this thread's group of cp.async copies issued since the last commit.
__device__ __forceinline__ void ptx_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Wait until at most N of this thread's committed groups are still in flight (the N most recent).
template <int N>
__device__ __forceinline__ void ptx_cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

}  // namespace kdg
