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
  // The code book, signed and shifted by +128 (unsigned), for pshufb lookups.
  alignas(16) static constexpr int8_t kBook[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                   1,    13,   25,  38,  53,  69,  89,  113};
  alignas(16) static constexpr uint8_t kBookU[16] = {1,   24,  45,  63,  79,  93,  106, 118,
                                                     129, 141, 153, 166, 181, 197, 217, 241};
  static __m256i table(const void* t) { return _mm256_broadcastsi128_si256(_mm_load_si128(static_cast<const __m128i*>(t))); }
  static __m256i values(const Block& b) { return _mm256_shuffle_epi8(table(kBook), nibbles_split(b.qs)); }
  static __m256i unsigned_values(const Block& b) { return _mm256_shuffle_epi8(table(kBookU), nibbles_split(b.qs)); }
};
constexpr bool iq4_tables_match() {
  for (int i = 0; i < 16; ++i)
    if (DecodeIQ4_NL::kBook[i] != kIQ4Values[i] || DecodeIQ4_NL::kBookU[i] != kIQ4Values[i] + 128) return false;
  return true;
}
static_assert(iq4_tables_match());

// Float accumulation, the same for every tile shape and vector width: per (row, activation)
// pair two 8-lane sums, one over the even blocks and one over the odd blocks,
//   part += float(int dot lanes) * (d_w * d_a)     (one FMA per block)
// and at the end hsum(even + odd). Two chains halve the FMA latency a single row waits on;
// the 512-bit kernel holds [even | odd] in one register.
template <class D>
struct Legacy32Ymm {
  using Block = typename D::Block;

  // parts[r][c] = fma(dot(block b of row r, block b of activation c), d_w * d_a, parts[r][c]).
  template <int R, int C>
  static void block(int64_t b, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, __m256 (&part)[R][C]) {
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
      const __m256i start = _mm256_sub_epi32(_mm256_setzero_si256(),
                                             dpbusd(_mm256_setzero_si256(), _mm256_set1_epi8(char(D::kOffset)), aq));
#endif
      for (int r = 0; r < R; ++r) {
#if defined(DF_QUANT_VNNI)
        const __m256i dot = dpbusd(start, wq[r], aq);
#else
        const __m256i dot = dpbusd(_mm256_setzero_si256(), wq[r], _mm256_sign_epi8(aq, wsign[r]));
#endif
        part[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(wd[r], ad), part[r][c]);
      }
    }
  }

  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t ldo) {
    const int64_t nb = n / kQK;
    __m256 even[R][C], odd[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) even[r][c] = odd[r][c] = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      block<R, C>(b, w, ws, a, as, even);
      block<R, C>(b + 1, w, ws, a, as, odd);
    }
    if (b < nb) block<R, C>(b, w, ws, a, as, even);
    for (int c = 0; c < C; ++c)
      for (int r = 0; r < R; ++r) out[size_t(c) * ldo + r] = hsum(_mm256_add_ps(even[r][c], odd[r][c]));
  }
};

#if defined(DF_QUANT_AVX512)
// Two consecutive blocks per 512-bit register: lanes 0..7 block b (even), 8..15 block b+1.
template <class D>
struct Legacy32Zmm {
  using Block = typename D::Block;

  static __m512 pair_scale(uint16_t d0, uint16_t d1) { return join(_mm256_set1_ps(f16(d0)), _mm256_set1_ps(f16(d1))); }

  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t ldo) {
    const int64_t nb = n / kQK;
    __m512 acc[R][C];
    for (auto& row : acc)
      for (auto& v : row) v = _mm512_setzero_ps();
    const __m512i offset = _mm512_set1_epi8(char(D::kOffset));
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      __m512i wq[R];
      __m512 wd[R];
      for (int r = 0; r < R; ++r) {
        const Block* blk = reinterpret_cast<const Block*>(w + size_t(r) * ws) + b;
        wq[r] = join(D::unsigned_values(blk[0]), D::unsigned_values(blk[1]));
        wd[r] = pair_scale(blk[0].d, blk[1].d);
      }
      for (int c = 0; c < C; ++c) {
        const BlockQ8_0* ab = reinterpret_cast<const BlockQ8_0*>(a + size_t(c) * as) + b;
        const __m512i aq = join(load(ab[0].qs), load(ab[1].qs));
        const __m512 ad = pair_scale(ab[0].d, ab[1].d);
        const __m512i start =
            _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, aq));
        for (int r = 0; r < R; ++r) {
          const __m512i dot = _mm512_dpbusd_epi32(start, wq[r], aq);
          acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(wd[r], ad), acc[r][c]);
        }
      }
    }
    __m256 even[R][C], odd[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) {
        even[r][c] = _mm512_castps512_ps256(acc[r][c]);
        odd[r][c] = _mm512_extractf32x8_ps(acc[r][c], 1);
      }
    if (b < nb) Legacy32Ymm<D>::template block<R, C>(b, w, ws, a, as, even);
    for (int c = 0; c < C; ++c)
      for (int r = 0; r < R; ++r) out[size_t(c) * ldo + r] = hsum(_mm256_add_ps(even[r][c], odd[r][c]));
  }
};
#endif

// Tile shapes. Narrow (few activation rows, decode): one weight row at a time, because
// consecutive rows are contiguous and the weights then stream through memory in one
// sequential run, which the hardware prefetchers follow best. Wide (prefill): each decoded
// weight block serves several activation rows. The 512-bit kernel serves both when the build
// has AVX-512 (its results equal the 256-bit kernel's, which AVX2 builds use).
template <class D>
struct Legacy32 {
#if defined(DF_QUANT_AVX512)
  static constexpr int kRows = 4, kCols = 4;
#else
  static constexpr int kRows = 2, kCols = kManyRegs ? 4 : 2;
#endif
  static constexpr int kNarrowRows = 1, kNarrowCols = 4;
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t ldo) {
#if defined(DF_QUANT_AVX512)
    Legacy32Zmm<D>::template tile<R, C>(n, w, ws, a, as, out, ldo);
#else
    Legacy32Ymm<D>::template tile<R, C>(n, w, ws, a, as, out, ldo);
#endif
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
