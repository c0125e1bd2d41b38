// An IQ4_XS weight in 16-row tiles, the layout the CUDA integer kernels read (imma_iq4xs.cu,
// imma_iq4xs_gemm.cu): each lane of an mma fragment finds its nibbles in coalesced words, in the
// order the Q4_K kernels' fragments use, so the activation operand of a sub-block is one
// natural-order 8-byte load of the Q8_K row. Tile t holds rows 16t .. 16t + 15 (rows past the
// weight's last repeat it); its super-blocks follow each other, 2176 bytes each (16 x 136):
//   bytes 512 i + 16 l + 4 (2 p + h), 4 bytes (i < 4, lane l < 32, g = l / 4, c = l % 4, p < 2,
//     h < 2): elements 8c .. 8c + 7 of sub-block 2i + p of row g + 8h, element 8c + k in
//     nibble k (bits 4k .. 4k + 3 of the little-endian word), each nibble the GGUF code-book
//     index; so a warp reads its quants as four coalesced 512-byte words, a lane's 16 bytes
//     holding sub-blocks 2i, 2i + 1 of its two rows;
//   bytes 2048 + 16 g + 8 h, 8 bytes: row g + 8h's header, two little-endian words x, y: the
//     low bytes of x and y are d's f16 bits (low, high byte); sub-block j's scale ls_j - 32
//     (-32 .. 31) sits as a 6-bit two's complement field at bit 8 + 6 (j % 4) of x (j < 4) or
//     y (j >= 4), so one or two shifts sign-extend it.
// Same values: the nibbles are moved, the 6-bit scales and d re-encoded without loss.
#pragma once
#include <cstddef>
#include <cstdint>

namespace df {

constexpr int kIq4xsTileRows = 16;
constexpr int kIq4xsTileBytes = 2176;        // one super-block of a tile
constexpr int kIq4xsTileHeaders = 2048;      // where the tile's 16 headers start in it
constexpr int kIq4xsTileQuantStride = 512;   // between a lane's four quant words

// Bytes of the tile layout of a weight with n_out rows of n_sb super-blocks.
size_t iq4xs_tiles_bytes(int64_t n_out, int n_sb);
// Writes the tile layout of src (n_out GGUF rows of row_bytes = 136 * n_sb bytes) to dst.
void iq4xs_to_tiles(const uint8_t* src, int64_t n_out, int n_sb, uint8_t* dst);

}  // namespace df
