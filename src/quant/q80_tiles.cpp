#include "quant/q80_tiles.h"

#include <cstring>

#include "quant/tile_walk.h"

namespace df {

namespace {
constexpr int kBlockBytes = 34;  // f16 d, 32 int8 quants
constexpr int kSbBytes = kQ80SbBlocks * kBlockBytes;
}  // namespace

static_assert(kQ80TileRows == kTileRows);

size_t q80_tiles_bytes(int64_t n_out, int n_sb) { return tiled_bytes(n_out, n_sb, kQ80TileBytes); }

void q80_to_tiles(const uint8_t* src, int64_t n_out, int n_sb, uint8_t* dst) {
  for_each_tile_super_block(src, n_out, n_sb, size_t(n_sb) * kSbBytes, kQ80TileBytes, dst,
                            [](const uint8_t* const* rows, size_t sb_at, uint8_t* out) {
                              for (int j = 0; j < kQ80SbBlocks; ++j) {
                                const size_t at = sb_at + size_t(j) * kBlockBytes;  // block j of the super-block
                                for (int l = 0; l < 32; ++l)
                                  for (int h = 0; h < 2; ++h)
                                    std::memcpy(out + kQ80TileBlockStride * j + 16 * l + 8 * h,
                                                rows[l / 4 + 8 * h] + at + 2 + 8 * (l % 4), 8);
                                for (int g = 0; g < 8; ++g)
                                  for (int h = 0; h < 2; ++h)
                                    std::memcpy(out + kQ80TileScales + 32 * g + 4 * j + 2 * h, rows[g + 8 * h] + at, 2);
                              }
                            });
}

}  // namespace df
