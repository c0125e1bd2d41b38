// Q4_K and Q5_K tile kernels (AVX2 / VNNI, 512-bit for wide tiles). In a super-block,
// bytes 32g..32g+31 of qs hold sub-block 2g in their low nibbles and 2g+1 in their high
// ones; Q5_K adds a fifth bit per value from qh (bit j of qh[l] for sub-block j).
#include "quant/vec_dot_kernels.h"

#include "quant/kquant_tile.h"

#if defined(DF_QUANT_AVX2)
#include "quant/tile_driver.h"

namespace df::quant {

namespace {

using namespace ktile;

// Values of sub-blocks 2g (low nibbles) and 2g+1 (high nibbles), 256-bit each.
struct Q4Values {
  using Block = BlockQ4_K;
  static __m256i low(const Block& b, int g) { return _mm256_and_si256(load(b.qs + 32 * g), _mm256_set1_epi8(15)); }
  static __m256i high(const Block& b, int g) {
    return _mm256_and_si256(_mm256_srli_epi16(load(b.qs + 32 * g), 4), _mm256_set1_epi8(15));
  }
};

struct Q5Values {
  using Block = BlockQ5_K;
  // 16 where bit j of the qh byte is set.
  static __m256i fifth(const Block& b, int j) {
    return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(load(b.qh), j), _mm256_set1_epi8(1)), 4);
  }
  static __m256i low(const Block& b, int g) {
    return _mm256_or_si256(_mm256_and_si256(load(b.qs + 32 * g), _mm256_set1_epi8(15)), fifth(b, 2 * g));
  }
  static __m256i high(const Block& b, int g) {
    return _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(load(b.qs + 32 * g), 4), _mm256_set1_epi8(15)),
                           fifth(b, 2 * g + 1));
  }
};

template <class V>
struct K4Ymm {
  using Block = typename V::Block;
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t ldo) {
    FloatSums<R, C> F;
    for (int64_t i = 0; i < n / kQKK; ++i) {
      const Block* blk[R];
      K4Header h[R];
      for (int r = 0; r < R; ++r) {
        blk[r] = reinterpret_cast<const Block*>(w + size_t(r) * ws) + i;
        h[r].load(*blk[r]);
      }
      IntSums<R, C> S;
      for (int g = 0; g < 4; ++g) {
        __m256i q[R], s[R];
        for (int r = 0; r < R; ++r) {
          q[r] = V::low(*blk[r], g);
          s[r] = select_scale(h[r].scales, 2 * g);
        }
        S.madd_group(q, s, a, as, i, 64 * g, 0);
        for (int r = 0; r < R; ++r) {
          q[r] = V::high(*blk[r], g);
          s[r] = select_scale(h[r].scales, 2 * g + 1);
        }
        S.madd_group(q, s, a, as, i, 64 * g + 32, 1);
      }
      for (int c = 0; c < C; ++c) {
        const K4Act act(act_block(a, as, c, i));
        for (int r = 0; r < R; ++r) finish_k4(F.lo[r][c], F.hi[r][c], S.part[0][r][c], S.part[1][r][c], h[r], act);
      }
    }
    F.store(out, ldo);
  }
};

#if defined(DF_QUANT_AVX512)
// Sub-blocks 2g and 2g+1 side by side in one 512-bit register, matching the activation's
// 64 consecutive bytes.
template <class V>
struct K4Zmm {
  using Block = typename V::Block;
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t ldo) {
    FloatSums512<R, C> F;
    for (int64_t i = 0; i < n / kQKK; ++i) {
      const Block* blk[R];
      K4Header h[R];
      for (int r = 0; r < R; ++r) {
        blk[r] = reinterpret_cast<const Block*>(w + size_t(r) * ws) + i;
        h[r].load(*blk[r]);
      }
      IntSums512<R, C> S;
      for (int g = 0; g < 4; ++g) {
        __m512i q[R], s[R];
        for (int r = 0; r < R; ++r) {
          q[r] = join(V::low(*blk[r], g), V::high(*blk[r], g));
          s[r] = pair_scales(h[r].scales, g);
        }
        S.madd_group(q, s, a, as, i, 64 * g, g);
      }
      for (int c = 0; c < C; ++c) {
        const K4Act act(act_block(a, as, c, i));
        for (int r = 0; r < R; ++r) finish_k4(F.acc[r][c], S.part(r, c), h[r], act);
      }
    }
    F.store(out, ldo);
  }
};
#endif

template <class V>
struct K4Kernel : KShape {
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t ldo) {
#if defined(DF_QUANT_AVX512)
    K4Zmm<V>::template tile<R, C>(n, w, ws, a, as, out, ldo);
#else
    K4Ymm<V>::template tile<R, C>(n, w, ws, a, as, out, ldo);
#endif
  }
};

}  // namespace

TileFn simd_tile_q4k_q5k(GgmlType wt) {
  switch (wt) {
    case GgmlType::Q4_K: return &TileDriver<K4Kernel<Q4Values>>::run;
    case GgmlType::Q5_K: return &TileDriver<K4Kernel<Q5Values>>::run;
    default: return nullptr;
  }
}

}  // namespace df::quant

#else

namespace df::quant {
TileFn simd_tile_q4k_q5k(GgmlType) { return nullptr; }
}  // namespace df::quant

#endif
