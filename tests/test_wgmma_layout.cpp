// The operand layouts of deq_wgmma.cu (backend/cuda/wgmma_layout.h) against the PTX ISA's rules,
// computed here independently, on a CPU (no CUDA runtime): where the kernel's copies put element
// (row, k), and where the tensor core reads it back through the descriptors the kernel builds;
// the order of k that lets the register A fragments come straight from the tile layout.
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

// Where deq_wgmma.cu copies element (row, k) of a tile starting at `tile` (1024-byte aligned)
// equals where a wgmma of k16 step k / 16 reads it, for 64-, 128- and 256-row operands (its B
// has 128), at tile addresses across the 227 KiB window.
TEST(WgmmaLayout, StoresMatchTheDescriptorReads) {
  for (uint32_t tile : {0u, 1024u, 8192u, 32768u, 194560u, 210944u, 231424u - 32768u}) {
    for (uint32_t rows : {64u, 128u, 256u}) {
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

// The A fragments come from registers: lane 4 g + c of a warp dequantizes its Q4_K tile lane's
// 16 quant bytes of a slice (quant/q4k_tiles.h: rows g and g + 8, bytes 8c .. 8c + 7 of the
// slice's 32-byte group, whose low nibbles are elements 8c + b and high nibbles 32 + 8c + b) and
// gives k16 step s the bytes 4 (s % 2) + 2h + p (low nibbles for s < 2), register 2h + row as half
// p. The PTX ISA puts register 2h + row, half p of a k16 step at k = 2c + 8h + p. So the
// activations must hold natural element e at fragment_k_position(e) = 16 s + 2c + 8h + p, a
// permutation of each 64-element slice.
TEST(WgmmaLayout, FragmentOrderMatchesTheTileLanes) {
  std::set<uint32_t> positions;
  for (uint32_t c = 0; c < 4; ++c)
    for (uint32_t s = 0; s < 4; ++s)
      for (uint32_t h = 0; h < 2; ++h)
        for (uint32_t p = 0; p < 2; ++p) {
          const uint32_t byte = 4 * (s % 2) + 2 * h + p;  // of the lane's 8 bytes of a row
          const uint32_t e = 32 * (s / 2) + 8 * c + byte;
          const uint32_t k = 16 * s + 2 * c + 8 * h + p;
          EXPECT_EQ(cuda::wgmma::fragment_k_position(e), k) << "c " << c << " s " << s << " h " << h << " p " << p;
          positions.insert(cuda::wgmma::fragment_k_position(e));
        }
  EXPECT_EQ(positions.size(), 64u);
  EXPECT_EQ(*positions.rbegin(), 63u);
  // to_half_rows' stores: elements 4i, 4i + 1 at an even position, 4i + 2, 4i + 3 eight further.
  for (uint32_t e = 0; e < 64; e += 4) {
    const uint32_t at = cuda::wgmma::fragment_k_position(e);
    EXPECT_EQ(at % 2, 0u);
    EXPECT_EQ(cuda::wgmma::fragment_k_position(e + 1), at + 1);
    EXPECT_EQ(cuda::wgmma::fragment_k_position(e + 2), at + 8);
    EXPECT_EQ(cuda::wgmma::fragment_k_position(e + 3), at + 9);
  }
}

}  // namespace
}  // namespace df
