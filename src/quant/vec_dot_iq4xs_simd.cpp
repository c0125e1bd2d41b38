// IQ4_XS tile kernels (AVX2 / VNNI, 512-bit for wide tiles). Code-book values are signed, so
// maddubs (unsigned x signed) gets |w| and the activation with w's sign applied, which keeps
// every pair of products below 2^15.
#include "quant/vec_dot_kernels.h"

#include "quant/kquant_tile.h"

#if defined(DF_QUANT_AVX2)
#include "quant/tile_driver.h"

namespace df::quant {

namespace {

using namespace ktile;

// The 8 signed 6-bit sub-block scales as 16-bit values in both 128-bit halves: low 4 bits
// from scales_l (sub-block ib in nibble ib of the 32-bit word), high 2 from scales_h.
inline __m256i sub_block_scales(const BlockIQ4_XS& b) {
  uint32_t lo;
  std::memcpy(&lo, b.scales_l, 4);
  uint64_t bytes = 0;
  for (int ib = 0; ib < 8; ++ib)
    bytes |= uint64_t(((lo >> (4 * ib)) & 15) | (((b.scales_h >> (2 * ib)) & 3) << 4)) << (8 * ib);
  const __m128i v = _mm_sub_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(bytes))), _mm_set1_epi16(32));
  return _mm256_broadcastsi128_si256(v);
}

inline __m256i code_book() {
  alignas(16) int8_t book[16];
  for (int j = 0; j < 16; ++j) book[j] = kIQ4Values[j];
  return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(book)));
}

struct IQ4XSYmm {
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t ldo) {
    const __m256i book = code_book();
    FloatSums<R, C> F;
    for (int64_t i = 0; i < n / kQKK; ++i) {
      const BlockIQ4_XS* blk[R];
      __m256i sc[R];
      for (int r = 0; r < R; ++r) {
        blk[r] = reinterpret_cast<const BlockIQ4_XS*>(w + size_t(r) * ws) + i;
        sc[r] = sub_block_scales(*blk[r]);
      }
      IntSums<R, C> S;
      for (int ib = 0; ib < 8; ++ib) {
        __m256i v[R], mag[R], s[R];
        for (int r = 0; r < R; ++r) {
          v[r] = _mm256_shuffle_epi8(book, nibbles_split(blk[r]->qs + 16 * ib));
          mag[r] = _mm256_sign_epi8(v[r], v[r]);
          s[r] = select_scale(sc[r], ib);
        }
        auto& part = S.part[ib % 2];
        for (int c = 0; c < C; ++c) {
          const __m256i av = load(act_block(a, as, c, i).qs + 32 * ib);
          for (int r = 0; r < R; ++r)
            part[r][c] = dpwssd(part[r][c], _mm256_maddubs_epi16(mag[r], _mm256_sign_epi8(av, v[r])), s[r]);
        }
      }
      for (int c = 0; c < C; ++c)
        for (int r = 0; r < R; ++r)
          finish_iq4xs(F.lo[r][c], F.hi[r][c], S.part[0][r][c], S.part[1][r][c], f16(blk[r]->d), act_block(a, as, c, i));
    }
    F.store(out, ldo);
  }
};

#if defined(DF_QUANT_AVX512)
// Sub-blocks 2p and 2p+1 in one 512-bit register. AVX-512 has no vpsignb: the activation is
// negated under a mask of w's sign bits instead (code values are never 0).
struct IQ4XSZmm {
  // 128-bit lanes of [low nibbles(32 bytes) | high nibbles(32 bytes)] are (2p lo, 2p+1 lo,
  // 2p hi, 2p+1 hi); reorder to (2p lo, 2p hi, 2p+1 lo, 2p+1 hi) = the values in order.
  static __m512i pair_indices(const BlockIQ4_XS& b, int p) {
    const __m256i q = load(b.qs + 32 * p);
    const __m512i both = join(q, _mm256_srli_epi16(q, 4));
    return _mm512_and_si512(_mm512_shuffle_i64x2(both, both, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(15));
  }
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t ldo) {
    const __m512i book = _mm512_broadcast_i32x4(_mm256_castsi256_si128(code_book()));
    FloatSums512<R, C> F;
    for (int64_t i = 0; i < n / kQKK; ++i) {
      const BlockIQ4_XS* blk[R];
      __m256i sc[R];
      for (int r = 0; r < R; ++r) {
        blk[r] = reinterpret_cast<const BlockIQ4_XS*>(w + size_t(r) * ws) + i;
        sc[r] = sub_block_scales(*blk[r]);
      }
      IntSums512<R, C> S;
      for (int p = 0; p < 4; ++p) {
        __m512i mag[R], s[R];
        __mmask64 neg[R];
        for (int r = 0; r < R; ++r) {
          const __m512i v = _mm512_shuffle_epi8(book, pair_indices(*blk[r], p));
          mag[r] = _mm512_abs_epi8(v);
          neg[r] = _mm512_movepi8_mask(v);
          s[r] = pair_scales(sc[r], p);
        }
        auto& part = S.parts[p % S.kSplit];
        for (int c = 0; c < C; ++c) {
          const __m512i av = load512(act_block(a, as, c, i).qs + 64 * p);
          for (int r = 0; r < R; ++r) {
            const __m512i signed_a = _mm512_mask_sub_epi8(av, neg[r], _mm512_setzero_si512(), av);
            part[r][c] = _mm512_dpwssd_epi32(part[r][c], _mm512_maddubs_epi16(mag[r], signed_a), s[r]);
          }
        }
      }
      for (int c = 0; c < C; ++c)
        for (int r = 0; r < R; ++r) finish_iq4xs(F.acc[r][c], S.part(r, c), f16(blk[r]->d), act_block(a, as, c, i));
    }
    F.store(out, ldo);
  }
};
#endif

struct IQ4XSKernel : KShape {
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t ldo) {
#if defined(DF_QUANT_AVX512)
    IQ4XSZmm::tile<R, C>(n, w, ws, a, as, out, ldo);
#else
    IQ4XSYmm::tile<R, C>(n, w, ws, a, as, out, ldo);
#endif
  }
};

}  // namespace

TileFn simd_tile_iq4xs(GgmlType wt) { return wt == GgmlType::IQ4_XS ? &TileDriver<IQ4XSKernel>::run : nullptr; }

}  // namespace df::quant

#else

namespace df::quant {
TileFn simd_tile_iq4xs(GgmlType) { return nullptr; }
}  // namespace df::quant

#endif
