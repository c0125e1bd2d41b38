// A Q4_K weight in 16-row tiles, the layout the CUDA decode kernel reads fastest (measured on
// the H200, bench/matmul_kernels' access-pattern probes: the GGUF rows' reads alone reach ~80%
// of the read bandwidth, the same bytes as tiles ~100%). Tile t holds rows 16t .. 16t + 15 (rows
// past the weight's last repeat it); its super-blocks follow each other, 2304 bytes each:
//   bytes 512 i + 16 l + 8 h, 8 bytes (i < 4, lane l < 32, g = l / 4, c = l % 4, h < 2): row
//     g + 8h's quant bytes 16 + 8c + 32i .. + 8 of the super-block (what that lane of the
//     imma_16832 fragments reads for sub-block pair i), so a warp reads its quants as four
//     coalesced 512-byte words;
//   bytes 2048 + 16 r, 16 bytes: row r's header (d, dmin, the 12 scale bytes).
// Same bytes, same values: only the order changes.
#pragma once
#include <cstddef>
#include <cstdint>

namespace df {

constexpr int kQ4kTileRows = 16;
constexpr int kQ4kTileBytes = 2304;         // one super-block of a tile
constexpr int kQ4kTileHeaders = 2048;       // where the tile's 16 headers start in it
constexpr int kQ4kTileQuantStride = 512;    // between a lane's four quant words

// Bytes of the tile layout of a weight with n_out rows of n_sb super-blocks.
size_t q4k_tiles_bytes(int64_t n_out, int n_sb);
// Writes the tile layout of src (n_out GGUF rows of row_bytes = 144 * n_sb bytes) to dst.
void q4k_to_tiles(const uint8_t* src, int64_t n_out, int n_sb, uint8_t* dst);

}  // namespace df
