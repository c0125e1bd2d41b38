// The Q4_K tile layout (quant/q4k_tiles.h) against its definition read the other way round:
// every byte of every GGUF row is found where the layout's rule puts it (computed here from the
// row's side: header bytes, then quant byte q of sub-block pair i, lane column c), padding rows
// of the last tile repeat the last row, and nothing else is written.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "quant/q4k_tiles.h"

namespace df {
namespace {

// Where byte b (< 144) of super-block sb of row r lands in the tile layout.
size_t tile_offset(int64_t r, int sb, int n_sb, int b) {
  const size_t sb_base = (size_t(r / 16) * size_t(n_sb) + size_t(sb)) * 2304;
  const int rr = int(r % 16);
  if (b < 16) return sb_base + 2048 + 16 * size_t(rr) + size_t(b);
  const int q = b - 16, pair = q / 32, col = (q % 32) / 8;  // sub-block pair, the lane's column
  const int lane = 4 * (rr % 8) + col, half = rr / 8;
  return sb_base + 512 * size_t(pair) + 16 * size_t(lane) + 8 * size_t(half) + size_t(q % 8);
}

TEST(Q4kTiles, EveryRowByteIsWhereTheLayoutPutsIt) {
  std::mt19937 rng(5);
  for (const auto& [n_out, n_sb] : {std::pair<int64_t, int>{37, 3}, {16, 1}, {48, 20}, {5, 2}}) {
    std::vector<uint8_t> src(size_t(n_out) * 144 * size_t(n_sb));
    for (auto& v : src) v = uint8_t(rng());
    const size_t bytes = q4k_tiles_bytes(n_out, n_sb);
    ASSERT_EQ(bytes, size_t((n_out + 15) / 16) * size_t(n_sb) * 2304);
    std::vector<uint8_t> dst(bytes, 0xA5);
    std::vector<int> hits(bytes, 0);
    q4k_to_tiles(src.data(), n_out, n_sb, dst.data());
    const int64_t padded = (n_out + 15) / 16 * 16;
    for (int64_t r = 0; r < padded; ++r) {
      const int64_t from = std::min(r, n_out - 1);  // padding rows repeat the last one
      for (int sb = 0; sb < n_sb; ++sb)
        for (int b = 0; b < 144; ++b) {
          const size_t at = tile_offset(r, sb, n_sb, b);
          ASSERT_LT(at, bytes);
          hits[at]++;
          ASSERT_EQ(dst[at], src[size_t(from) * 144 * size_t(n_sb) + 144 * size_t(sb) + size_t(b)])
              << "row " << r << " super-block " << sb << " byte " << b << " (" << n_out << " x " << n_sb << ")";
        }
    }
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(hits[i], 1) << "tile byte " << i << " written " << hits[i] << " times";
  }
}

}  // namespace
}  // namespace df
