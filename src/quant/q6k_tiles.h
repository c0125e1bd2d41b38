// A Q6_K weight in 16-row tiles for the CUDA integer kernels (imma_q6k.cu, imma_q6k_gemm.cu):
// GGUF's 210-byte blocks leave every other super-block at 2 mod 4, and a lane's words of a row
// lie 16 bytes apart over 16 rows, which caps the reads at ~80% of the bandwidth (session 8's
// probe); here a warp reads a tile's super-block as six coalesced 512-byte words and three
// small ones. Tile t holds rows 16t .. 16t + 15 (rows past the weight's last repeat it); its
// super-blocks follow each other, 3360 bytes each (16 x 210: the same bytes, reordered).
//
// Each lane's bytes are stored in the slot order of the kernels' activations (imma_q6k.cuh's
// q6k_elem, equal to q6k_slot_elem below): slot p < 16 of a 16-byte span of super-block sb holds
// the span's byte q6k_slot_elem(sb, p), rotated by 2 in odd super-blocks as the GGUF kernel's
// realigned words are, so the tile kernels need no byte permutes. With lane l < 32, g = l / 4,
// c = l % 4, h < 2 (row g + 8h), i < 4, a GGUF super-block's spans 0..7 its ql bytes, 8..11 its
// qh bytes, 12 its scales:
//   byte 512 k + 16 l + 4 w + i (k = 3 hh + t with hh < 2, t < 3; w < 4): slot 4c + i of row
//     g + 8 (w % 2)'s span 4 hh + t + 2 (w / 2) for t < 2 (ql), 8 + 2 hh + w / 2 for t = 2 (qh):
//     the six 16-byte words of a lane's ql / qh, each word what a kernel step uses together
//     (half hh of the super-block, part t of its groups' ql; both parts' qh);
//   byte 3072 + 128 u + 16 g + 8 v + 4 h + i (u, v < 2): row g + 8h's scale in slot
//     4 (2u + v) + i, so that lane (g, c) reads its rows' slots 4c..4c+3 (the offset mma's A
//     operand) as one 8-byte word at u = c / 2, v = c % 2, and all sixteen of its rows' scales
//     as two 16-byte words at u = 0, 1 (a warp's loads 128 contiguous bytes each);
//   bytes 3328 + 4 g + 2 h, 2 bytes: row g + 8h's f16 d.
#pragma once
#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define DF_Q6K_HD __host__ __device__
#else
#define DF_Q6K_HD
#endif

namespace df {

constexpr int kQ6kTileRows = 16;
constexpr int kQ6kTileBytes = 3360;       // one super-block of a tile
constexpr int kQ6kTileQuantStride = 512;  // between a lane's six quant words
constexpr int kQ6kTileScales = 3072;      // where the super-block's scales start in it
constexpr int kQ6kTileD = 3328;           // where its d's start

// The byte of a 16-byte span of super-block sb that slot p holds.
DF_Q6K_HD constexpr int q6k_slot_elem(int64_t sb, int p) { return (p - 2 * int(sb & 1) + 16) % 16; }

// The kernels' reading of the quant words: lane (g, c)'s word of span s (< 12; ql 0..7, qh
// 8..11) of row g + 8h is word 2 q6k_tile_pair(s) + h of its quant word q6k_tile_word(s).
DF_Q6K_HD constexpr int q6k_tile_word(int s) { return s < 8 ? 3 * (s / 4) + s % 2 : 3 * ((s - 8) / 2) + 2; }
DF_Q6K_HD constexpr int q6k_tile_pair(int s) { return s < 8 ? (s % 4) / 2 : s % 2; }

// Bytes of the tile layout of a weight with n_out rows of n_sb super-blocks.
size_t q6k_tiles_bytes(int64_t n_out, int n_sb);
// Writes the tile layout of src (n_out GGUF rows of row_bytes = 210 * n_sb bytes) to dst.
void q6k_to_tiles(const uint8_t* src, int64_t n_out, int n_sb, uint8_t* dst);

}  // namespace df
