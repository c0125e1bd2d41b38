// Small SIMD helpers shared by the CPU ops. Dot products keep several independent
// accumulators: a plain float loop cannot be vectorized without reassociating the sum.
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstdint>

namespace df::cpu {

inline float dot(const float* a, const float* b, int n) {
  int i = 0;
  float s = 0;
#if defined(__AVX512F__)
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i + 16 <= n; i += 16) acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
  s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  acc0 = _mm256_add_ps(acc0, acc1);
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(acc0), _mm256_extractf128_ps(acc0, 1));
  lo = _mm_hadd_ps(lo, lo);
  lo = _mm_hadd_ps(lo, lo);
  s = _mm_cvtss_f32(lo);
#endif
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline float sum_squares(const float* x, int n) { return dot(x, x, n); }

}  // namespace df::cpu

namespace df::cpu {

#if defined(__AVX512F__)
// exp(x) for 16 lanes: x = n ln2 + r with |r| <= ln2/2, e^r by a degree-6 polynomial, 2^n by
// exponent arithmetic. Max relative error ~2 ulp over the range where the result is normal;
// underflows to 0 below -87.3 and saturates to inf above 88.7 like expf.
// The all-lanes masked forms of min, max, roundscale and scalef compute the same as the plain
// ones; GCC 12's plain ones pass an undefined vector through, which it then reports as maybe
// uninitialized wherever exp16 is inlined.
inline __m512 exp16(__m512 x) {
  const __m512 hi = _mm512_set1_ps(88.7f), lo = _mm512_set1_ps(-87.3f);
  constexpr __mmask16 kAll = 0xFFFF;
  x = _mm512_mask_max_ps(x, kAll, x, lo);
  x = _mm512_mask_min_ps(x, kAll, x, hi);
  const __m512 xl = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504089f));
  const __m512 n = _mm512_mask_roundscale_ps(xl, kAll, xl, _MM_FROUND_TO_NEAREST_INT);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);  // ln2 split in two parts
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_mask_scalef_ps(p, kAll, p, n);
}
#endif

// out[i] = silu(x[i]) * (y ? y[i] : 1)   (x / (1 + e^-x))
inline void silu_mul(const float* x, const float* y, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 one = _mm512_set1_ps(1.0f);
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    __m512 s = _mm512_div_ps(v, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), v))));
    if (y) s = _mm512_mul_ps(s, _mm512_loadu_ps(y + i));
    _mm512_storeu_ps(out + i, s);
  }
#endif
  for (; i < n; ++i) {
    const float s = x[i] / (1.0f + std::exp(-x[i]));
    out[i] = y ? s * y[i] : s;
  }
}

}  // namespace df::cpu
