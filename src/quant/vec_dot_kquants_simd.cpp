// AVX2 / VNNI tile kernels for the 256-element formats against Q8_K activations: Q4_K, Q5_K,
// Q6_K and IQ4_XS. Within a super-block the sub-block scales are small integers, so
// products are summed exactly in int32 (maddubs, then a 16-bit multiply-add with the scale,
// fused by VNNI's vpdpwssd) and converted to float once per super-block and (row,
// activation) pair. Offsets that do not depend on the weight value (Q4_K/Q5_K mins, Q6_K's
// -32) are applied through the activation's precomputed 16-element sums (bsums).
#include "quant/vec_dot_kernels.h"

#include "quant/simd_x86.h"

#if defined(DF_QUANT_AVX2)
#include <cstring>

#include "quant/blocks.h"
#include "quant/tile_driver.h"

namespace df::quant {

namespace {

using namespace simd;

inline const BlockQ8_K& act_block(const uint8_t* a, size_t as, int c, int64_t i) {
  return reinterpret_cast<const BlockQ8_K*>(a + size_t(c) * as)[i];
}

// Integer accumulators of one super-block, then the float accumulators across super-blocks.
template <int R, int C>
struct Accumulators {
  __m256i isum[R][C];
  __m256 acc[R][C];
  void clear_int() {
    for (auto& row : isum)
      for (auto& v : row) v = _mm256_setzero_si256();
  }
  void clear() {
    clear_int();
    for (auto& row : acc)
      for (auto& v : row) v = _mm256_setzero_ps();
  }
  // isum[r][c] += sum over pairs of (w[r] * a) * scale[r], for one 32-byte group.
  void madd_group(const __m256i (&w)[R], const __m256i (&scale)[R], const uint8_t* a, size_t as, int64_t i,
                  int offset) {
    for (int c = 0; c < C; ++c) {
      const __m256i av = load(act_block(a, as, c, i).qs + offset);
      for (int r = 0; r < R; ++r) isum[r][c] = dpwssd(isum[r][c], _mm256_maddubs_epi16(w[r], av), scale[r]);
    }
  }
  void store(float* out, size_t ldo) const {
    for (int c = 0; c < C; ++c)
      for (int r = 0; r < R; ++r) out[size_t(c) * ldo + r] = hsum(acc[r][c]);
  }
};

// Q4_K / Q5_K 6-bit scales and mins: 8 of each from 12 bytes (see k4_scale_min), via three
// 32-bit words instead of 16 single extractions.
inline void unpack_k4_scales(const uint8_t* s12, uint8_t sc[8], uint8_t mn[8]) {
  uint32_t w[3];
  std::memcpy(w, s12, 12);
  const uint32_t sc03 = w[0] & 0x3f3f3f3fu, mn03 = w[1] & 0x3f3f3f3fu;
  const uint32_t sc47 = (w[2] & 0x0f0f0f0fu) | (((w[0] >> 6) & 0x03030303u) << 4);
  const uint32_t mn47 = ((w[2] >> 4) & 0x0f0f0f0fu) | (((w[1] >> 6) & 0x03030303u) << 4);
  std::memcpy(sc, &sc03, 4);
  std::memcpy(sc + 4, &sc47, 4);
  std::memcpy(mn, &mn03, 4);
  std::memcpy(mn + 4, &mn47, 4);
}

// Per-row super-block header of Q4_K / Q5_K: float scales, the 8 sub-block scales as 16-bit
// values (broadcast per sub-block) and the mins duplicated to match the 16 bsums.
struct K4Header {
  float d, dmin;
  int16_t sc[8];
  __m256i mins16;
  template <class Block>
  void load(const Block& b) {
    uint8_t s[8], m[8];
    unpack_k4_scales(b.scales, s, m);
    for (int j = 0; j < 8; ++j) sc[j] = s[j];
    d = f16(b.d);
    dmin = f16(b.dmin);
    uint64_t m64;
    std::memcpy(&m64, m, 8);
    const __m128i mv = _mm_cvtsi64_si128(int64_t(m64));
    mins16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mv, mv));
  }
};

// acc += (d * isum - dmin * sum_j m_j * bsum_j) * d_a for the K4 formats.
template <int R, int C>
inline void finish_k4(Accumulators<R, C>& A, const K4Header (&h)[R], const uint8_t* a, size_t as, int64_t i) {
  for (int c = 0; c < C; ++c) {
    const BlockQ8_K& ab = act_block(a, as, c, i);
    const __m256i bs = load(ab.bsums);
    const __m256 da = _mm256_set1_ps(ab.d);
    for (int r = 0; r < R; ++r) {
      const __m256 msum = _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, h[r].mins16));
      const __m256 v = _mm256_fnmadd_ps(msum, _mm256_set1_ps(h[r].dmin),
                                        _mm256_mul_ps(_mm256_cvtepi32_ps(A.isum[r][c]), _mm256_set1_ps(h[r].d)));
      A.acc[r][c] = _mm256_fmadd_ps(v, da, A.acc[r][c]);
    }
  }
}

