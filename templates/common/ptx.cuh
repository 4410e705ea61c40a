// kdagen common: every inline PTX instruction and CUDA address-space intrinsic kdagen uses, and
// nothing else. The helpers in the other common headers are built on these; a host emulation
// (kdagen.codegen.emulate) replaces exactly this file to run kernels on the CPU in tests.
namespace kdg {

// Shared-memory address of a generic pointer, for the instructions that take one.
__device__ __forceinline__ u32 smem_addr(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d += a·b (register layouts in mma.cuh).
__device__ __forceinline__ void ptx_mma_16816(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
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

__device__ __forceinline__ void ptx_mbarrier_init(u64* bar, int count) {
  asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" :: "r"(smem_addr(bar)), "r"(count));
}

__device__ __forceinline__ void ptx_mbarrier_arrive(u64* bar) {
  asm volatile("{\n .reg .b64 state;\n mbarrier.arrive.shared.b64 state, [%0];\n}\n"
               :: "r"(smem_addr(bar)) : "memory");
}

// True once the phase with this parity has completed (a fresh barrier reports parity 1 complete).
__device__ __forceinline__ bool ptx_mbarrier_test(u64* bar, int parity) {
  u32 done;
  asm volatile("{\n .reg .pred p;\n mbarrier.test_wait.parity.shared.b64 p, [%1], %2;\n"
               " selp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
  return done != 0;
}

__device__ __forceinline__ void ptx_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void ptx_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
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

}  // namespace kdg

// Dynamic shared memory of a kernel whose plan is above the static limit.
#define KDG_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
