#include "quant/q4k_tiles.h"

#include <algorithm>
#include <cstring>

namespace df {

namespace {
constexpr int kSbBytes = 144;
}

size_t q4k_tiles_bytes(int64_t n_out, int n_sb) {
  const size_t tiles = size_t((n_out + kQ4kTileRows - 1) / kQ4kTileRows);
  return tiles * size_t(n_sb) * kQ4kTileBytes;
}

void q4k_to_tiles(const uint8_t* src, int64_t n_out, int n_sb, uint8_t* dst) {
  const size_t row_bytes = size_t(n_sb) * kSbBytes;
  const int64_t tiles = (n_out + kQ4kTileRows - 1) / kQ4kTileRows;
  for (int64_t t = 0; t < tiles; ++t) {
    const uint8_t* rows[kQ4kTileRows];
    for (int r = 0; r < kQ4kTileRows; ++r) rows[r] = src + size_t(std::min(t * kQ4kTileRows + r, n_out - 1)) * row_bytes;
    for (int sb = 0; sb < n_sb; ++sb) {
      uint8_t* const out = dst + (size_t(t) * size_t(n_sb) + size_t(sb)) * kQ4kTileBytes;
      const size_t at = size_t(sb) * kSbBytes;
      for (int i = 0; i < 4; ++i)
        for (int l = 0; l < 32; ++l)
          for (int h = 0; h < 2; ++h)
            std::memcpy(out + kQ4kTileQuantStride * i + 16 * l + 8 * h, rows[l / 4 + 8 * h] + at + 16 + 8 * (l % 4) + 32 * i, 8);
      for (int r = 0; r < kQ4kTileRows; ++r) std::memcpy(out + kQ4kTileHeaders + 16 * r, rows[r] + at, 16);
    }
  }
}

}  // namespace df
