// How deq_wgmma_iq4xs.cu and deq_wgmma_q5k.cu build their register A fragments from IQ4_XS and
// Q5_K tiles, checked on a CPU against GGUF rows (ggml's bit layouts read here, and the
// library's dequantize_row), the tile converters (iq4xs_to_tiles, q5k_to_tiles) and the PTX
// ISA's rule for wgmma's A fragments in a k16 step (lane 4g + c, register r, half p: row
// g + 8 (r % 2), k = 2c + 8 (r / 2) + p). The byte work is the kernels' own
// (backend/cuda/wgmma_tile_values.h, PRMT emulated); the word and scale selection is the
// kernels' written out. Every fragment must hold the element that the activations' order
// (wgmma_layout.h fragment_k_position, HalfOrder::kQ4k, Q4_K's) puts at its k, with that
// element's value and its sub-block's scale.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/iq4xs_operands.cuh"
#include "backend/cuda/wgmma_layout.h"
#include "backend/cuda/wgmma_tile_values.h"
#include "quant/blocks.h"
#include "quant/dequant.h"
#include "quant/iq4xs_tiles.h"
#include "quant/q4k_tiles.h"
#include "quant/q5k_tiles.h"
#include "quant/types.h"
#include "util/half.h"

// Q5_K's check computes ggml's float expression as the library's dequantizer does (no fusing).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace df {
namespace {

constexpr int kRows = 16, kNsb = 3;

uint32_t word_at(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// The natural element (< 64) of a slice at the activations' position k (< 64).
uint32_t element_at(uint32_t k) {
  for (uint32_t e = 0; e < 64; ++e)
    if (cuda::wgmma::fragment_k_position(e) == k) return e;
  ADD_FAILURE() << "no element at position " << k;
  return 0;
}

// Random GGUF rows (every byte random, then d (and dmin) set to finite f16 values).
std::vector<uint8_t> random_rows(size_t row_bytes, size_t sb_bytes, const std::vector<int>& d_at, uint64_t seed) {
  std::mt19937 rng{uint32_t(seed)};
  std::vector<uint8_t> src(kRows * row_bytes);
  for (auto& v : src) v = uint8_t(rng());
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  for (int r = 0; r < kRows; ++r)
    for (int sb = 0; sb < kNsb; ++sb)
      for (int at : d_at) {
        const uint16_t d = f32_to_f16(normal(rng));
        std::memcpy(src.data() + size_t(r) * row_bytes + size_t(sb) * sb_bytes + size_t(at), &d, 2);
      }
  return src;
}

// The f16 steps after PRMT: 0x64 over a byte b is 1024 + b, 0x58 over 8 v is 128 + v.
TEST(WgmmaIq4xsQ5kLayout, BytesBecomeExactHalves) {
  for (int i = 0; i < 16; ++i) {
    const int b = quant::kIQ4Values[i] + 128;
    ASSERT_TRUE(b > 0 && b < 256);
    EXPECT_EQ(double(f16_to_f32(uint16_t(0x6400 | b))) - 1152.0, double(quant::kIQ4Values[i]));
  }
  for (int v = 0; v < 32; ++v) {
    EXPECT_EQ(double(f16_to_f32(uint16_t(0x6400 | v))) - double(f16_to_f32(cuda::wgmma::q5k_step_offset_bits(0))), v);
    EXPECT_EQ(double(f16_to_f32(uint16_t(cuda::wgmma::q5k_step_high_byte(2) << 8 | (8 * v)))) -
                  double(f16_to_f32(cuda::wgmma::q5k_step_offset_bits(2))),
              v);
  }
}

// IQ4_XS: each (super-block, pair, lane, step, register, half) of deq_wgmma_iq4xs.cu's
// fragments holds, after the code-book bytes (- 128), the code-book value of the GGUF element
// of row g + 8 (r % 2) at the position's element, and that value times the kernel's scale of
// the fragment (lane 4g + rr + 2 (s / 2)'s d (ls - 32), shuffled) is the dequantized element
// exactly (11 x 6 x 7 bits fit a float).
TEST(WgmmaIq4xsQ5kLayout, Iq4xsFragmentsHoldTheirElements) {
  constexpr size_t kSbBytes = 136;
  const size_t row_bytes = kSbBytes * kNsb;
  const std::vector<uint8_t> src = random_rows(row_bytes, kSbBytes, {0}, 71);
  std::vector<float> W(size_t(kRows) * 256 * kNsb);
  for (int r = 0; r < kRows; ++r)
    dequantize_row(GgmlType::IQ4_XS, src.data() + size_t(r) * row_bytes, W.data() + size_t(r) * 256 * kNsb, 256 * kNsb);
  std::vector<uint8_t> tiles(iq4xs_tiles_bytes(kRows, kNsb));
  iq4xs_to_tiles(src.data(), kRows, kNsb, tiles.data());
  int checked = 0;
  for (int sb = 0; sb < kNsb; ++sb) {
    const uint8_t* tile_sb = tiles.data() + size_t(sb) * kIq4xsTileBytes;
    for (int pair = 0; pair < 4; ++pair)
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, c = lane % 4;
        const uint8_t* qp = tile_sb + kIq4xsTileQuantStride * pair + 16 * lane;
        for (int s = 0; s < 4; ++s)
          for (int rr = 0; rr < 2; ++rr) {
            uint32_t b[2];
            cuda::wgmma::iq4xs_biased_values(word_at(qp + 4 * (2 * (s / 2) + rr)), b);
            // The scale: formed by lane 4g + cs of row g + 8 (cs % 2), sub-block 2 pair + cs / 2.
            const int cs = rr + 2 * (s / 2);
            const uint8_t* hp = tile_sb + kIq4xsTileHeaders + 16 * g + 8 * (cs % 2);
            const uint32_t x = word_at(hp), y = word_at(hp + 4);
            const float d = f16_to_f32(uint16_t(iq4xs::d_bits(x, y) & 0xFFFF));
            const int ls = iq4xs::scale_at(pair < 2 ? x : y, iq4xs::scale_shift(2 * pair + cs / 2));
            for (int reg = rr; reg < 4; reg += 2)
              for (int p = 0; p < 2; ++p) {
                const int v = int((b[s % 2] >> (8 * (2 * (reg / 2) + p))) & 0xFF) - 128;
                const uint32_t k = uint32_t(16 * s + 2 * c + 8 * (reg / 2) + p);
                const uint32_t e = 64 * uint32_t(pair) + element_at(k);
                const int row = g + 8 * (reg % 2);
                const uint8_t* blk = src.data() + size_t(row) * row_bytes + size_t(sb) * kSbBytes;
                const int ib = int(e / 32), kk = int(e % 32);
                const uint8_t qb = blk[8 + 16 * ib + kk % 16];
                const int nibble = kk < 16 ? qb & 15 : qb >> 4;
                ASSERT_EQ(v, quant::kIQ4Values[nibble])
                    << "sb " << sb << " pair " << pair << " lane " << lane << " step " << s << " register " << reg
                    << " half " << p << ": element " << e;
                ASSERT_EQ(d * float(ls) * float(v), W[size_t(row) * 256 * kNsb + size_t(sb) * 256 + e])
                    << "sb " << sb << " pair " << pair << " lane " << lane << " step " << s << " register " << reg;
                ++checked;
              }
          }
      }
  }
  EXPECT_EQ(checked, kNsb * 4 * 32 * 4 * 4 * 2);
}

// Q5_K: the same for deq_wgmma_q5k.cu: each fragment's 5-bit value (the step's bytes through
// the f16 steps above) is the GGUF element's, and with the scale and min of the fragment (lane
// 4g + rr + 2 (s / 2)'s sub-block 2 pair + s / 2 of row g + 8 (r % 2)) the library's
// dequantized element (d sc v - dmin m in fp32, ggml's order of operations).
TEST(WgmmaIq4xsQ5kLayout, Q5kFragmentsHoldTheirElements) {
  constexpr size_t kSbBytes = 176;
  const size_t row_bytes = kSbBytes * kNsb;
  const std::vector<uint8_t> src = random_rows(row_bytes, kSbBytes, {0, 2}, 72);
  std::vector<float> W(size_t(kRows) * 256 * kNsb);
  for (int r = 0; r < kRows; ++r)
    dequantize_row(GgmlType::Q5_K, src.data() + size_t(r) * row_bytes, W.data() + size_t(r) * 256 * kNsb, 256 * kNsb);
  std::vector<uint8_t> tiles(q5k_tiles_bytes(kRows, kNsb));
  q5k_to_tiles(src.data(), kRows, kNsb, tiles.data());
  int checked = 0;
  for (int sb = 0; sb < kNsb; ++sb) {
    const uint8_t* tile_sb = tiles.data() + size_t(sb) * kQ5kTileBytes;
    for (int pair = 0; pair < 4; ++pair)
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, c = lane % 4;
        const uint8_t* qp = tile_sb + kQ4kTileQuantStride * pair + 16 * lane;
        const uint32_t f = word_at(tile_sb + kQ5kTileHighBits + 128 * pair + 4 * lane);
        for (int s = 0; s < 4; ++s)
          for (int rr = 0; rr < 2; ++rr) {
            const int w = 2 * rr + s % 2;
            const uint32_t bytes = cuda::wgmma::q5k_step_bytes(word_at(qp + 4 * w), f, s, w);
            const int cs = rr + 2 * (s / 2);  // the lane that forms the scale and min
            const uint8_t* hdr = tile_sb + kQ4kTileHeaders + 16 * (g + 8 * (cs % 2));
            uint16_t dh, mh;
            std::memcpy(&dh, hdr, 2);
            std::memcpy(&mh, hdr + 2, 2);
            uint8_t sc, mn;
            quant::k4_scale_min(hdr + 4, 2 * pair + cs / 2, sc, mn);
            for (int reg = rr; reg < 4; reg += 2)
              for (int p = 0; p < 2; ++p) {
                const uint32_t byte = (bytes >> (8 * (2 * (reg / 2) + p))) & 0xFF;
                const float half_value = f16_to_f32(uint16_t(cuda::wgmma::q5k_step_high_byte(s) << 8 | byte)) -
                                         f16_to_f32(cuda::wgmma::q5k_step_offset_bits(s));
                const int v = int(half_value);
                ASSERT_EQ(float(v), half_value) << "not an integer: " << half_value;
                const uint32_t k = uint32_t(16 * s + 2 * c + 8 * (reg / 2) + p);
                const uint32_t e = 64 * uint32_t(pair) + element_at(k);
                const int row = g + 8 * (reg % 2);
                const uint8_t* blk = src.data() + size_t(row) * row_bytes + size_t(sb) * kSbBytes;
                // ggml's Q5_K: qh[32] at byte 16, qs[128] at 48; element e of pair e / 64.
                const int l = int(e % 32), hi = int(e / 32) % 2, pr = int(e / 64);
                const int want = ((blk[48 + 32 * pr + l] >> (4 * hi)) & 15) | ((blk[16 + l] >> (2 * pr + hi)) & 1) << 4;
                ASSERT_EQ(v, want) << "sb " << sb << " pair " << pair << " lane " << lane << " step " << s
                                   << " register " << reg << " half " << p << ": element " << e;
                const float d1 = f16_to_f32(dh) * float(sc), m1 = f16_to_f32(mh) * float(mn);
                const float wv = d1 * float(v) - m1;
                ASSERT_EQ(wv, W[size_t(row) * 256 * kNsb + size_t(sb) * 256 + e])
                    << "sb " << sb << " pair " << pair << " lane " << lane << " step " << s << " register " << reg;
                ++checked;
              }
          }
      }
  }
  EXPECT_EQ(checked, kNsb * 4 * 32 * 4 * 4 * 2);
}

}  // namespace
}  // namespace df
