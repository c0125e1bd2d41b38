// Q6_K tile kernels (AVX2 / VNNI, 512-bit for wide tiles). Half h of a super-block (128
// values) takes 4 bits from ql[64h..64h+63] and 2 from qh[32h..32h+31]: 32-value chunk S
// uses the low (S < 2) or high nibbles of ql[64h + 32(S&1) + l] and bits 2S..2S+1 of
// qh[32h + l]. The values are used unsigned (0..63); the -32 comes back through bsums.
#include "quant/vec_dot_kernels.h"

#include "quant/kquant_tile.h"

#if defined(DF_QUANT_AVX2)
#include "quant/tile_driver.h"

namespace df::quant {

namespace {

using namespace ktile;

inline __m256i scales16(const BlockQ6_K& b) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
}

// Bits 2S..2S+1 of each qh byte moved to bits 4..5.
template <int S>
inline __m256i high_bits(__m256i qh) {
  if constexpr (S == 0) return _mm256_slli_epi16(qh, 4);
  if constexpr (S == 1) return _mm256_slli_epi16(qh, 2);
  if constexpr (S == 2) return qh;
  return _mm256_srli_epi16(qh, 2);
}

template <int S>
inline __m256i chunk_values(const BlockQ6_K& b, int h) {
  const __m256i ql = load(b.ql + 64 * h + 32 * (S & 1));
  const __m256i low = _mm256_and_si256(S < 2 ? ql : _mm256_srli_epi16(ql, 4), _mm256_set1_epi8(15));
  return _mm256_or_si256(low, _mm256_and_si256(high_bits<S>(load(b.qh + 32 * h)), _mm256_set1_epi8(0x30)));
}

// pshufb controls: bytes 0..7 = scale 2k, bytes 8..15 = scale 2k+1.
alignas(16) constexpr uint8_t kChunkScaleCtrl[8][16] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9},
    {10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13},
    {14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15}};

// 16-bit scales of chunk k (16 values per scale): lanes 0..7 scale 2k, lanes 8..15 scale 2k+1.
inline __m256i chunk_scales(const BlockQ6_K& b, int k) {
  const __m128i ctrl = _mm_load_si128(reinterpret_cast<const __m128i*>(kChunkScaleCtrl[k]));
  const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, ctrl));
}

struct Q6Ymm {
  template <int S, int R, int C>
  static void chunk(IntSums<R, C>& sums, const BlockQ6_K* const (&blk)[R], int h, const uint8_t* a, size_t as,
                    int64_t i) {
    __m256i q[R], s[R];
    for (int r = 0; r < R; ++r) {
      q[r] = chunk_values<S>(*blk[r], h);
      s[r] = chunk_scales(*blk[r], 4 * h + S);
    }
    sums.madd_group(q, s, a, as, i, 128 * h + 32 * S, S);
  }
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t ldo) {
    FloatSums<R, C> F;
    for (int64_t i = 0; i < n / kQKK; ++i) {
      const BlockQ6_K* blk[R];
      for (int r = 0; r < R; ++r) blk[r] = reinterpret_cast<const BlockQ6_K*>(w + size_t(r) * ws) + i;
      IntSums<R, C> S;
      for (int h = 0; h < 2; ++h) {
        chunk<0>(S, blk, h, a, as, i);
        chunk<1>(S, blk, h, a, as, i);
        chunk<2>(S, blk, h, a, as, i);
        chunk<3>(S, blk, h, a, as, i);
      }
      for (int c = 0; c < C; ++c)
        for (int r = 0; r < R; ++r)
          finish_q6k(F.lo[r][c], F.hi[r][c], S.part[0][r][c], S.part[1][r][c], scales16(*blk[r]), f16(blk[r]->d),
                     act_block(a, as, c, i));
    }
    F.store(out, ldo);
  }
};

#if defined(DF_QUANT_AVX512)
// Chunks S = 2p and 2p+1 of half h side by side (64 consecutive values): ql bytes
// 64h..64h+63 in one load; scales 4(2h+p) .. 4(2h+p)+3, 16 values each.
alignas(64) constexpr int16_t kQuadScaleIdx[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13,
     14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15}};

struct Q6Zmm {
  template <int P>
  static __m512i pair_values(const BlockQ6_K& b, int h) {
    const __m512i ql = load512(b.ql + 64 * h);
    const __m512i low = _mm512_and_si512(P == 0 ? ql : _mm512_srli_epi16(ql, 4), _mm512_set1_epi8(15));
    const __m256i qh = load(b.qh + 32 * h);
    const __m512i hi = join(high_bits<2 * P>(qh), high_bits<2 * P + 1>(qh));
    return _mm512_or_si512(low, _mm512_and_si512(hi, _mm512_set1_epi8(0x30)));
  }
  template <int P, int R, int C>
  static void pair(IntSums512<R, C>& sums, const BlockQ6_K* const (&blk)[R], const __m512i (&sc)[R], int h,
                   const uint8_t* a, size_t as, int64_t i) {
    __m512i q[R], s[R];
    for (int r = 0; r < R; ++r) {
      q[r] = pair_values<P>(*blk[r], h);
      s[r] = _mm512_permutexvar_epi16(_mm512_load_si512(kQuadScaleIdx[2 * h + P]), sc[r]);
    }
    sums.madd_group(q, s, a, as, i, 128 * h + 64 * P, P);
  }
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t ldo) {
    FloatSums512<R, C> F;
    for (int64_t i = 0; i < n / kQKK; ++i) {
      const BlockQ6_K* blk[R];
      __m512i sc[R];
      for (int r = 0; r < R; ++r) {
        blk[r] = reinterpret_cast<const BlockQ6_K*>(w + size_t(r) * ws) + i;
        sc[r] = _mm512_castsi256_si512(scales16(*blk[r]));
      }
      IntSums512<R, C> S;
      for (int h = 0; h < 2; ++h) {
        pair<0>(S, blk, sc, h, a, as, i);
        pair<1>(S, blk, sc, h, a, as, i);
      }
      for (int c = 0; c < C; ++c)
        for (int r = 0; r < R; ++r)
          finish_q6k(F.acc[r][c], S.part(r, c), scales16(*blk[r]), f16(blk[r]->d), act_block(a, as, c, i));
    }
    F.store(out, ldo);
  }
};
#endif

struct Q6Kernel : KShape {
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t ldo) {
#if defined(DF_QUANT_AVX512)
    Q6Zmm::tile<R, C>(n, w, ws, a, as, out, ldo);
#else
    Q6Ymm::tile<R, C>(n, w, ws, a, as, out, ldo);
#endif
  }
};

}  // namespace

TileFn simd_tile_q6k(GgmlType wt) { return wt == GgmlType::Q6_K ? &TileDriver<Q6Kernel>::run : nullptr; }

}  // namespace df::quant

#else

namespace df::quant {
TileFn simd_tile_q6k(GgmlType) { return nullptr; }
}  // namespace df::quant

#endif
