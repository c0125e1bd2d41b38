// How deq_wgmma_q80.cu takes Q8_0 tiles (quant/q80_tiles.h) into wgmma's register A fragments,
// and the order of k the activations are stored in to match. Plain C++, so that
// tests/test_wgmma_q80_layout.cpp checks it on a CPU against q80_to_tiles and the PTX ISA.
//
// A tile lane l = 4g + c holds, per 32-element block jb of a super-block, 16 bytes at 512 jb +
// 16 l: bytes 8h .. 8h + 7 are row g + 8h's quants 8c .. 8c + 7 of the block. A 64-element
// slice js (of four a super-block) is blocks 2 js + jj (jj < 2), and k16 step s = 2 jj + u of
// the slice takes, for row h, the lane's 4-byte word 2h + u of block 2 js + jj (quants 8c + 4u
// .. + 3): byte i goes to register h (i < 2) or 2 + h (i >= 2), the fragment's k 2c + 8 (i / 2)
// + i % 2 (PTX ISA, wgmma register fragments for A: lane 4g + c, register r, half p is row
// g + 8 (r % 2), k = 2c + 8 (r / 2) + p). So no byte moves: each register is two adjacent bytes
// of one word (one PRMT), and each step multiplies one block's d a row.
//
// A dot product does not depend on the order of k, so the activations hold element e of each
// 64-element slice at q80_fragment_k_position(e). It is the same permutation as Q4_K's fragment_k_position (wgmma_layout.h; a Q4_K lane's low and high
// nibbles of a slice play the role of the two blocks), which the test also checks: so
// to_half_rows_scaled's HalfOrder::kQ4k serves both.
#pragma once
#include <cstdint>

#ifdef __CUDACC__
#define DF_WGMMA_Q80_HD __host__ __device__
#else
#define DF_WGMMA_Q80_HD
#endif

namespace df::cuda::wgmma {

// The block of a super-block (0..7) that k16 step s of slice js takes.
DF_WGMMA_Q80_HD constexpr int q80_step_block(int js, int s) { return 2 * js + s / 2; }
// Where the f16 d of row g + 8h, block jb sits in a tile super-block's 256 scale bytes
// (quant/q80_tiles.h: 32 g + 4 jb + 2 h): a lane reads its two rows' d of slice js's two
// blocks as 8 bytes at 32 g + 8 js (half2 of rows g, g + 8 for block 2 js, then 2 js + 1).
DF_WGMMA_Q80_HD constexpr int q80_scale_offset(int g, int jb, int h) { return 32 * g + 4 * jb + 2 * h; }

// Where element e (< 64) of a slice sits in the activations' order of that slice: block jj =
// e / 32, quant b = e % 8 of lane c = (e % 32) / 8; step 2 jj + b / 4, byte i = b % 4 of the
// word at the fragment's k 2c + 8 (i / 2) + i % 2.
DF_WGMMA_Q80_HD constexpr uint32_t q80_fragment_k_position(uint32_t e) {
  const uint32_t jj = e / 32, c = (e % 32) / 8, b = e % 8, s = 2 * jj + b / 4, i = b % 4;
  return 16 * s + 8 * (i / 2) + 2 * c + i % 2;
}

}  // namespace df::cuda::wgmma