// Tile shapes: super-block int sums plus float sums per pair must fit the register file.
struct KShape {
  static constexpr int kRows = 2, kCols = kManyRegs ? 4 : 2;
  static constexpr int kNarrowRows = 4, kNarrowCols = kManyRegs ? 2 : 1;
};

struct KernelQ4_K : KShape {
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t ldo) {
    const __m256i m4 = _mm256_set1_epi8(15);
    Accumulators<R, C> A;
    A.clear();
    for (int64_t i = 0; i < n / kQKK; ++i) {
      const BlockQ4_K* blk[R];
      K4Header h[R];
      for (int r = 0; r < R; ++r) {
        blk[r] = reinterpret_cast<const BlockQ4_K*>(w + size_t(r) * ws) + i;
        h[r].load(*blk[r]);
      }
      A.clear_int();
      for (int g = 0; g < 4; ++g) {  // sub-blocks 2g (low nibbles) and 2g+1 (high nibbles)
        __m256i q[R], s[R];
        for (int r = 0; r < R; ++r) {
          q[r] = _mm256_and_si256(load(blk[r]->qs + 32 * g), m4);
          s[r] = _mm256_set1_epi16(h[r].sc[2 * g]);
        }
        A.madd_group(q, s, a, as, i, 64 * g);
        for (int r = 0; r < R; ++r) {
          q[r] = _mm256_and_si256(_mm256_srli_epi16(load(blk[r]->qs + 32 * g), 4), m4);
          s[r] = _mm256_set1_epi16(h[r].sc[2 * g + 1]);
        }
        A.madd_group(q, s, a, as, i, 64 * g + 32);
      }
      finish_k4(A, h, a, as, i);
    }
    A.store(out, ldo);
  }
};

struct KernelQ5_K : KShape {
  // 16 where bit `bit` of the qh byte is set: the fifth bit of sub-block `bit`.
  static __m256i fifth_bit(__m256i qh, int bit) {
    return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, bit), _mm256_set1_epi8(1)), 4);
  }
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t ldo) {
    const __m256i m4 = _mm256_set1_epi8(15);
    Accumulators<R, C> A;
    A.clear();
    for (int64_t i = 0; i < n / kQKK; ++i) {
      const BlockQ5_K* blk[R];
      K4Header h[R];
      for (int r = 0; r < R; ++r) {
        blk[r] = reinterpret_cast<const BlockQ5_K*>(w + size_t(r) * ws) + i;
        h[r].load(*blk[r]);
      }
      A.clear_int();
      for (int g = 0; g < 4; ++g) {
        __m256i q[R], s[R];
        for (int r = 0; r < R; ++r) {
          q[r] = _mm256_or_si256(_mm256_and_si256(load(blk[r]->qs + 32 * g), m4), fifth_bit(load(blk[r]->qh), 2 * g));
          s[r] = _mm256_set1_epi16(h[r].sc[2 * g]);
        }
        A.madd_group(q, s, a, as, i, 64 * g);
        for (int r = 0; r < R; ++r) {
          q[r] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(load(blk[r]->qs + 32 * g), 4), m4),
                                 fifth_bit(load(blk[r]->qh), 2 * g + 1));
          s[r] = _mm256_set1_epi16(h[r].sc[2 * g + 1]);
        }
        A.madd_group(q, s, a, as, i, 64 * g + 32);
      }
      finish_k4(A, h, a, as, i);
    }
    A.store(out, ldo);
  }
};

