// kdagen common: the scalar functions the expression emitter (kdagen.codegen.expr) writes calls to,
// and row loads into per-thread channel slices. No fast-math: every function is within a few ulp of the
// float64 value (libm's expf, logf, rsqrtf, or the MUFU forms below, each with its error bound stated).
namespace kdg {

// The fast exponential and reciprocal (≈ 2 ulp; 1 / inf = 0 for x below −88): the gate and β need no more.
// Flushing subnormals changes nothing here: e^−x below the smallest normal leaves 1 + e^−x = 1.
__device__ __forceinline__ float sigmoid(float x) { return ptx_rcp_ftz(1.f + ptx_ex2_ftz(x * -1.4426950408889634f)); }

// softplus with flash-linear-attention's threshold (x itself above it) on the special-function unit:
// softplus(x) = max(x, 0) + log1p(u) with u = e^−|x| in (0, 1], and log1p(u) = 2·atanh(s), s = u / (2 + u) ≤ 1/3,
// summed as its odd series to s^13 (the rest is below 2e-8 of the sum). u is 2^t with t = −|x|·log2(e) carried
// as t_hi + t_lo (rounding t alone would cost |t|·2^-24·ln 2 of u's precision: 20 ulp at x = −70), corrected to
// first order. Two MUFU operations and a dozen FMAs where libm's log1pf(expf(x)) spends range reductions and
// branches; a few ulp from the exact value at every x, softplus ≈ e^x included. −|x| is clamped at −128 (u is 0
// there in fp32 anyway), so t_lo stays finite for x = ±inf and |x| near the fp32 maximum; NaN passes through.
// tests/test_math_functions.py.
__device__ __forceinline__ float softplus(float x, float threshold) {
  constexpr float LOG2E_HI = 1.44269502162933349609375f, LOG2E_LO = 1.9259629891e-08f, LN2 = 0.6931471805599453f;
  const float ax = fmaxf(-fabsf(x), -128.f), t_hi = ax * LOG2E_HI;
  const float t_lo = fmaf(ax, LOG2E_LO, fmaf(ax, LOG2E_HI, -t_hi));
  const float u0 = ptx_ex2_ftz(t_hi), u = fmaf(u0, t_lo * LN2, u0);
  const float s = u * ptx_rcp_ftz(2.f + u), s2 = s * s;
  float p = 1.f / 13.f;
  p = fmaf(p, s2, 1.f / 11.f);
  p = fmaf(p, s2, 1.f / 9.f);
  p = fmaf(p, s2, 1.f / 7.f);
  p = fmaf(p, s2, 1.f / 5.f);
  p = fmaf(p, s2, 1.f / 3.f);
  const float log1p_u = 2.f * fmaf(s * s2, p, s);
  return x > threshold || x != x ? x : fmaxf(x, 0.f) + log1p_u;
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
