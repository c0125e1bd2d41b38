#include "quant/q5k_tiles.h"

#include <algorithm>
#include <cstring>

#include "quant/q4k_tiles.h"

namespace df {

namespace {
constexpr int kSbBytes = 176;  // GGUF Q5_K super-block: d, dmin, scales[12], qh[32], qs[128]
constexpr int kQh = 16, kQs = 48;

// The 5-bit value of element e (< 256) of a GGUF Q5_K super-block.
int q5_value(const uint8_t* sb, int e) {
  const int pair = e / 64, l = e % 32, high = (e / 32) % 2;
  const int nibble = (sb[kQs + 32 * pair + l] >> (4 * high)) & 15;
  return nibble | ((sb[kQh + l] >> (2 * pair + high)) & 1) << 4;
}
}  // namespace

size_t q5k_tiles_bytes(int64_t n_out, int n_sb) {
  const size_t tiles = size_t((n_out + kQ4kTileRows - 1) / kQ4kTileRows);
  return tiles * size_t(n_sb) * kQ5kTileBytes;
}

void q5k_to_tiles(const uint8_t* src, int64_t n_out, int n_sb, uint8_t* dst) {
  const size_t row_bytes = size_t(n_sb) * kSbBytes;
  const int64_t tiles = (n_out + kQ4kTileRows - 1) / kQ4kTileRows;
  for (int64_t t = 0; t < tiles; ++t) {
    const uint8_t* rows[kQ4kTileRows];
    for (int r = 0; r < kQ4kTileRows; ++r) rows[r] = src + size_t(std::min(t * kQ4kTileRows + r, n_out - 1)) * row_bytes;
    for (int sb = 0; sb < n_sb; ++sb) {
      uint8_t* const out = dst + (size_t(t) * size_t(n_sb) + size_t(sb)) * kQ5kTileBytes;
      std::memset(out + kQ5kTileHighBits, 0, kQ5kTileBytes - kQ5kTileHighBits);
      const size_t at = size_t(sb) * kSbBytes;
      for (int i = 0; i < 4; ++i)
        for (int l = 0; l < 32; ++l)
          for (int h = 0; h < 2; ++h)
            for (int k = 0; k < 8; ++k) {
              const uint8_t* row = rows[l / 4 + 8 * h] + at;
              const int p = 8 * (l % 4) + k, lo = q5_value(row, 64 * i + p), hi = q5_value(row, 64 * i + 32 + p);
              out[kQ4kTileQuantStride * i + 16 * l + 8 * h + k] = uint8_t(lo | (hi >> 2) << 5);
              out[kQ5kTileHighBits + 128 * i + 4 * l + k % 4] |= uint8_t((hi & 3) << (2 * (2 * h + k / 4)));
            }
      for (int r = 0; r < kQ4kTileRows; ++r) std::memcpy(out + kQ4kTileHeaders + 16 * r, rows[r] + at, 16);
    }
  }
}

}  // namespace df
