#include "quant/q4k_tiles.h"

#include <cstring>

#include "quant/tile_walk.h"

namespace df {

namespace {
constexpr int kSbBytes = 144;
}

static_assert(kQ4kTileRows == kTileRows);

size_t q4k_tiles_bytes(int64_t n_out, int n_sb) { return tiled_bytes(n_out, n_sb, kQ4kTileBytes); }

void q4k_to_tiles(const uint8_t* src, int64_t n_out, int n_sb, uint8_t* dst) {
  for_each_tile_super_block(src, n_out, n_sb, size_t(n_sb) * kSbBytes, kQ4kTileBytes, dst,
                            [](const uint8_t* const* rows, size_t at, uint8_t* out) {
                              for (int i = 0; i < 4; ++i)
                                for (int l = 0; l < 32; ++l)
                                  for (int h = 0; h < 2; ++h)
                                    std::memcpy(out + kQ4kTileQuantStride * i + 16 * l + 8 * h,
                                                rows[l / 4 + 8 * h] + at + 16 + 8 * (l % 4) + 32 * i, 8);
                              for (int r = 0; r < kQ4kTileRows; ++r)
                                std::memcpy(out + kQ4kTileHeaders + 16 * r, rows[r] + at, 16);
                            });
}

}  // namespace df
