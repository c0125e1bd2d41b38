#include "quant/iq4xs_tiles.h"

#include <cstring>

#include "quant/tile_walk.h"

namespace df {

namespace {

constexpr int kSbBytes = 136;  // d, scales_h, scales_l[4], qs[128]

// The code-book index of element e (< 32) of sub-block ib of a GGUF super-block: byte
// 16 ib + e % 16 of qs, its low nibble for e < 16, its high one above.
unsigned nibble(const uint8_t* sb, int ib, int e) {
  const uint8_t b = sb[8 + 16 * ib + e % 16];
  return e < 16 ? b & 15u : b >> 4;
}

void put32(uint8_t* p, uint32_t v) {
  for (int k = 0; k < 4; ++k) p[k] = uint8_t(v >> (8 * k));
}

}  // namespace

static_assert(kIq4xsTileRows == kTileRows);

size_t iq4xs_tiles_bytes(int64_t n_out, int n_sb) { return tiled_bytes(n_out, n_sb, kIq4xsTileBytes); }

void iq4xs_to_tiles(const uint8_t* src, int64_t n_out, int n_sb, uint8_t* dst) {
  for_each_tile_super_block(
      src, n_out, n_sb, size_t(n_sb) * kSbBytes, kIq4xsTileBytes, dst, [](const uint8_t* const* rows, size_t at, uint8_t* out) {
        for (int r = 0; r < kIq4xsTileRows; ++r) {
          const uint8_t* const b = rows[r] + at;
          const int g = r % 8, h = r / 8;
          for (int ib = 0; ib < 8; ++ib)
            for (int c = 0; c < 4; ++c) {
              uint32_t w = 0;
              for (int k = 0; k < 8; ++k) w |= uint32_t(nibble(b, ib, 8 * c + k)) << (4 * k);
              put32(out + kIq4xsTileQuantStride * (ib / 2) + 16 * (4 * g + c) + 4 * (2 * (ib % 2) + h), w);
            }
          // Header: d's bytes, then the scales ls - 32 as 6-bit fields (ls ^ 32 is its two's complement).
          const unsigned scales_h = unsigned(b[2]) | unsigned(b[3]) << 8;
          uint32_t xy[2] = {b[0], b[1]};
          for (int ib = 0; ib < 8; ++ib) {
            const unsigned ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 15u) | ((scales_h >> (2 * ib)) & 3u) << 4;
            xy[ib / 4] |= uint32_t(ls ^ 32u) << (8 + 6 * (ib % 4));
          }
          put32(out + kIq4xsTileHeaders + 16 * g + 8 * h, xy[0]);
          put32(out + kIq4xsTileHeaders + 16 * g + 8 * h + 4, xy[1]);
        }
      });
}

}  // namespace df
