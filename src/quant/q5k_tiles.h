// A Q5_K weight in 16-row tiles for the CUDA integer kernels (imma_matmul.cu, imma_gemm.cu):
// Q4_K's tile layout (q4k_tiles.h) with each lane's quant bytes re-encoded so that a 5-bit value
// (nibble + 16 x its qh bit) becomes a u8 mma operand with few instructions. Tile t holds rows
// 16t .. 16t + 15 (rows past the weight's last repeat it); its super-blocks follow each other,
// 2816 bytes each (16 x 176: the same bytes, re-ordered and re-encoded). With lane l < 32,
// g = l / 4, c = l % 4, sub-block pair i < 4, h < 2 (row g + 8h), k < 8, and lo / hi the 5-bit
// values of elements 64i + 8c + k (sub-block 2i) / 64i + 32 + 8c + k (sub-block 2i + 1):
//   byte 512 i + 16 l + 8 h + k: lo | (hi >> 2) << 5 (where Q4_K's tile has the quant byte): the
//     low operand is one AND (0x1F), the high one (8 hi, <= 248) keeps bits 5-7 and takes
//     hi's two low bits from the next region;
//   bytes 2048 + 16 r, 16 bytes: row r's header (d, dmin, the 12 scale bytes), as in Q4_K's;
//   byte 2304 + 128 i + 4 l + (k % 4), bits 2w and 2w + 1 with w = 2h + k / 4: hi & 3, so the
//     warp reads pair i's as one coalesced 128-byte word (and the GEMM from shared memory
//     without bank conflicts), and one shift and one AND put word w's at bits 3-4 of each byte.
#pragma once
#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define DF_Q5K_HD __host__ __device__ __forceinline__
#else
#define DF_Q5K_HD inline
#endif

namespace df {

constexpr int kQ5kTileBytes = 2816;     // one super-block of a tile
constexpr int kQ5kTileHighBits = 2304;  // where the high values' two low bits start in it

// The u8 mma operands the kernels make of a tile's words (host-callable, so the layout test
// checks the kernels' own recipe): q is word w (< 4) of a lane's 16 quant bytes of a pair (row
// g + 8 (w / 2), elements k = 4 (w % 2) .. + 3), f the lane's 4 high-bit bytes of that pair.
// Low sub-block: the values lo; high sub-block: 8 hi (the kernels scale the low sub-block's
// scales by 8 instead: the sum 8 sum_j sc_j dot_j stays exact).
DF_Q5K_HD uint32_t q5k_low_operand(uint32_t q) { return q & 0x1F1F1F1Fu; }
template <int w>
DF_Q5K_HD uint32_t q5k_high_operand(uint32_t q, uint32_t f) {
  uint32_t low2;  // hi's bits 0-1 of the word's four bytes at bits 3-4 of each
  if constexpr (w < 2) low2 = f << (3 - 2 * w);
  else low2 = f >> (2 * w - 3);
  return (q & 0xE0E0E0E0u) | (low2 & 0x18181818u);
}

// Bytes of the tile layout of a weight with n_out rows of n_sb super-blocks.
size_t q5k_tiles_bytes(int64_t n_out, int n_sb);
// Writes the tile layout of src (n_out GGUF rows of row_bytes = 176 * n_sb bytes) to dst.
void q5k_to_tiles(const uint8_t* src, int64_t n_out, int n_sb, uint8_t* dst);

}  // namespace df
