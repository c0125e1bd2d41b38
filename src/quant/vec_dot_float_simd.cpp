// SIMD tile kernels for the float formats: F32 x F32, F16 x F16 and BF16 x BF16 (the
// activation is converted to the weight's format, as llama.cpp does). Products accumulate
// in f32. 512-bit with AVX-512 (masked loads for the tail), 256-bit with AVX2 (scalar tail).
// BF16 uses vdpbf16ps where available: one instruction per 32 products.
#include "quant/vec_dot_kernels.h"

#include "quant/simd_x86.h"

#if defined(DF_QUANT_AVX2)
#include "quant/tile_driver.h"
#include "util/half.h"

namespace df::quant {

namespace {

using namespace simd;

#if defined(__AVX512F__) && defined(__AVX512BW__)
using VecF = __m512;
constexpr int kLanes = 16;
inline VecF vzero() { return _mm512_setzero_ps(); }
inline VecF vfma(VecF a, VecF b, VecF c) { return _mm512_fmadd_ps(a, b, c); }
inline VecF vadd(VecF a, VecF b) { return _mm512_add_ps(a, b); }
// (_mm512_reduce_add_ps trips a false -Wuninitialized in GCC 12's headers.)
inline float vsum(VecF v) {
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  return hsum(_mm256_add_ps(_mm512_castps512_ps256(v), hi));
}
inline __mmask16 tail_mask(int64_t left) { return __mmask16((1u << left) - 1); }

struct F32 {
  using T = float;
  static VecF load(const T* p) { return _mm512_loadu_ps(p); }
  static VecF load_tail(const T* p, int64_t left) { return _mm512_maskz_loadu_ps(tail_mask(left), p); }
};
struct F16 {
  using T = uint16_t;
  static VecF load(const T* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static VecF load_tail(const T* p, int64_t left) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask(left), p)); }
};
struct BF16 {
  using T = uint16_t;
  static VecF widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static VecF load(const T* p) { return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static VecF load_tail(const T* p, int64_t left) { return widen(_mm256_maskz_loadu_epi16(tail_mask(left), p)); }
};
#define DF_MASKED_TAIL 1
#else
using VecF = __m256;
constexpr int kLanes = 8;
inline VecF vzero() { return _mm256_setzero_ps(); }
inline VecF vfma(VecF a, VecF b, VecF c) { return _mm256_fmadd_ps(a, b, c); }
inline VecF vadd(VecF a, VecF b) { return _mm256_add_ps(a, b); }
inline float vsum(VecF v) { return hsum(v); }

struct F32 {
  using T = float;
  static VecF load(const T* p) { return _mm256_loadu_ps(p); }
  static float scalar(T v) { return v; }
};
struct F16 {
  using T = uint16_t;
  static VecF load(const T* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static float scalar(T v) { return f16_to_f32(v); }
};
struct BF16 {
  using T = uint16_t;
  static VecF load(const T* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static float scalar(T v) { return bf16_to_f32(v); }
};
#endif

template <class E>
struct FloatKernel {
  using T = typename E::T;
  // Few activation rows (decode) stream the weights from memory: one row at a time for the
  // 2-byte formats (a single sequential run, like the block formats), but four rows for f32,
  // which measured nearly twice as fast (4096x4096: 1.9 ms vs 4.2 ms on one core).
  static constexpr int kRows = 2, kCols = 2;
  static constexpr int kNarrowRows = sizeof(T) == 4 ? 4 : 1, kNarrowCols = sizeof(T) == 4 ? 1 : 4;

