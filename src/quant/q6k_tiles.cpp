#include "quant/q6k_tiles.h"

#include <cstring>

#include "quant/tile_walk.h"

namespace df {

namespace {
constexpr int kSbBytes = 210;  // GGUF Q6_K super-block: ql[128], qh[64], scales[16], d
constexpr int kScales = 192, kD = 208;
}  // namespace

static_assert(kQ6kTileRows == kTileRows);
static_assert(kQ6kTileBytes == kTileRows * kSbBytes && kQ6kTileD + 2 * kTileRows == kQ6kTileBytes);

size_t q6k_tiles_bytes(int64_t n_out, int n_sb) { return tiled_bytes(n_out, n_sb, kQ6kTileBytes); }

void q6k_to_tiles(const uint8_t* src, int64_t n_out, int n_sb, uint8_t* dst) {
  for_each_tile_super_block(
      src, n_out, n_sb, size_t(n_sb) * kSbBytes, kQ6kTileBytes, dst, [](const uint8_t* const* rows, size_t at, uint8_t* out) {
        const int64_t sb = int64_t(at / kSbBytes);
        for (int l = 0; l < 32; ++l) {
          const int g = l / 4, c = l % 4;
          for (int h = 0; h < 2; ++h) {
            const uint8_t* row = rows[g + 8 * h] + at;
            for (int i = 0; i < 4; ++i) {
              const int e = q6k_slot_elem(sb, 4 * c + i);
              for (int k = 0; k < 6; ++k)
                for (int p = 0; p < 2; ++p) {  // quant word k = 3 hh + t, its words 2p + h
                  const int hh = k / 3, t = k % 3, s = t < 2 ? 4 * hh + t + 2 * p : 8 + 2 * hh + p;
                  out[kQ6kTileQuantStride * k + 16 * l + 4 * (2 * p + h) + i] = row[16 * s + e];
                }
              out[kQ6kTileScales + 128 * (c / 2) + 16 * g + 8 * (c % 2) + 4 * h + i] = row[kScales + e];
            }
          }
        }
        for (int r = 0; r < kTileRows; ++r) std::memcpy(out + kQ6kTileD + 4 * (r % 8) + 2 * (r / 8), rows[r] + at + kD, 2);
      });
}

}  // namespace df
