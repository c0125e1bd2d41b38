// Shared-memory layout of the f16 operands of Hopper's warpgroup mma (wgmma) in deq_wgmma.cu,
// plain C++ so that tests/test_wgmma_layout.cpp checks it on a CPU against the PTX ISA's rules.
//
// Both operands are K-major (imm-trans 0): A = the dequantized weights (row = output), B = the f16
// activations (row = activation row), each row 64 elements of k (one 64-element slice) = 128
// bytes, rows one after another. That is the canonical layout of the 128-byte swizzle mode
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

}  // namespace df::cuda::wgmma
