// Pieces shared by the K-quant and IQ4_XS tile kernels (internal to src/quant, AVX2 builds).
//
// Per super-block and (weight row, activation row) pair the products are summed exactly in
// int32 lanes (maddubs, then a 16-bit multiply-add with the sub-block scale, fused by VNNI's
// vpdpwssd). The lane layout is fixed (see FloatSums), integer sums are exact, and the float
// step per super-block does the same per-lane operations in its 256- and 512-bit forms: so
// every tile shape and vector width gives bit-identical results (batch invariance).
#pragma once
#include "quant/simd_x86.h"

#if defined(DF_QUANT_AVX2)
#include <cstring>

#include "quant/blocks.h"

namespace df::quant::ktile {

using namespace simd;

inline const BlockQ8_K& act_block(const uint8_t* a, size_t as, int c, int64_t i) {
  return reinterpret_cast<const BlockQ8_K*>(a + size_t(c) * as)[i];
}

// pshufb controls selecting 16-bit lane j in each 128-bit half.
alignas(32) inline constexpr uint8_t kWordSelect[8][32] = {
    {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1},
    {2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3},
    {4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5},
    {6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7},
    {8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9},
    {10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11,
     10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11},
    {12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13,
     12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13},
    {14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15,
     14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15}};

// Eight 16-bit scales in both 128-bit halves -> scale j in all 16 lanes.
inline __m256i select_scale(__m256i scales8x2, int j) {
  return _mm256_shuffle_epi8(scales8x2, _mm256_load_si256(reinterpret_cast<const __m256i*>(kWordSelect[j])));
}

// The canonical sums of a (weight row, activation row) pair: 16 lanes, as one 512-bit
// register or two 256-bit halves. Lanes 0..7 collect the even 32-value groups of a
// super-block (Q4_K/Q5_K: even sub-blocks; Q6_K: chunks 0 and 2; IQ4_XS: even sub-blocks),
// lanes 8..15 the odd ones, each lane the same byte positions. Integer sums per super-block,
// float sums across super-blocks. Two halves also give a single row two independent chains.
template <int R, int C>
struct FloatSums {
  __m256 lo[R][C], hi[R][C];
  FloatSums() {
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) lo[r][c] = hi[r][c] = _mm256_setzero_ps();
  }
  void store(float* out, size_t ldo) const {
    for (int c = 0; c < C; ++c)
      for (int r = 0; r < R; ++r) out[size_t(c) * ldo + r] = hsum(_mm256_add_ps(lo[r][c], hi[r][c]));
  }
};

template <int R, int C>
struct IntSums {
  __m256i part[2][R][C];  // [0] = lanes 0..7, [1] = lanes 8..15
  IntSums() {
    for (auto& p : part)
      for (auto& row : p)
        for (auto& v : row) v = _mm256_setzero_si256();
  }
  // part[group % 2] += (w[r] * a) * scale[r] for the 32 activation bytes at `offset`.
  void madd_group(const __m256i (&w)[R], const __m256i (&scale)[R], const uint8_t* a, size_t as, int64_t i,
                  int offset, int group) {
    auto& p = part[group % 2];
    for (int c = 0; c < C; ++c) {
      const __m256i av = load(act_block(a, as, c, i).qs + offset);
      for (int r = 0; r < R; ++r) p[r][c] = dpwssd(p[r][c], _mm256_maddubs_epi16(w[r], av), scale[r]);
    }
  }
};

// Per-row super-block header of Q4_K / Q5_K: the 8 sub-block scales as 16-bit values in
// both 128-bit halves (for select_scale and vpermw), d, and the min terms dmin * m_j as 8
// floats. The 6-bit fields are unpacked with 32-bit word operations (the layout of
// k4_scale_min).
struct K4Header {
  float d;
  __m256i scales;
  __m256 mins;
  template <class Block>
  void load(const Block& b) {
    uint32_t w[3];
    std::memcpy(w, b.scales, 12);
    const uint32_t sc03 = w[0] & 0x3f3f3f3fu, mn03 = w[1] & 0x3f3f3f3fu;
    const uint32_t sc47 = (w[2] & 0x0f0f0f0fu) | ((w[0] >> 2) & 0x30303030u);
    const uint32_t mn47 = ((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 2) & 0x30303030u);
    scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_set_epi32(0, 0, int(sc47), int(sc03))));
    const __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, int(mn47), int(mn03))));
    mins = _mm256_mul_ps(m, _mm256_set1_ps(f16(b.dmin)));
    d = f16(b.d);
  }
};

// Per-activation super-block terms for the K4 min part: d_a and the 8 sub-block sums of the
// activation (each two bsums) times d_a.
struct K4Act {
  float d;
  __m256 sums;
  explicit K4Act(const BlockQ8_K& ab) : d(ab.d) {
    const __m256i pair_sums = _mm256_madd_epi16(load(ab.bsums), _mm256_set1_epi16(1));
    sums = _mm256_mul_ps(_mm256_cvtepi32_ps(pair_sums), _mm256_set1_ps(ab.d));
  }
};

// --- The float step of each format, per super-block -----------------------------------
// Each has a 256-bit form (two halves) and a 512-bit form doing the same per-lane operations.

