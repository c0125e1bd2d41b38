// The shared-memory layout of deq_wgmma.cu's operands (backend/cuda/wgmma_layout.h) against the
// PTX ISA's rules, computed here independently, on a CPU (no CUDA runtime): where the kernel's
// stores and copies put element (row, k), and where the tensor core reads it back through the
// descriptors the kernel builds.
//
// The hardware side, from the ISA ("Matrix Descriptor Format", "Shared Memory Matrix Layout"):
// a descriptor's fields are start address, leading and stride byte offsets (each >> 4, 14
// bits), base offset and swizzle mode. A K-major operand in the 128-byte swizzle mode is made of
// swizzle atoms of 8 rows x 128 bytes; row m of the instruction's operand is in atom m / 8,
// atoms stride-byte-offset apart, row m % 8 of it 128 bytes in; element j of the k16 step is 2 j
// bytes further. The swizzle then permutes the 16-byte units of the absolute address: bits
// [4,7) ^= bits [7,10) (the pattern repeating every 1024 bytes; base offset 0 where operands
// start on that boundary, as here).
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "backend/cuda/wgmma_layout.h"

namespace df {
namespace {

using cuda::wgmma::sw128_desc;
using cuda::wgmma::sw128_offset;

struct Desc {
  uint32_t start, lbo, sbo, base_offset, mode;
};

Desc decode(uint64_t d) {
  auto field = [&](int lo) { return uint32_t((d >> lo) & 0x3FFF) << 4; };
  return Desc{field(0), field(16), field(32), uint32_t((d >> 49) & 7), uint32_t(d >> 62)};
}

// The shared address the tensor core reads for element (m, j) (j < 16) of a K-major f16 operand
// in the 128-byte swizzle mode, from the descriptor alone.
uint32_t hw_address(const Desc& d, uint32_t m, uint32_t j) {
  EXPECT_EQ(d.mode, 1u) << "128-byte swizzle";
  EXPECT_EQ(d.base_offset, 0u);
  const uint32_t linear = d.start + (m / 8) * d.sbo + (m % 8) * 128 + 2 * j;
  return linear ^ (((linear >> 7) & 7) << 4);
}

// Where deq_wgmma.cu stores element (row, k) of a tile starting at `tile` (1024-byte aligned)
// equals where a wgmma of k16 step k / 16 reads it, for a 64-row A (at each of the two
// consumers' offsets) and a 256-row B operand, at tile addresses across the 227 KiB window.
TEST(WgmmaLayout, StoresMatchTheDescriptorReads) {
  for (uint32_t tile : {0u, 1024u, 8192u, 32768u, 194560u, 210944u, 231424u - 32768u}) {
    for (uint32_t rows : {64u, 256u}) {
      for (uint32_t kk = 0; kk < 4; ++kk) {
        const Desc d = decode(sw128_desc(tile + 32 * kk));
        EXPECT_EQ(d.start, tile + 32 * kk);
        EXPECT_EQ(d.sbo, 1024u) << "8 dense rows of 128 bytes between row groups";
        for (uint32_t m = 0; m < rows; ++m)
          for (uint32_t j = 0; j < 16; ++j)
            ASSERT_EQ(tile + sw128_offset(m, 16 * kk + j), hw_address(d, m, j))
                << "tile " << tile << " row " << m << " k " << 16 * kk + j;
      }
    }
  }
}

// The layout is a permutation of a dense tile, and each 16-byte unit holds 8 consecutive k of
// one row in order (what a 16-byte cp.async or st.shared writes).
TEST(WgmmaLayout, DenseAndSixteenByteChunks) {
  const uint32_t rows = 256;
  std::set<uint32_t> seen;
  for (uint32_t r = 0; r < rows; ++r)
    for (uint32_t k = 0; k < 64; ++k) {
      const uint32_t off = sw128_offset(r, k);
      ASSERT_LT(off, rows * 128);
      ASSERT_EQ(off % 2, 0u);
      ASSERT_TRUE(seen.insert(off).second) << "row " << r << " k " << k;
      ASSERT_EQ(off, sw128_offset(r, k - k % 8) + 2 * (k % 8)) << "row " << r << " k " << k;
      ASSERT_EQ(sw128_offset(r, k - k % 8) % 16, 0u);
    }
  EXPECT_EQ(seen.size(), size_t(rows) * 64);
}

// The producer's 16-byte stores of dequantized weights: a warp's lanes l = 4 g + c write rows
// g (+ 8) of a tile, chunk c (low nibbles) or 4 + c (high nibbles). Each such instruction should
// take the minimum 4 shared-memory wavefronts (each 32-bank set of 128 bytes hit once per
// wavefront): every 4-bank group is hit by exactly 4 lanes.
TEST(WgmmaLayout, DequantStoresFreeOfBankConflicts) {
  for (uint32_t t = 0; t < 8; ++t)
    for (uint32_t hr = 0; hr < 2; ++hr)
      for (uint32_t high = 0; high < 2; ++high) {
        std::vector<int> per_group(8, 0);
        for (uint32_t l = 0; l < 32; ++l) {
          const uint32_t row = 16 * t + l / 4 + 8 * hr, k = 32 * high + 8 * (l % 4);
          ++per_group[(sw128_offset(row, k) / 16) % 8];
        }
        for (int n : per_group) EXPECT_EQ(n, 4) << "tile " << t << " rows +" << 8 * hr << " high " << high;
      }
}

}  // namespace
}  // namespace df
