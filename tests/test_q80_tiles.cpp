// The Q8_0 tile layout (quant/q80_tiles.h) against its definition read the other way round:
// every byte of every GGUF row is found where the layout's rule puts it (computed here from the
// row's side: the scale's two bytes, then quant q of block j, lane column q / 8), padding rows of
// the last tile repeat the last row, and nothing else is written.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "quant/q80_tiles.h"

namespace df {
namespace {

// Where byte b (< 34) of block k of row r lands in the tile layout (8 blocks a super-block).
size_t tile_offset(int64_t r, int64_t k, int n_sb, int b) {
  const int64_t sb = k / 8, j = k % 8;
  const size_t sb_base = (size_t(r / 16) * size_t(n_sb) + size_t(sb)) * 4352;
  const int rr = int(r % 16), g = rr % 8, half = rr / 8;
  if (b < 2) return sb_base + 4096 + 32 * size_t(g) + 4 * size_t(j) + 2 * size_t(half) + size_t(b);
  const int q = b - 2, lane = 4 * g + q / 8;
  return sb_base + 512 * size_t(j) + 16 * size_t(lane) + 8 * size_t(half) + size_t(q % 8);
}

TEST(Q80Tiles, EveryRowByteIsWhereTheLayoutPutsIt) {
  std::mt19937 rng(7);
  for (const auto& [n_out, n_sb] : {std::pair<int64_t, int>{37, 3}, {16, 1}, {48, 5}, {5, 2}, {33, 1}}) {
    const size_t row_bytes = 272 * size_t(n_sb);
    std::vector<uint8_t> src(size_t(n_out) * row_bytes);
    for (auto& v : src) v = uint8_t(rng());
    const size_t bytes = q80_tiles_bytes(n_out, n_sb);
    ASSERT_EQ(bytes, size_t((n_out + 15) / 16) * size_t(n_sb) * 4352);
    ASSERT_EQ(bytes % 16, 0u);  // the kernels read it in 16-byte words
    std::vector<uint8_t> dst(bytes, 0xA5);
    std::vector<int> hits(bytes, 0);
    q80_to_tiles(src.data(), n_out, n_sb, dst.data());
    const int64_t padded = (n_out + 15) / 16 * 16;
    for (int64_t r = 0; r < padded; ++r) {
      const int64_t from = std::min(r, n_out - 1);  // padding rows repeat the last one
      for (int64_t k = 0; k < 8 * int64_t(n_sb); ++k)
        for (int b = 0; b < 34; ++b) {
          const size_t at = tile_offset(r, k, n_sb, b);
          ASSERT_LT(at, bytes);
          hits[at]++;
          ASSERT_EQ(dst[at], src[size_t(from) * row_bytes + 34 * size_t(k) + size_t(b)])
              << "row " << r << " block " << k << " byte " << b << " (" << n_out << " x " << n_sb << ")";
        }
    }
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(hits[i], 1) << "tile byte " << i << " written " << hits[i] << " times";
  }
}

}  // namespace
}  // namespace df