// Q6_K: 32-element chunk k = 4h + s covers sub-blocks 2k and 2k+1 (16 each); the 6-bit
// values are unsigned 0..63 with the -32 applied through bsums.
struct KernelQ6_K : KShape {
  // pshufb controls giving bytes 0..7 = scale 2k and bytes 8..15 = scale 2k+1.
  alignas(16) static constexpr uint8_t kScaleCtrl[8][16] = {
      {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
      {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
      {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
      {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
      {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9},
      {10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
      {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13},
      {14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15}};
  // 16-bit scale vector of chunk k: lanes 0..7 = scale 2k, lanes 8..15 = scale 2k+1.
  static __m256i chunk_scales(const int8_t* scales, int k) {
    const __m128i ctrl = _mm_load_si128(reinterpret_cast<const __m128i*>(kScaleCtrl[k]));
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales));
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, ctrl));
  }
  // Values of chunk (h, S): 4 bits from ql (low or high nibble), bits 2S..2S+1 of qh.
  template <int S>
  static __m256i chunk_values(const BlockQ6_K& b, int h) {
    const __m256i ql = load(b.ql + 64 * h + 32 * (S & 1));
    const __m256i low = _mm256_and_si256(S < 2 ? ql : _mm256_srli_epi16(ql, 4), _mm256_set1_epi8(15));
    const __m256i qh = load(b.qh + 32 * h);
    const __m256i hi = S == 0   ? _mm256_slli_epi16(qh, 4)
                       : S == 1 ? _mm256_slli_epi16(qh, 2)
                       : S == 2 ? qh
                                : _mm256_srli_epi16(qh, 2);
    return _mm256_or_si256(low, _mm256_and_si256(hi, _mm256_set1_epi8(0x30)));
  }
  template <int S, int R, int C>
  static void chunk(Accumulators<R, C>& A, const BlockQ6_K* const (&blk)[R], int h, const uint8_t* a, size_t as,
                    int64_t i) {
    __m256i q[R], s[R];
    for (int r = 0; r < R; ++r) {
      q[r] = chunk_values<S>(*blk[r], h);
      s[r] = chunk_scales(blk[r]->scales, 4 * h + S);
    }
    A.madd_group(q, s, a, as, i, 128 * h + 32 * S);
  }
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t ldo) {
    Accumulators<R, C> A;
    A.clear();
    for (int64_t i = 0; i < n / kQKK; ++i) {
      const BlockQ6_K* blk[R];
      for (int r = 0; r < R; ++r) blk[r] = reinterpret_cast<const BlockQ6_K*>(w + size_t(r) * ws) + i;
      A.clear_int();
      for (int h = 0; h < 2; ++h) {
        chunk<0>(A, blk, h, a, as, i);
        chunk<1>(A, blk, h, a, as, i);
        chunk<2>(A, blk, h, a, as, i);
        chunk<3>(A, blk, h, a, as, i);
      }
      for (int c = 0; c < C; ++c) {
        const BlockQ8_K& ab = act_block(a, as, c, i);
        const __m256i bs = load(ab.bsums);
        for (int r = 0; r < R; ++r) {
          const __m256i sc16 =
              _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[r]->scales)));
          const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5);  // 32 * sum sc*bsum
          const __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(A.isum[r][c], offset));
          A.acc[r][c] = _mm256_fmadd_ps(v, _mm256_set1_ps(f16(blk[r]->d) * ab.d), A.acc[r][c]);
        }
      }
    }
    A.store(out, ldo);
  }
};

// IQ4_XS: signed code-book values, so the sign trick (|w| * sign(a, w)) keeps maddubs exact.
struct KernelIQ4_XS {
  static constexpr int kRows = 2, kCols = kManyRegs ? 4 : 2;
  static constexpr int kNarrowRows = 4, kNarrowCols = 1;
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t ldo) {
    alignas(16) int8_t book[16];
    for (int j = 0; j < 16; ++j) book[j] = kIQ4Values[j];
    const __m256i table = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(book)));
    Accumulators<R, C> A;
    A.clear();
    for (int64_t i = 0; i < n / kQKK; ++i) {
      const BlockIQ4_XS* blk[R];
      int16_t ls[R][8];
      for (int r = 0; r < R; ++r) {
        blk[r] = reinterpret_cast<const BlockIQ4_XS*>(w + size_t(r) * ws) + i;
        for (int ib = 0; ib < 8; ++ib)
          ls[r][ib] = int16_t((((blk[r]->scales_l[ib / 2] >> (4 * (ib % 2))) & 15) |
                               (((blk[r]->scales_h >> (2 * ib)) & 3) << 4)) - 32);
      }
      A.clear_int();
      for (int ib = 0; ib < 8; ++ib) {
        __m256i v[R], mag[R], s[R];
        for (int r = 0; r < R; ++r) {
          v[r] = _mm256_shuffle_epi8(table, nibbles_split(blk[r]->qs + 16 * ib));
          mag[r] = _mm256_sign_epi8(v[r], v[r]);
          s[r] = _mm256_set1_epi16(ls[r][ib]);
        }
        for (int c = 0; c < C; ++c) {
          const __m256i av = load(act_block(a, as, c, i).qs + 32 * ib);
          for (int r = 0; r < R; ++r)
            A.isum[r][c] = dpwssd(A.isum[r][c], _mm256_maddubs_epi16(mag[r], _mm256_sign_epi8(av, v[r])), s[r]);
        }
      }
      for (int c = 0; c < C; ++c) {
        const float da = act_block(a, as, c, i).d;
        for (int r = 0; r < R; ++r)
          A.acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(A.isum[r][c]), _mm256_set1_ps(f16(blk[r]->d) * da), A.acc[r][c]);
      }
    }
    A.store(out, ldo);
  }
};

}  // namespace

TileFn simd_tile_kquant(GgmlType wt) {
  switch (wt) {
    case GgmlType::Q4_K: return &TileDriver<KernelQ4_K>::run;
    case GgmlType::Q5_K: return &TileDriver<KernelQ5_K>::run;
    case GgmlType::Q6_K: return &TileDriver<KernelQ6_K>::run;
    case GgmlType::IQ4_XS: return &TileDriver<KernelIQ4_XS>::run;
    default: return nullptr;
  }
}

}  // namespace df::quant

#else

namespace df::quant {
TileFn simd_tile_kquant(GgmlType) { return nullptr; }
}  // namespace df::quant

#endif