// Q4_K / Q5_K: sums += (d d_a) * isum, then lanes 0..7 -= (dmin m_j) * (d_a asum_j).
inline void finish_k4(__m256& lo, __m256& hi, __m256i ilo, __m256i ihi, const K4Header& h, const K4Act& act) {
  const __m256 s = _mm256_set1_ps(h.d * act.d);
  lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ilo), s, lo);
  hi = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ihi), s, hi);
  lo = _mm256_fnmadd_ps(h.mins, act.sums, lo);
}

// Q6_K: the 6-bit values were summed unsigned (0..63); their -32 is sum_j 32 sc_j bsum_j,
// taken from lanes 0..7 (exact integers).
inline __m256i q6k_offset(__m256i scales16, const BlockQ8_K& ab) {
  return _mm256_slli_epi32(_mm256_madd_epi16(load(ab.bsums), scales16), 5);
}
inline void finish_q6k(__m256& lo, __m256& hi, __m256i ilo, __m256i ihi, __m256i scales16, float d, const BlockQ8_K& ab) {
  const __m256 s = _mm256_set1_ps(d * ab.d);
  lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(ilo, q6k_offset(scales16, ab))), s, lo);
  hi = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ihi), s, hi);
}

// IQ4_XS: sums += (d d_a) * isum.
inline void finish_iq4xs(__m256& lo, __m256& hi, __m256i ilo, __m256i ihi, float d, const BlockQ8_K& ab) {
  const __m256 s = _mm256_set1_ps(d * ab.d);
  lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ilo), s, lo);
  hi = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ihi), s, hi);
}

#if defined(DF_QUANT_AVX512)
// vpermw indices: 16-bit lanes 0..15 take scale 2g, lanes 16..31 scale 2g+1 (two 32-value
// groups per 512-bit register).
alignas(64) inline constexpr int16_t kPairScaleIdx[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}};

inline __m512i pair_scales(__m256i scales8x2, int g) {
  return _mm512_permutexvar_epi16(_mm512_load_si512(kPairScaleIdx[g]), _mm512_castsi256_si512(scales8x2));
}

template <int R, int C>
struct FloatSums512 {
  __m512 acc[R][C];
  FloatSums512() {
    for (auto& row : acc)
      for (auto& v : row) v = _mm512_setzero_ps();
  }
  void store(float* out, size_t ldo) const {
    for (int c = 0; c < C; ++c)
      for (int r = 0; r < R; ++r) out[size_t(c) * ldo + r] = hsum(fold(acc[r][c]));
  }
};

template <int R, int C>
struct IntSums512 {
  // Up to two pairs: two partial sums (even / odd groups), so a lone row's multiply-adds do
  // not wait on each other (exact integers: the split does not change the result).
  static constexpr int kSplit = R * C <= 2 ? 2 : 1;
  __m512i parts[kSplit][R][C];
  IntSums512() {
    for (auto& p : parts)
      for (auto& row : p)
        for (auto& v : row) v = _mm512_setzero_si512();
  }
  // parts += (w[r] * a) * scale[r] for the 64 activation bytes at `offset` of super-block i.
  void madd_group(const __m512i (&w)[R], const __m512i (&scale)[R], const uint8_t* a, size_t as, int64_t i,
                  int offset, int group) {
    auto& p = parts[group % kSplit];
    for (int c = 0; c < C; ++c) {
      const __m512i av = load512(act_block(a, as, c, i).qs + offset);
      for (int r = 0; r < R; ++r) p[r][c] = _mm512_dpwssd_epi32(p[r][c], _mm512_maddubs_epi16(w[r], av), scale[r]);
    }
  }
  __m512i part(int r, int c) const {
    if constexpr (kSplit == 2) return _mm512_add_epi32(parts[0][r][c], parts[1][r][c]);
    return parts[0][r][c];
  }
};

// 512-bit forms of the float steps (upper lanes of the zero-extended terms are 0, which
// leaves those lanes exactly as the 256-bit forms leave their high half).
inline void finish_k4(__m512& acc, __m512i isum, const K4Header& h, const K4Act& act) {
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(h.d * act.d), acc);
  acc = _mm512_fnmadd_ps(_mm512_zextps256_ps512(h.mins), _mm512_zextps256_ps512(act.sums), acc);
}
inline void finish_q6k(__m512& acc, __m512i isum, __m256i scales16, float d, const BlockQ8_K& ab) {
  const __m512i v = _mm512_sub_epi32(isum, _mm512_zextsi256_si512(q6k_offset(scales16, ab)));
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_set1_ps(d * ab.d), acc);
}
inline void finish_iq4xs(__m512& acc, __m512i isum, float d, const BlockQ8_K& ab) {
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(d * ab.d), acc);
}
#endif

// Tile shapes. Narrow (few activation rows, decode): one weight row at a time, because
// consecutive rows are contiguous and the weights then stream through memory in one
// sequential run, which the hardware prefetchers follow best. Wide (prefill): each decoded
// weight group serves several activation rows; int and float sums per pair must fit the
// register file. With AVX-512 the 512-bit kernels serve both; AVX2 builds use the 256-bit
// ones (same results, see the top of this file). Wide tiles of one weight row and eight
// activation rows beat two by four on a Zen 4 (512-token prompts, 0.8B shape, session 15:
// Q4_K +13%, Q5_K +10%, Q6_K +7%, IQ4_XS +3%; docs/performance.md).
struct KShape {
  static constexpr int kRows = kManyRegs ? 1 : 2, kCols = kManyRegs ? 8 : 2;
  static constexpr int kNarrowRows = 1, kNarrowCols = kManyRegs ? 4 : 2;
};

}  // namespace df::quant::ktile

#endif
