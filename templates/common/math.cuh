// kdagen common: the scalar functions the expression emitter (kdagen.codegen.expr) writes calls to,
// and row loads into per-thread channel slices. Accurate libm forms (no fast-math) so the prologue
// matches the float64 reference to fp32 rounding.
namespace kdg {

// The fast exponential and reciprocal (≈ 2 ulp; 1 / inf = 0 for x below −88): the gate and β need no more.
// Flushing subnormals changes nothing here: e^−x below the smallest normal leaves 1 + e^−x = 1.
__device__ __forceinline__ float sigmoid(float x) { return ptx_rcp_ftz(1.f + ptx_ex2_ftz(x * -1.4426950408889634f)); }

// softplus with flash-linear-attention's threshold: x itself above it.
__device__ __forceinline__ float softplus(float x, float threshold) {
  return x > threshold ? x : log1pf(expf(x));
}

__device__ __forceinline__ float square(float x) { return x * x; }

// N consecutive elements from p into registers (zeros when !valid); 16-byte vector loads when the
// slice allows (p must then be 16-byte aligned).
template <int N>
__device__ __forceinline__ void load_row(float (&dst)[N], const bf16* p, bool valid) {
  if (!valid) {
#pragma unroll
    for (int j = 0; j < N; ++j) dst[j] = 0.f;
    return;
  }
  if constexpr (N % 8 == 0) {
#pragma unroll
    for (int j = 0; j < N; j += 8) {
      const uint4 raw = *reinterpret_cast<const uint4*>(p + j);
      const bf16* e = reinterpret_cast<const bf16*>(&raw);
#pragma unroll
      for (int i = 0; i < 8; ++i) dst[j + i] = __bfloat162float(e[i]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) dst[j] = __bfloat162float(p[j]);
  }
}

template <int N>
__device__ __forceinline__ void load_row(float (&dst)[N], const float* p, bool valid) {
  if (!valid) {
#pragma unroll
    for (int j = 0; j < N; ++j) dst[j] = 0.f;
    return;
  }
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int j = 0; j < N; j += 4) {
      const float4 v = *reinterpret_cast<const float4*>(p + j);
      dst[j] = v.x; dst[j + 1] = v.y; dst[j + 2] = v.z; dst[j + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) dst[j] = p[j];
  }
}

// N floats from registers to N consecutive bf16 elements at p (16-byte stores when N % 8 == 0, else 4-byte
// pairs when N is even; p aligned to match).
template <int N>
__device__ __forceinline__ void store_row(bf16* p, const float (&src)[N]) {
  if constexpr (N % 8 == 0) {
#pragma unroll
    for (int j = 0; j < N; j += 8) {
      uint4 raw;
      u32* w = reinterpret_cast<u32*>(&raw);
#pragma unroll
      for (int i = 0; i < 4; ++i) w[i] = pack_bf16(src[j + 2 * i], src[j + 2 * i + 1]);
      *reinterpret_cast<uint4*>(p + j) = raw;
    }
  } else if constexpr (N % 2 == 0) {
#pragma unroll
    for (int j = 0; j < N; j += 2) *reinterpret_cast<u32*>(p + j) = pack_bf16(src[j], src[j + 1]);
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) p[j] = __float2bfloat16_rn(src[j]);
  }
}

template <int N>
__device__ __forceinline__ void store_row(float* p, const float (&src)[N]) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int j = 0; j < N; j += 4) *reinterpret_cast<float4*>(p + j) = make_float4(src[j], src[j + 1], src[j + 2], src[j + 3]);
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) p[j] = src[j];
  }
}

}  // namespace kdg