  // Every pair keeps kParts sums over interleaved vectors of the row, so one row's FMAs do
  // not wait on each other, added at the end: the same operations whatever the tile shape
  // (batch invariance).
  static constexpr int kParts = kManyRegs ? 4 : 2;
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t ldo) {
    constexpr int kSplit = kParts;
    const T* wr[R];
    const T* ar[C];
    for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const T*>(w + size_t(r) * ws);
    for (int c = 0; c < C; ++c) ar[c] = reinterpret_cast<const T*>(a + size_t(c) * as);
    VecF part[kSplit][R][C];
    for (auto& p : part)
      for (auto& row : p)
        for (auto& v : row) v = vzero();
    auto step = [&](int64_t k, VecF(&acc)[R][C]) {
      VecF wv[R];
      for (int r = 0; r < R; ++r) wv[r] = E::load(wr[r] + k);
      for (int c = 0; c < C; ++c) {
        const VecF av = E::load(ar[c] + k);
        for (int r = 0; r < R; ++r) acc[r][c] = vfma(wv[r], av, acc[r][c]);
      }
    };
    int64_t k = 0;
    for (; k + kSplit * kLanes <= n; k += kSplit * kLanes)
      for (int s = 0; s < kSplit; ++s) step(k + s * kLanes, part[s]);
    for (; k + kLanes <= n; k += kLanes) step(k, part[0]);
    VecF(&acc)[R][C] = part[0];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) {
        // (p0 + p1) + (p2 + p3): a fixed pairing.
        if constexpr (kSplit == 4) acc[r][c] = vadd(vadd(acc[r][c], part[1][r][c]), vadd(part[2][r][c], part[3][r][c]));
        else acc[r][c] = vadd(acc[r][c], part[1][r][c]);
      }
#if defined(DF_MASKED_TAIL)
    if (k < n) {
      for (int c = 0; c < C; ++c) {
        const VecF av = E::load_tail(ar[c] + k, n - k);
        for (int r = 0; r < R; ++r) acc[r][c] = vfma(E::load_tail(wr[r] + k, n - k), av, acc[r][c]);
      }
    }
    for (int c = 0; c < C; ++c)
      for (int r = 0; r < R; ++r) out[size_t(c) * ldo + r] = vsum(acc[r][c]);
#else
    for (int c = 0; c < C; ++c)
      for (int r = 0; r < R; ++r) {
        float s = vsum(acc[r][c]);
        for (int64_t t = k; t < n; ++t) s += E::scalar(wr[r][t]) * E::scalar(ar[c][t]);
        out[size_t(c) * ldo + r] = s;
      }
#endif
  }
};

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
// BF16 pairs multiplied and summed into f32 lanes by vdpbf16ps: 32 products per instruction.
struct KernelBF16Dp {
  static constexpr int kRows = 4, kCols = 2;
  static constexpr int kNarrowRows = 1, kNarrowCols = 4;
  static __m512bh load(const uint16_t* p) { return __m512bh(_mm512_loadu_si512(p)); }
  static __m512bh load_tail(const uint16_t* p, int64_t left) {
    return __m512bh(_mm512_maskz_loadu_epi16(__mmask32((1u << left) - 1), p));
  }
  // Two sums per pair (even / odd 32-element steps), as in FloatKernel.
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t ldo) {
    const uint16_t* wr[R];
    const uint16_t* ar[C];
    for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const uint16_t*>(w + size_t(r) * ws);
    for (int c = 0; c < C; ++c) ar[c] = reinterpret_cast<const uint16_t*>(a + size_t(c) * as);
    __m512 part[2][R][C];
    for (auto& p : part)
      for (auto& row : p)
        for (auto& v : row) v = _mm512_setzero_ps();
    auto step = [&](int64_t k, __m512(&acc)[R][C]) {
      __m512bh wv[R];
      for (int r = 0; r < R; ++r) wv[r] = load(wr[r] + k);
      for (int c = 0; c < C; ++c) {
        const __m512bh av = load(ar[c] + k);
        for (int r = 0; r < R; ++r) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], wv[r], av);
      }
    };
    int64_t k = 0;
    for (; k + 64 <= n; k += 64) {
      step(k, part[0]);
      step(k + 32, part[1]);
    }
    if (k + 32 <= n) {
      step(k, part[0]);
      k += 32;
    }
    if (k < n) {
      for (int c = 0; c < C; ++c) {
        const __m512bh av = load_tail(ar[c] + k, n - k);
        for (int r = 0; r < R; ++r) part[0][r][c] = _mm512_dpbf16_ps(part[0][r][c], load_tail(wr[r] + k, n - k), av);
      }
    }
    for (int c = 0; c < C; ++c)
      for (int r = 0; r < R; ++r) out[size_t(c) * ldo + r] = vsum(_mm512_add_ps(part[0][r][c], part[1][r][c]));
  }
};
#endif

}  // namespace

TileFn simd_tile_float(GgmlType wt) {
  switch (wt) {
    case GgmlType::F32: return &TileDriver<FloatKernel<F32>>::run;
    case GgmlType::F16: return &TileDriver<FloatKernel<F16>>::run;
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
    case GgmlType::BF16: return &TileDriver<KernelBF16Dp>::run;
#else
    case GgmlType::BF16: return &TileDriver<FloatKernel<BF16>>::run;
#endif
    default: return nullptr;
  }
}

}  // namespace df::quant

#else

namespace df::quant {
TileFn simd_tile_float(GgmlType) { return nullptr; }
}  // namespace df::quant

#endif
