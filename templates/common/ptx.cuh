// kdagen common: the inline PTX every family uses (mbarrier, bar.sync/arrive, shared-memory addresses),
// and nothing else. Instructions of one architecture live in sm80/ptx.cuh and sm90/ptx.cuh. The helpers
// in the other headers are built on these; the host emulation (kdagen.codegen.emulate) replaces exactly
// the ptx.cuh files (templates/emulate/<group>_ptx.cuh) to run kernels on the CPU in tests.
namespace kdg {

// Shared-memory address of a generic pointer, for the instructions that take one.
__device__ __forceinline__ u32 smem_addr(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
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

// ex2.approx.ftz.f32 and rcp.approx.ftz.f32: the special-function unit's 2^x and 1/x alone. exp2f, __expf and
// __fdividef compile to the same MUFU instruction wrapped in a test and two multiplies that keep subnormal results
// (and a branch where the caller selects); the gate and β never need those, and on the normal range the results
// are the same bits.
__device__ __forceinline__ float ptx_ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float ptx_rcp_ftz(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace kdg

// Dynamic shared memory of a kernel whose plan is above the static limit.
#define KDG_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
