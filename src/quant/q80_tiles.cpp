#include "quant/q80_tiles.h"

#include <algorithm>
#include <cstring>

namespace df {

namespace {
constexpr int kBlockBytes = 34;  // f16 d, 32 int8 quants
constexpr int kSbBytes = kQ80SbBlocks * kBlockBytes;
}  // namespace

size_t q80_tiles_bytes(int64_t n_out, int n_sb) {
  const size_t tiles = size_t((n_out + kQ80TileRows - 1) / kQ80TileRows);
  return tiles * size_t(n_sb) * kQ80TileBytes;
}

void q80_to_tiles(const uint8_t* src, int64_t n_out, int n_sb, uint8_t* dst) {
  const size_t row_bytes = size_t(n_sb) * kSbBytes;
  const int64_t tiles = (n_out + kQ80TileRows - 1) / kQ80TileRows;
  for (int64_t t = 0; t < tiles; ++t) {
    const uint8_t* rows[kQ80TileRows];
    for (int r = 0; r < kQ80TileRows; ++r) rows[r] = src + size_t(std::min(t * kQ80TileRows + r, n_out - 1)) * row_bytes;
    for (int sb = 0; sb < n_sb; ++sb) {
      uint8_t* const out = dst + (size_t(t) * size_t(n_sb) + size_t(sb)) * kQ80TileBytes;
      for (int j = 0; j < kQ80SbBlocks; ++j) {
        const size_t at = size_t(sb) * kSbBytes + size_t(j) * kBlockBytes;  // block j of the super-block
        for (int l = 0; l < 32; ++l)
          for (int h = 0; h < 2; ++h)
            std::memcpy(out + kQ80TileBlockStride * j + 16 * l + 8 * h, rows[l / 4 + 8 * h] + at + 2 + 8 * (l % 4), 8);
        for (int g = 0; g < 8; ++g)
          for (int h = 0; h < 2; ++h) std::memcpy(out + kQ80TileScales + 32 * g + 4 * j + 2 * h, rows[g + 8 * h] + at, 2);
      }
    }
  }
}

}  // namespace df
