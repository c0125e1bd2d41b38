// A Q8_0 weight in 16-row tiles, the layout the CUDA integer kernels read (backend/cuda/
// imma_q80.cu): GGUF's 34-byte blocks are only 2-byte aligned, so a lane could not read its
// quants as wide words; here a warp reads one block of 16 rows as one coalesced 512-byte load.
// Tile t holds rows 16t .. 16t + 15 (rows past the weight's last repeat it); its super-blocks
// (8 blocks, 256 elements) follow each other, 4352 bytes each (16 rows x 8 blocks x 34 bytes,
// reordered):
//   bytes 512 j + 16 l + 8 h, 8 bytes (block j < 8, lane l < 32, g = l / 4, c = l % 4, h < 2):
//     row g + 8h's quants 8c .. 8c + 7 of block j (what that lane of the m16n8k32 fragments
//     takes), so a warp reads a block's quants as one 512-byte word;
//   bytes 4096 + 32 g + 4 j + 2 h, 2 bytes: row g + 8h's f16 scale d of block j (the lanes of
//     rows g, g + 8 read their eight scale pairs as two 16-byte words).
// Same bytes, same values: only the order changes.
#pragma once
#include <cstddef>
#include <cstdint>

namespace df {

constexpr int kQ80TileRows = 16;
constexpr int kQ80TileBytes = 4352;       // one super-block (8 blocks) of a tile
constexpr int kQ80TileScales = 4096;      // where the super-block's scales start in it
constexpr int kQ80TileBlockStride = 512;  // between a lane's quant words of consecutive blocks
constexpr int kQ80SbBlocks = 8;           // Q8_0 blocks a super-block

// Bytes of the tile layout of a weight with n_out rows of n_sb super-blocks (8 n_sb blocks).
size_t q80_tiles_bytes(int64_t n_out, int n_sb);
// Writes the tile layout of src (n_out GGUF rows of row_bytes = 272 * n_sb bytes) to dst.
void q80_to_tiles(const uint8_t* src, int64_t n_out, int n_sb, uint8_t* dst);

}  // namespace df
