// kdagen common: scalar types and conversions shared by every kernel.
// Included once per translation unit by templates/unit.cu.j2; everything lives in namespace kdg.
namespace kdg {

typedef unsigned int u32;
typedef unsigned long long u64;
typedef __nv_bfloat16 bf16;

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }

// One half of a word holding two bf16 elements (`high`: the second, at the higher address), widened exactly.
__device__ __forceinline__ float widen_bf16(u32 w, int high) {
  return __uint_as_float(high ? w & 0xffff0000u : w << 16);
}

// Store a float into a tensor element of type T (round-to-nearest for bf16).
__device__ __forceinline__ void store_f32(float* p, float x) { *p = x; }
__device__ __forceinline__ void store_f32(bf16* p, float x) { *p = __float2bfloat16_rn(x); }

// Two floats packed into one 32-bit register as bf16 (lo in the low half): the mma operand format.
__device__ __forceinline__ u32 pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<u32*>(&v);
}

// Integer ceiling division, used for chunk counts.
__device__ __forceinline__ int ceil_div(int a, int b) { return (a + b - 1) / b; }

}  // namespace kdg

// Kernels (global scope) name element types as the plan does: bf16, float.
using kdg::bf16;
