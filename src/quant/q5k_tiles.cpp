#include "quant/q5k_tiles.h"

#include <cstring>

#include "quant/q4k_tiles.h"
#include "quant/tile_walk.h"

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

size_t q5k_tiles_bytes(int64_t n_out, int n_sb) { return tiled_bytes(n_out, n_sb, kQ5kTileBytes); }

void q5k_to_tiles(const uint8_t* src, int64_t n_out, int n_sb, uint8_t* dst) {
  for_each_tile_super_block(
      src, n_out, n_sb, size_t(n_sb) * kSbBytes, kQ5kTileBytes, dst, [](const uint8_t* const* rows, size_t at, uint8_t* out) {
        std::memset(out + kQ5kTileHighBits, 0, kQ5kTileBytes - kQ5kTileHighBits);
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
      });
}

}  // namespace df
