// How deq_wgmma_iq4xs.cu and deq_wgmma_q5k.cu turn a tile lane's quant words into the bytes of
// their f16 A fragments. Host-compilable (PRMT emulated by iq4xs::prmt), so that
// tests/test_wgmma_iq4xs_q5k_layout.cpp runs this same code on the CPU against GGUF rows.
//
// Order of k. Both tile layouts hold, per lane (g, c) and sub-block pair, the same elements as a
// Q4_K tile lane (quant/q4k_tiles.h): rows g and g + 8, elements 8c .. 8c + 7 of the pair's two
// sub-blocks. Q5_K (quant/q5k_tiles.h) also keeps Q4_K's byte placement (byte 8h + k: element
// 8c + k of the low sub-block in its low bits, of the high one above). IQ4_XS
// (quant/iq4xs_tiles.h) does not: its word 2p + h is sub-block p of row g + 8h, element 8c + k in
// nibble k. Both kernels give k16 step s the elements 32 (s / 2) + 8c + 4 (s % 2) + i (i < 4) of
// each row, byte i (registers rr and 2 + rr take bytes 0, 1 and 2, 3), which is the Q4_K
// kernel's choice, so the activations keep HalfOrder::kQ4k (wgmma_layout.h
// fragment_k_position); for IQ4_XS those are nibbles 4 (s % 2) + i of word 2 (s / 2) + rr.
#pragma once
#include <cstdint>

#include "backend/cuda/iq4xs_operands.cuh"
#include "quant/blocks.h"
#include "quant/q5k_tiles.h"

#if defined(__CUDACC__)
#define DF_WGMMA_TV_HD __host__ __device__ __forceinline__
#else
#define DF_WGMMA_TV_HD inline
#endif

namespace df::cuda::wgmma {

// IQ4_XS's code book + 128 (1 .. 241: a byte), entries 0..7 in words 0, 1 and 8..15 in 2, 3.
// The f16 with high byte 0x64 over such a byte b is 1024 + b, exactly, so the value is that
// minus 1152.
constexpr uint32_t iq4_biased_word(int i) {
  return iq4xs::pack4(quant::kIQ4Values[4 * i] + 128, quant::kIQ4Values[4 * i + 1] + 128,
                      quant::kIQ4Values[4 * i + 2] + 128, quant::kIQ4Values[4 * i + 3] + 128);
}
constexpr uint32_t kIq4Biased[4] = {iq4_biased_word(0), iq4_biased_word(1), iq4_biased_word(2), iq4_biased_word(3)};

// The code-book values + 128 of the eight nibbles of IQ4_XS tile word w: byte i of half[h] is
// nibble 4h + i's. PRMT looks a byte up among 8 by a selector nibble's low 3 bits (its top bit,
// cleared here, would replicate the picked byte's sign instead): once among entries 0..7, once
// among 8..15. The nibbles' top bits sit at bit 7 of w << 4's bytes (even nibbles) and of w's
// (odd ones); PRMT in sign mode spreads them into a byte mask that picks between the two
// lookups. Instructions per word (four fragment registers): an AND, two shifts, then per half
// two lookups, the mask and a LOP3: 11, plus per register the PRMT to f16, a subtract and the
// scale's multiply (deq_wgmma_iq4xs.cu): 5.75 per fragment register.
DF_WGMMA_TV_HD uint32_t iq4xs_pick(uint32_t sel, uint32_t top) {
  const uint32_t lo = iq4xs::prmt(kIq4Biased[0], kIq4Biased[1], sel);  // (PRMT reads sel's low 16 bits)
  const uint32_t hi = iq4xs::prmt(kIq4Biased[2], kIq4Biased[3], sel);
  return (lo & ~top) | (hi & top);
}
DF_WGMMA_TV_HD void iq4xs_biased_values(uint32_t w, uint32_t (&half)[2]) {
  const uint32_t idx = w & 0x77777777u, w4 = w << 4;
  // top: 0xFF in byte i where nibble 4h + i is >= 8.
  half[0] = iq4xs_pick(idx, iq4xs::prmt(w4, w, 0xD9C8u));
  half[1] = iq4xs_pick(idx >> 16, iq4xs::prmt(w4, w, 0xFBEAu));
}

// Q5_K: the 5-bit values of k16 step s (< 4) in quant word w (< 4) of a lane's 16 bytes of a
// pair (row g + 8 (w / 2), elements 4 (w % 2) .. + 3 of the sub-block) with f its 4 high-bit
// bytes: s < 2 (the low sub-block) bytes v; s >= 2 (the high one) bytes 8 v
// (quant/q5k_tiles.h's operands). The f16 with high byte 0x64 over v is 1024 + v, the one with
// 0x58 over 8 v is 128 + v (0x58: 2^7, spacing 1/8), exactly.
DF_WGMMA_TV_HD uint32_t q5k_step_bytes(uint32_t q, uint32_t f, int s, int w) {
  if (s < 2) return q5k_low_operand(q);
  switch (w) {
    case 0: return q5k_high_operand<0>(q, f);
    case 1: return q5k_high_operand<1>(q, f);
    case 2: return q5k_high_operand<2>(q, f);
    default: return q5k_high_operand<3>(q, f);
  }
}
// The f16 high byte over step s's bytes and the value that then comes off.
DF_WGMMA_TV_HD constexpr uint32_t q5k_step_high_byte(int s) { return s < 2 ? 0x64u : 0x58u; }
DF_WGMMA_TV_HD constexpr uint16_t q5k_step_offset_bits(int s) { return s < 2 ? 0x6400 : 0x5800; }  // f16 1024, 128

}  // namespace df::cuda::wgmma
