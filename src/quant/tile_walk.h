// What the tile layouts' writers share (quant/q4k_tiles, q5k_tiles, iq4xs_tiles, q80_tiles): a
// weight's GGUF rows walked in 16-row tiles of n_sb super-blocks each, rows past the weight's last
// repeating it (the kernels read whole tiles), the tiles' super-blocks one after another.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace df {

constexpr int kTileRows = 16;

// Bytes of a tiled weight: n_out rows in whole tiles of n_sb super-blocks of sb_bytes each.
inline size_t tiled_bytes(int64_t n_out, int n_sb, size_t sb_bytes) {
  return size_t((n_out + kTileRows - 1) / kTileRows) * size_t(n_sb) * sb_bytes;
}

// Calls write(rows, at, out) for every tile super-block: rows[r] the GGUF row of tile row r
// (row_bytes = n_sb * GGUF super-block bytes apart in src), at = the super-block's byte offset in
// a row, out = where its sb_bytes go in dst.
template <class Write>
void for_each_tile_super_block(const uint8_t* src, int64_t n_out, int n_sb, size_t row_bytes, size_t sb_bytes,
                               uint8_t* dst, Write&& write) {
  const size_t gguf_sb_bytes = row_bytes / size_t(n_sb);
  const int64_t tiles = (n_out + kTileRows - 1) / kTileRows;
  for (int64_t t = 0; t < tiles; ++t) {
    const uint8_t* rows[kTileRows];
    for (int r = 0; r < kTileRows; ++r) rows[r] = src + size_t(std::min(t * kTileRows + r, n_out - 1)) * row_bytes;
    for (int sb = 0; sb < n_sb; ++sb)
      write(rows, size_t(sb) * gguf_sb_bytes, dst + (size_t(t) * size_t(n_sb) + size_t(sb)) * sb_bytes);
  }
}

}  // namespace df
