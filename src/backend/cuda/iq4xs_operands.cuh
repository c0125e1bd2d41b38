// How the IQ4_XS integer kernels (imma_iq4xs.cu, imma_iq4xs_gemm.cu) turn the tile layout
// (quant/iq4xs_tiles.h) into mma operands: the code-book lookup and the header fields.
// Host-compilable: tests/test_iq4xs_tiles.cpp runs this same code on the CPU (PRMT emulated)
// against the GGUF blocks, so the lookup and the fragment order are checked without a GPU.
//
// Lookup. A nibble n = 8h + m (h: its top bit) indexes the 16 signed code-book values T.
// PRMT picks bytes from 8 (two words) with a selector nibble per output byte: 3 bits of index
// and a top bit that, when set, makes the output byte the sign of the picked byte (0x00 or
// 0xFF) instead of the byte. So with the raw nibbles as selector, the table T[0..7] (all
// negative) gives T[m] where h = 0 and 0xFF = -1 where h = 1; with the top bits flipped, the
// table T[8..15] + 1 (all positive) gives T[8 + m] + 1 where h = 1 and 0 where h = 0. The two
// words add up, byte by byte, to T[n]: two mma (s8 x s8) into one accumulator sum the two
// operands' products, which is the dot with the code-book values, exactly. That is 7
// instructions per 8 values (4 PRMT, the flip, two shifts for the upper selector halves), where
// selecting between two lookups byte by byte takes 12.
#pragma once
#include <cstdint>

#include "quant/blocks.h"

#if defined(__CUDACC__)
#define DF_IQ4_HD __host__ __device__ __forceinline__
#else
#define DF_IQ4_HD inline
#endif

namespace df::iq4xs {

constexpr uint32_t pack4(int a, int b, int c, int d) {
  return uint32_t(uint8_t(a)) | uint32_t(uint8_t(b)) << 8 | uint32_t(uint8_t(c)) << 16 | uint32_t(uint8_t(d)) << 24;
}
constexpr const int8_t* kT = quant::kIQ4Values;
// T[0..7] (the negative half) and T[8..15] + 1 (positive), four bytes a word.
constexpr uint32_t kLo0 = pack4(kT[0], kT[1], kT[2], kT[3]), kLo1 = pack4(kT[4], kT[5], kT[6], kT[7]);
constexpr uint32_t kHi0 = pack4(kT[8] + 1, kT[9] + 1, kT[10] + 1, kT[11] + 1);
constexpr uint32_t kHi1 = pack4(kT[12] + 1, kT[13] + 1, kT[14] + 1, kT[15] + 1);
constexpr bool halves_have_their_signs() {
  for (int i = 0; i < 8; ++i)
    if (kT[i] >= 0 || kT[8 + i] < 0 || kT[8 + i] + 1 > 127) return false;
  return true;
}
static_assert(halves_have_their_signs(), "the lookup needs T[0..7] < 0 <= T[8..15] < 127");

// PTX prmt.b32 (default mode): output byte k is byte (sel >> 4k) & 7 of {b, a} (a's bytes
// 0..3, b's 4..7), or that byte's sign replicated when bit 3 of the selector nibble is set.
DF_IQ4_HD uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
#if defined(__CUDA_ARCH__)
  uint32_t r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
#else
  const uint64_t v = uint64_t(a) | uint64_t(b) << 32;
  uint32_t r = 0;
  for (int k = 0; k < 4; ++k) {
    const uint32_t s = (sel >> (4 * k)) & 15u;
    uint32_t byte = uint32_t(v >> (8 * (s & 7u))) & 0xFFu;
    if (s & 8u) byte = (byte & 0x80u) ? 0xFFu : 0u;
    r |= byte << (8 * k);
  }
  return r;
#endif
}

// The two A-operand words of the four nibbles in the low half of w: lo + hi, byte by byte as
// signed values, are their code-book values (see the header).
DF_IQ4_HD void values4(uint32_t w, uint32_t& lo, uint32_t& hi) {
  lo = prmt(kLo0, kLo1, w);
  hi = prmt(kHi0, kHi1, w ^ 0x8888u);
}

// The A operands of one sub-block's m16n8k32 from a lane's two quant words (rows g and g + 8:
// elements 8c .. 8c + 7 each, the tiles' nibble order). Fragment registers 0..3 are row g at
// k 4c.., row g + 8 at k 4c.., row g at k 16 + 4c.., row g + 8 at k 16 + 4c..; k slot 4c + j
// holds element 8c + j, slot 16 + 4c + j element 8c + 4 + j: the activation operand is then the
// 8 bytes at element 8c of the sub-block (b0, b1). lo and hi go to two mma into one sum.
DF_IQ4_HD void a_operands(uint32_t w_g, uint32_t w_g8, uint32_t (&lo)[4], uint32_t (&hi)[4]) {
  const uint32_t f_g = w_g ^ 0x88888888u, f_g8 = w_g8 ^ 0x88888888u;
  lo[0] = prmt(kLo0, kLo1, w_g), hi[0] = prmt(kHi0, kHi1, f_g);
  lo[1] = prmt(kLo0, kLo1, w_g8), hi[1] = prmt(kHi0, kHi1, f_g8);
  lo[2] = prmt(kLo0, kLo1, w_g >> 16), hi[2] = prmt(kHi0, kHi1, f_g >> 16);
  lo[3] = prmt(kLo0, kLo1, w_g8 >> 16), hi[3] = prmt(kHi0, kHi1, f_g8 >> 16);
}

// Sub-block j's scale ls_j - 32 from a row's header words x, y (the 6-bit field at bit
// 8 + 6 (j % 4) of x or y, sign-extended; j is a constant once unrolled, so two shifts at most).
DF_IQ4_HD int scale_of(uint32_t x, uint32_t y, int j) {
  const uint32_t w = j < 4 ? x : y;
  return int32_t(w << (18 - 6 * (j % 4))) >> 26;
}
// The same for a sub-block pair's word w (x for pairs 0, 1, y for 2, 3) and a shift computed
// once per pair (scale_shift): for loops over pairs that are not unrolled.
DF_IQ4_HD uint32_t scale_shift(int j) { return uint32_t(18 - 6 * (j % 4)); }
DF_IQ4_HD int scale_at(uint32_t w, uint32_t shift) { return int32_t(w << shift) >> 26; }

// The f16 bits of a row's d (low 16 bits).
DF_IQ4_HD uint32_t d_bits(uint32_t x, uint32_t y) { return prmt(x, y, 0x0040u); }

}  // namespace df::iq4xs
