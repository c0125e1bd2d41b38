// The Q5_K tile layout (quant/q5k_tiles.h) against its definition read the other way round:
// every 5-bit value of every GGUF row (nibble + 16 x its qh bit, decoded here from the format)
// and every header byte is found where the layout's rule puts it, computed from the row's side;
// the kernels' operand recipe (q5k_low_operand, q5k_high_operand) gives each lane exactly those
// values (low sub-block) and 8 x them (high); padding rows of the last tile repeat the last row;
// and every bit of the tiles is written by exactly one value or header byte.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "quant/q5k_tiles.h"

namespace df {
namespace {

constexpr int kSb = 176;

// Element e of a GGUF Q5_K super-block: sub-block j = e / 32 takes bit j of qh[e % 32] as its
// fifth bit; the nibble is the low one of qs[32 (j / 2) + e % 32] for even j, the high one for odd.
int value_of(const uint8_t* sb, int e) {
  const int j = e / 32, l = e % 32;
  const uint8_t q = sb[48 + 32 * (j / 2) + l];
  const int nibble = j % 2 == 0 ? q & 15 : q >> 4;
  return nibble + 16 * ((sb[16 + l] >> j) & 1);
}

// Where element e of row r's super-block sb lands: its lane, pair, word (row half, element
// quad) and byte in the word; the tile super-block's offset.
struct Spot {
  size_t base;
  int lane, pair, w, b;
  bool high;
};
Spot spot_of(int64_t r, int sb, int n_sb, int e) {
  const int rr = int(r % 16), p = e % 32, col = p / 8, k = p % 8;
  return {(size_t(r / 16) * size_t(n_sb) + size_t(sb)) * kQ5kTileBytes, 4 * (rr % 8) + col, e / 64,
          2 * (rr / 8) + k / 4, k % 4, (e / 32) % 2 == 1};
}

uint32_t word_at(const std::vector<uint8_t>& v, size_t at) {
  return uint32_t(v[at]) | uint32_t(v[at + 1]) << 8 | uint32_t(v[at + 2]) << 16 | uint32_t(v[at + 3]) << 24;
}

uint32_t high_operand(int w, uint32_t q, uint32_t f) {
  switch (w) {
    case 0: return q5k_high_operand<0>(q, f);
    case 1: return q5k_high_operand<1>(q, f);
    case 2: return q5k_high_operand<2>(q, f);
    default: return q5k_high_operand<3>(q, f);
  }
}

TEST(Q5kTiles, EveryValueIsWhereTheLayoutPutsIt) {
  std::mt19937 rng(7);
  for (const auto& [n_out, n_sb] : {std::pair<int64_t, int>{37, 3}, {16, 1}, {48, 20}, {5, 2}}) {
    std::vector<uint8_t> src(size_t(n_out) * kSb * size_t(n_sb));
    for (auto& v : src) v = uint8_t(rng());
    const size_t bytes = q5k_tiles_bytes(n_out, n_sb);
    ASSERT_EQ(bytes, size_t((n_out + 15) / 16) * size_t(n_sb) * 2816);
    std::vector<uint8_t> dst(bytes, 0xA5);
    std::vector<uint8_t> claimed(bytes, 0);  // bits some value or header byte is stored in
    auto claim = [&](size_t at, uint8_t bits) {
      ASSERT_LT(at, bytes);
      ASSERT_EQ(claimed[at] & bits, 0) << "tile byte " << at << " bits " << int(bits) << " stored twice";
      claimed[at] |= bits;
    };
    q5k_to_tiles(src.data(), n_out, n_sb, dst.data());
    const int64_t padded = (n_out + 15) / 16 * 16;
    for (int64_t r = 0; r < padded; ++r) {
      const int64_t from = std::min(r, n_out - 1);  // padding rows repeat the last one
      for (int sb = 0; sb < n_sb; ++sb) {
        const uint8_t* gguf = src.data() + size_t(from) * kSb * size_t(n_sb) + kSb * size_t(sb);
        const std::string where = "row " + std::to_string(r) + " super-block " + std::to_string(sb) + " (" +
                                  std::to_string(n_out) + " x " + std::to_string(n_sb) + ")";
        for (int b = 0; b < 16; ++b) {  // the header: d, dmin, scales
          const size_t at = spot_of(r, sb, n_sb, 0).base + 2048 + 16 * size_t(r % 16) + size_t(b);
          claim(at, 0xFF);
          ASSERT_EQ(dst[at], gguf[b]) << where << " header byte " << b;
        }
        for (int e = 0; e < 256; ++e) {
          const Spot s = spot_of(r, sb, n_sb, e);
          const size_t q_at = s.base + 512 * size_t(s.pair) + 16 * size_t(s.lane) + 4 * size_t(s.w) + size_t(s.b);
          const size_t f_at = s.base + 2304 + 128 * size_t(s.pair) + 4 * size_t(s.lane) + size_t(s.b);
          const int want = value_of(gguf, e);
          // The byte of the operand the kernel makes of this word, and the raw bits.
          const uint32_t q = word_at(dst, q_at - size_t(s.b)), f = word_at(dst, f_at - size_t(s.b));
          const uint32_t op = s.high ? high_operand(s.w, q, f) : q5k_low_operand(q);
          ASSERT_EQ(int((op >> (8 * s.b)) & 0xFF), s.high ? 8 * want : want)
              << where << " element " << e << " (lane " << s.lane << ", pair " << s.pair << ", word " << s.w << ")";
          if (s.high) {
            claim(q_at, 0xE0);
            claim(f_at, uint8_t(3 << (2 * s.w)));
            ASSERT_EQ(((dst[q_at] >> 5) << 2) | ((dst[f_at] >> (2 * s.w)) & 3), want) << where << " element " << e;
          } else {
            claim(q_at, 0x1F);
            ASSERT_EQ(dst[q_at] & 0x1F, want) << where << " element " << e;
          }
        }
      }
    }
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(claimed[i], 0xFF) << "tile byte " << i << " partly unclaimed";
  }
}

}  // namespace
}  // namespace df
