// How deq_wgmma_q6k.cu takes Q6_K tiles (quant/q6k_tiles.h) into wgmma's register A fragments,
// and the order of k the activations are stored in to match. Plain C++, so that
// tests/test_wgmma_q6k_layout.cpp checks it on a CPU against q6k_to_tiles and the PTX ISA.
//
// A tile lane (g, c) holds, for rows g and g + 8, the bytes in slots 4c .. 4c + 3 of every
// 16-element group of the super-block (slot 4c + i = group element q6k_slot_elem(sb, 4c + i)),
// in six 16-byte words: ql word 3 hh + t (hh < 2, t < 2) is, for p < 2 and row h, the 4 bytes
// 4 (2p + h) of group 8 hh + 2p + t's ql (low nibbles) which are also group 8 hh + 4 + 2p + t's
// (high nibbles); qh word 3 hh + 2's bytes 8t + 4h .. + 3 hold the two high bits of groups
// 8 hh + t + 2m at bits 2m (m < 4). So slice j = 2 hh + t (64 elements) takes the four groups
// 8 hh + t + 2m, one per k16 step m, and all of a lane's bytes for it lie in one ql word and
// half a qh word: step m's 6-bit values of row h are, per byte, bits 4 (m / 2) .. + 3 of word
// 2 (m % 2) + h of the ql word and bits 2m, 2m + 1 of word h of the qh half. Each step uses one
// scale a row (its group's), and no value moves between bytes: byte i of the word goes to the
// fragment (registers 0, 1 for i < 2, rows g and g + 8; 2, 3 for i >= 2) at k = 2c + 8 (i / 2)
// + i % 2 (PTX ISA, wgmma register fragments for A), nibble and qh extraction are the same shift
// and mask for all four bytes, and the byte-to-f16 step is Q4_K's PRMT with 0x64.
//
// A dot product does not depend on the order of k, so the activations hold element e of
// super-block sb at q6k_fragment_k_position(sb, e) (to_half_rows_scaled's HalfOrder::kQ6k). The
// tile layout rotates slots by 2 in odd super-blocks, so the order depends on sb's parity.
#pragma once
#include <cstdint>

#ifdef __CUDACC__
#define DF_WGMMA_Q6K_HD __host__ __device__
#else
#define DF_WGMMA_Q6K_HD
#endif

namespace df::cuda::wgmma {

// The group (16 elements, one scale) that k16 step m of slice j of a super-block takes.
DF_WGMMA_Q6K_HD constexpr int q6k_step_group(int j, int m) { return 8 * (j / 2) + j % 2 + 2 * m; }
// The 512-byte ql word of a tile super-block that slice j reads (a lane's 16 bytes at 16 lane).
DF_WGMMA_Q6K_HD constexpr int q6k_slice_ql_word(int j) { return 3 * (j / 2) + j % 2; }
// Its qh word (its bytes 8 (j % 2) .. + 7 of the lane's 16 are the slice's).
DF_WGMMA_Q6K_HD constexpr int q6k_slice_qh_word(int j) { return 3 * (j / 2) + 2; }
// Where group q's scale of row g + 8h sits in a tile super-block's 256 scale bytes, less 16 g
// + 4 h (quant/q6k_tiles.h: slot (q + rot) % 16 of the rotated order, two 128-byte halves).
DF_WGMMA_Q6K_HD constexpr int q6k_scale_offset(int64_t sb, int q) {
  const int slot = (q + 2 * int(sb & 1)) % 16;
  return 128 * (slot / 8) + 8 * ((slot / 4) % 2) + slot % 4;
}

// Where element e (< 256) of super-block sb sits in the activations' order of that super-block:
// slice j, step m, then the fragment's k of slot 4c + i.
DF_WGMMA_Q6K_HD constexpr uint32_t q6k_fragment_k_position(int64_t sb, uint32_t e) {
  const uint32_t q = e / 16, hh = q / 8, t = q % 2, m = (q % 8) / 2;
  const uint32_t slot = (e % 16 + 2 * uint32_t(sb & 1)) % 16, c = slot / 4, i = slot % 4;
  return 64 * (2 * hh + t) + 16 * m + 8 * (i / 2) + 2 * c + i % 2;
}

}  // namespace df::cuda::wgmma
