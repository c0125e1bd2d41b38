// Small x86 SIMD helpers shared by the dot kernels (internal to src/quant). The base kernels
// are 256-bit: with AVX-512VL the compiler gets 32 ymm registers for the register tiles, and
// VNNI (AVX512-VNNI or AVX-VNNI) fuses the int8 multiply-adds when the build has it. With
// AVX-512 BW + VNNI the wide (prefill) tiles use 512-bit twins of the same arithmetic.
//
// Batch invariance: for one (weight row, activation row) pair every kernel variant, narrow or
// wide, 256- or 512-bit, performs the same float operations in the same order (integer parts
// are exact), so a row's result never depends on how many rows were multiplied with it.
#pragma once
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define DF_QUANT_AVX2 1
// GCC 12's AVX-512 headers build some results from _mm512_undefined_*(), which its own
// -Wuninitialized then reports at every inlined use; the warning is spurious. (Effective
// because this header is the first to include immintrin.h in the kernel files.)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define DF_QUANT_VNNI 1
#define DF_DPBUSD _mm256_dpbusd_epi32
#define DF_DPWSSD _mm256_dpwssd_epi32
#elif defined(__AVXVNNI__)
#define DF_QUANT_VNNI 1
#define DF_DPBUSD _mm256_dpbusd_avx_epi32
#define DF_DPWSSD _mm256_dpwssd_avx_epi32
#endif

namespace df::quant::simd {

// 32 ymm registers with AVX-512VL (EVEX encoding), 16 with plain AVX2: sizes the tiles.
#if defined(__AVX512VL__)
inline constexpr bool kManyRegs = true;
#else
inline constexpr bool kManyRegs = false;
#endif

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float f16(uint16_t h) { return _cvtsh_ss(h); }

inline __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// acc + per-int32-lane sums of four u8*s8 products. Without VNNI via maddubs, which saturates
// pairs of products at 2^15: callers keep |u*s + u*s| below that (u <= 128, |s| <= 127).
inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s) {
#if defined(DF_QUANT_VNNI)
  return DF_DPBUSD(acc, u, s);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

// acc + per-int32-lane sums of two s16*s16 products.
inline __m256i dpwssd(__m256i acc, __m256i a, __m256i b) {
#if defined(DF_QUANT_VNNI)
  return DF_DPWSSD(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

// 16 bytes of packed nibbles -> 32 bytes: low nibbles in bytes 0..15, high in 16..31 (the
// legacy and IQ4 element order: byte j holds elements j and j+16).
inline __m256i nibbles_split(const uint8_t* q16) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q16));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
  return _mm256_and_si256(both, _mm256_set1_epi8(15));
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512VNNI__)
#define DF_QUANT_AVX512 1

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }

// Two 256-bit halves -> one 512-bit vector [lo | hi].
inline __m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
inline __m512 join(__m256 lo, __m256 hi) { return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1); }

// Sum of the two 256-bit halves: the 8-lane partial sums the 256-bit kernels would hold.
inline __m256i fold(__m512i v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); }
inline __m256 fold(__m512 v) { return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)); }
#endif

}  // namespace df::quant::simd

#endif
