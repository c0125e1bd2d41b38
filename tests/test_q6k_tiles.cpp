// The Q6_K tile layout (quant/q6k_tiles.h) against its definition read the other way round:
// every byte of every GGUF row is found where the layout's rule puts it (computed here from the
// row's side: ql / qh byte, scale, d), and nothing else is written; the words a lane reads are
// those the GGUF-row kernel (imma_q6k.cu) builds from its aligned loads and realigning PRMT in
// odd super-blocks, and group j's scale is where that kernel takes it (slot j + rot); padding
// rows of the last tile repeat the last row.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "quant/q6k_tiles.h"

namespace df {
namespace {

constexpr int kSb = 210;

// The quant word k (< 6) of a lane that holds its span s (< 12), and the span's pair p in it
// (words 2p, 2p + 1: rows g, g + 8): ql spans 4 hh + t + 2p in word 3 hh + t, qh spans
// 8 + 2 hh + p in word 3 hh + 2.
std::pair<int, int> quant_word_of_span(int s) {
  if (s >= 8) return {3 * ((s - 8) / 2) + 2, (s - 8) % 2};
  return {3 * (s / 4) + s % 2, (s % 4) / 2};
}

// Where byte b (< 210) of super-block sb of row r lands in the tile layout.
size_t tile_offset(int64_t r, int sb, int n_sb, int b) {
  const size_t base = (size_t(r / 16) * size_t(n_sb) + size_t(sb)) * 3360;
  const int rr = int(r % 16), g = rr % 8, h = rr / 8;
  if (b >= 208) return base + 3328 + 4 * size_t(g) + 2 * size_t(h) + size_t(b - 208);
  // A span's byte e sits in slot e + 2 (mod 16) of odd super-blocks (the activations' order).
  const int e = b % 16, p = (e + (sb % 2 == 1 ? 2 : 0)) % 16, c = p / 4, i = p % 4;
  if (b >= 192) return base + 3072 + 128 * size_t(c / 2) + 16 * size_t(g) + 8 * size_t(c % 2) + 4 * size_t(h) + size_t(i);
  const int lane = 4 * g + c;
  const auto [k, pair] = quant_word_of_span(b / 16);
  return base + 512 * size_t(k) + 16 * size_t(lane) + 4 * size_t(2 * pair + h) + size_t(i);
}

uint32_t word_at(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// The word of 16-byte span s (0..12) that lane c of the GGUF-row kernel holds for a super-block
// at `block` (odd super-blocks: the aligned word 2 bytes before, lane 0 completed by bytes 0, 1
// of its next span's word, as imma_q6k.cu's PRMT 0x3254 does).
uint32_t gguf_kernel_word(const uint8_t* block, bool odd, int s, int c) {
  if (!odd) return word_at(block + 16 * s + 4 * c);
  const uint32_t w = word_at(block - 2 + 16 * s + 4 * c);
  if (c != 0) return w;
  const uint32_t next = word_at(block - 2 + 16 * (s + 1));
  return (next & 0xFFFF) | (w & 0xFFFF0000u);
}

TEST(Q6kTiles, EveryRowByteIsWhereTheLayoutPutsIt) {
  std::mt19937 rng(6);
  for (const auto& [n_out, n_sb] : {std::pair<int64_t, int>{37, 3}, {16, 1}, {48, 20}, {5, 2}, {33, 4}}) {
    std::vector<uint8_t> src(size_t(n_out) * kSb * size_t(n_sb) + 4);  // + 4: the last block's lane-0 read
    for (auto& v : src) v = uint8_t(rng());
    const size_t bytes = q6k_tiles_bytes(n_out, n_sb);
    ASSERT_EQ(bytes, size_t((n_out + 15) / 16) * size_t(n_sb) * 3360);
    std::vector<uint8_t> dst(bytes, 0xA5);
    std::vector<int> hits(bytes, 0);
    q6k_to_tiles(src.data(), n_out, n_sb, dst.data());
    const int64_t padded = (n_out + 15) / 16 * 16;
    for (int64_t r = 0; r < padded; ++r) {
      const int64_t from = std::min(r, n_out - 1);  // padding rows repeat the last one
      for (int sb = 0; sb < n_sb; ++sb) {
        const uint8_t* block = src.data() + size_t(from) * kSb * size_t(n_sb) + kSb * size_t(sb);
        const std::string where = "row " + std::to_string(r) + " super-block " + std::to_string(sb) + " (" +
                                  std::to_string(n_out) + " x " + std::to_string(n_sb) + ")";
        for (int b = 0; b < kSb; ++b) {
          const size_t at = tile_offset(r, sb, n_sb, b);
          ASSERT_LT(at, bytes);
          hits[at]++;
          ASSERT_EQ(dst[at], block[b]) << where << " byte " << b;
        }
        // The kernels' view: lane (g, c)'s words of spans 0..11 and its scale word equal the
        // GGUF-row kernel's realigned words; group j's scale is at slot (j + rot) % 16.
        const size_t base = (size_t(r / 16) * size_t(n_sb) + size_t(sb)) * 3360;
        const int rr = int(r % 16), g = rr % 8, h = rr / 8, rot = sb % 2 == 1 ? 2 : 0;
        for (int c = 0; c < 4; ++c) {
          const int lane = 4 * g + c;
          for (int s = 0; s < 12; ++s) {
            const auto [k, p] = quant_word_of_span(s);
            const uint32_t tile = word_at(&dst[base + 512 * size_t(k) + 16 * size_t(lane) + 4 * size_t(2 * p + h)]);
            ASSERT_EQ(tile, gguf_kernel_word(block, rot != 0, s, c)) << where << " lane " << lane << " span " << s;
          }
          const size_t sc_word = base + 3072 + 128 * size_t(c / 2) + 16 * size_t(g) + 8 * size_t(c % 2) + 4 * size_t(h);
          ASSERT_EQ(word_at(&dst[sc_word]), gguf_kernel_word(block, rot != 0, 12, c)) << where << " lane " << lane << " scales";
        }
        for (int j = 0; j < 16; ++j) {
          const int p = (j + rot) % 16;
          const size_t at = base + 3072 + 128 * size_t(p / 8) + 16 * size_t(g) + 8 * size_t((p / 4) % 2) + 4 * size_t(h) +
                            size_t(p % 4);
          ASSERT_EQ(dst[at], block[192 + j]) << where << " scale of group " << j;
        }
      }
    }
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(hits[i], 1) << "tile byte " << i << " written " << hits[i] << " times";
  }
}

// The kernels' reading of the quant words (q6k_tile_word, q6k_tile_pair) finds each span where
// the layout puts it.
TEST(Q6kTiles, KernelsFindEachSpan) {
  for (int s = 0; s < 12; ++s) {
    const auto [k, p] = quant_word_of_span(s);
    EXPECT_EQ(q6k_tile_word(s), k) << "span " << s;
    EXPECT_EQ(q6k_tile_pair(s), p) << "span " << s;
  }
}

// The activations' slot order (imma_q6k.cuh's q6k_elem) is the layout's: identity in even
// super-blocks, a rotation by two in odd ones.
TEST(Q6kTiles, SlotOrder) {
  for (int p = 0; p < 16; ++p) {
    EXPECT_EQ(q6k_slot_elem(0, p), p);
    EXPECT_EQ(q6k_slot_elem(4, p), p);
    EXPECT_EQ(q6k_slot_elem(1, p), (p + 14) % 16);
    EXPECT_EQ(q6k_slot_elem(7, p), (p + 14) % 16);
  }
}

}  // namespace
}  // namespace df
