// Layouts of the f16 operands of Hopper's warpgroup mma (wgmma) in deq_wgmma.cu, plain C++ so
// that tests/test_wgmma_layout.cpp checks them on a CPU against the PTX ISA's rules.
//
// The B operand (the f16 activations, row = activation row) sits in shared memory K-major
// (imm-trans-b 0), each row 64 elements of k (one 64-element slice) = 128 bytes, rows one after
// another. That is the canonical layout of the 128-byte swizzle mode
// (PTX ISA "Shared Memory Matrix Layout": a K-major swizzle atom is 8 rows x 128 bytes): within
// each 1024-byte atom of 8 rows, the 16-byte chunk j of row r sits at chunk j ^ (r % 8). The
// hardware applies that XOR to address bits [4,7) from bits [7,10) of the absolute shared
// address, so a tile must start on a 1024-byte boundary (then the descriptor's base offset is 0).
//
// Descriptor (PTX ISA "Matrix Descriptor Format"; encode(x) = (x & 0x3FFFF) >> 4):
//   bits 0-13 encode(start address), 16-29 encode(leading byte offset), 32-45 encode(stride byte
//   offset), 49-51 base offset, 62-63 swizzle mode (1 = 128-byte).
//   Leading byte offset: not used by swizzled K-major layouts (the ISA says "assumed 1"): 1.
//   Stride byte offset: from one group of 8 rows to the next: 1024 (rows are dense).
//   A k16 step kk inside the 64-element row starts 32 kk bytes further (start address only):
//   the swizzle is applied to the final address, so the chunks it reads are (2 kk + j) ^ (r % 8).
#pragma once
#include <cstdint>

#ifdef __CUDACC__
#define DF_WGMMA_HD __host__ __device__
#else
#define DF_WGMMA_HD
#endif

namespace df::cuda::wgmma {

constexpr uint32_t kRowElems = 64;    // f16 elements of k a row holds (one slice)
constexpr uint32_t kRowBytes = 128;   // = the 128-byte swizzle's width
constexpr uint32_t kAtomBytes = 1024; // 8 rows: the swizzle pattern repeats here; tiles start on it
constexpr uint32_t kStepBytes = 32;   // one k16 step of an instruction along a row

// Byte offset of element (row, k) (k < 64) from the start of a tile.
DF_WGMMA_HD constexpr uint32_t sw128_offset(uint32_t row, uint32_t k) {
  return row * kRowBytes + (((k / 8) ^ (row % 8)) * 16) + (k % 8) * 2;
}

// Descriptor of the operand whose k16 step kk of row 0 starts at shared address tile + 32 kk
// (tile 1024-byte aligned).
DF_WGMMA_HD constexpr uint64_t sw128_desc(uint32_t addr) {
  constexpr uint64_t kLbo = 16, kSbo = kAtomBytes, kMode128 = 1;
  return uint64_t((addr & 0x3FFFF) >> 4) | ((kLbo >> 4) << 16) | ((kSbo >> 4) << 32) | (kMode128 << 62);
}

// The A operand (the weights) comes from registers: in a k16 step, lane 4 g + c of a warp holds
// rows g and g + 8 of its 16, k = 2c, 2c + 1 (registers 0, 1) and 2c + 8, 2c + 9 (registers 2, 3)
// (PTX ISA, wgmma register fragments for A; mma.sync m16n8k16's layout). A Q4_K tile lane
// (quant/q4k_tiles.h) holds, for a 64-element slice, rows g and g + 8, elements 8c .. 8c + 7 (low
// nibbles) and 32 + 8c .. + 7 (high nibbles). The kernel lets k16 step s take the quant bytes
// 4 (s % 2) .. + 3 of those, low nibbles for s < 2, high ones after: natural element
// e = 32 (s / 2) + 8c + 4 (s % 2) + 2h + p sits at fragment position 16 s + 8 h + 2 c + p
// (h: registers 0/1 or 2/3, p: the half of the register). A dot product does not depend on the
// order of k, so the activations are stored in the same order (to_half_rows_scaled's fragment
// order) and the weights need no shuffling. Returns that position for e < 64.
DF_WGMMA_HD constexpr uint32_t fragment_k_position(uint32_t e) {
  const uint32_t s = 2 * (e / 32) + (e % 8) / 4, c = (e % 32) / 8, h = (e % 4) / 2, p = e % 2;
  return 16 * s + 8 * h + 2 * c + p;
}

}  // namespace df::cuda::wgmma
