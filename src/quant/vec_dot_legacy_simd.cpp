// AVX2 / VNNI tile kernels for the 32-element formats multiplied against Q8_0 activations:
// Q8_0, Q4_0, Q5_0 and IQ4_NL. Each block has its own float scale, so per block and (row,
// activation) pair the integer dot is converted and accumulated once in float.
//
// Integer dot: with VNNI the weights are made unsigned (value + offset) for vpdpbusd and the
// offset's contribution, offset * sum(a), is subtracted through the accumulator's start value,
// computed once per activation block for all rows of the tile. Without VNNI the classic
// sign trick (|w| * sign(a, w) through maddubs) keeps everything signed.
#include "quant/vec_dot_kernels.h"

#include "quant/simd_x86.h"

#if defined(DF_QUANT_AVX2)
#include <cstring>

#include "quant/blocks.h"
#include "quant/tile_driver.h"

namespace df::quant {

namespace {

using namespace simd;

struct DecodeQ8_0 {
  using Block = BlockQ8_0;
  static constexpr int kOffset = 128;
  static __m256i values(const Block& b) { return load(b.qs); }
  static __m256i unsigned_values(const Block& b) { return _mm256_xor_si256(load(b.qs), _mm256_set1_epi8(char(0x80))); }
};

struct DecodeQ4_0 {
  using Block = BlockQ4_0;
  static constexpr int kOffset = 8;
  static __m256i unsigned_values(const Block& b) { return nibbles_split(b.qs); }
  static __m256i values(const Block& b) { return _mm256_sub_epi8(nibbles_split(b.qs), _mm256_set1_epi8(8)); }
};

struct DecodeQ5_0 {
  using Block = BlockQ5_0;
  static constexpr int kOffset = 16;
  // Byte j gets 0x10 when bit j of qh is set: broadcast qh, give byte j a copy of qh byte
  // j/8, then test bit j%8.
  static __m256i fifth_bits(const uint8_t* qh_bytes) {
    uint32_t qh;
    std::memcpy(&qh, qh_bytes, 4);
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201);
    const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(int(qh)), spread), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(0x10));
  }
  static __m256i unsigned_values(const Block& b) { return _mm256_or_si256(nibbles_split(b.qs), fifth_bits(b.qh)); }
  static __m256i values(const Block& b) { return _mm256_sub_epi8(unsigned_values(b), _mm256_set1_epi8(16)); }
};

struct DecodeIQ4_NL {
  using Block = BlockIQ4_NL;
  static constexpr int kOffset = 128;
  static __m256i table(int add) {
    alignas(16) int8_t t[16];
    for (int i = 0; i < 16; ++i) t[i] = int8_t(kIQ4Values[i] + add);
    return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
  }
  static __m256i values(const Block& b) { return _mm256_shuffle_epi8(table(0), nibbles_split(b.qs)); }
  static __m256i unsigned_values(const Block& b) { return _mm256_shuffle_epi8(table(128), nibbles_split(b.qs)); }
};

template <class D>
struct Legacy32 {
  using Block = typename D::Block;
  static constexpr int kRows = 4, kCols = kManyRegs ? 4 : 2;
  static constexpr int kNarrowRows = 4, kNarrowCols = 1;

  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t ldo) {
    const int64_t nb = n / kQK;
    __m256 acc[R][C];
    for (auto& row : acc)
      for (auto& v : row) v = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      __m256i wq[R];
#if !defined(DF_QUANT_VNNI)
      __m256i wsign[R];
#endif
      __m256 wd[R];
      for (int r = 0; r < R; ++r) {
        const Block& blk = reinterpret_cast<const Block*>(w + size_t(r) * ws)[b];
#if defined(DF_QUANT_VNNI)
        wq[r] = D::unsigned_values(blk);
#else
        wsign[r] = D::values(blk);
        wq[r] = _mm256_sign_epi8(wsign[r], wsign[r]);  // |w|
#endif
        wd[r] = _mm256_set1_ps(f16(blk.d));
      }
      for (int c = 0; c < C; ++c) {
        const BlockQ8_0& ab = reinterpret_cast<const BlockQ8_0*>(a + size_t(c) * as)[b];
        const __m256i aq = load(ab.qs);
        const __m256 ad = _mm256_set1_ps(f16(ab.d));
#if defined(DF_QUANT_VNNI)
        const __m256i offset_sum = dpbusd(_mm256_setzero_si256(), _mm256_set1_epi8(char(D::kOffset)), aq);
        const __m256i start = _mm256_sub_epi32(_mm256_setzero_si256(), offset_sum);
#endif
        for (int r = 0; r < R; ++r) {
#if defined(DF_QUANT_VNNI)
          const __m256i dot = dpbusd(start, wq[r], aq);
#else
          const __m256i dot = dpbusd(_mm256_setzero_si256(), wq[r], _mm256_sign_epi8(aq, wsign[r]));
#endif
          acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(wd[r], ad), acc[r][c]);
        }
      }
    }
    for (int c = 0; c < C; ++c)
      for (int r = 0; r < R; ++r) out[size_t(c) * ldo + r] = hsum(acc[r][c]);
  }
};

}  // namespace

TileFn simd_tile_legacy(GgmlType wt) {
  switch (wt) {
    case GgmlType::Q8_0: return &TileDriver<Legacy32<DecodeQ8_0>>::run;
    case GgmlType::Q4_0: return &TileDriver<Legacy32<DecodeQ4_0>>::run;
    case GgmlType::Q5_0: return &TileDriver<Legacy32<DecodeQ5_0>>::run;
    case GgmlType::IQ4_NL: return &TileDriver<Legacy32<DecodeIQ4_NL>>::run;
    default: return nullptr;
  }
}

}  // namespace df::quant

#else

namespace df::quant {
TileFn simd_tile_legacy(GgmlType) { return nullptr; }
}  // namespace df::quant

#endif
