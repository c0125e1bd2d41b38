// How deq_wgmma_q6k.cu builds its register A fragments from Q6_K tiles, checked on a CPU against
// independent facts: GGUF Q6_K rows (ggml's bit layout, and the library's dequantize_row),
// quant/q6k_tiles.h's q6k_to_tiles, and the PTX ISA's rule for wgmma's A fragments in a k16 step
// (lane 4g + c, register r, half p: row g + 8 (r % 2), k = 2c + 8 (r / 2) + p).
//
// kernel_fragments below is the kernel's byte selection written out in scalar C++ (the same
// words, shifts, masks, scale slots and ring-entry copy as dequant and load_w), so these tests
// fail if the kernel's selection, the position function (wgmma_q6k_layout.h
// q6k_fragment_k_position, the activations' order) or the tile layout disagree.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/cuda/wgmma_q6k_layout.h"
#include "quant/dequant.h"
#include "quant/q6k_tiles.h"
#include "quant/types.h"
#include "util/half.h"

namespace df {
namespace {

using cuda::wgmma::q6k_fragment_k_position;

constexpr int kSbBytes = 210, kRows = 16;

// ggml's Q6_K super-block: element l of half n (l < 128) takes the nibble l / 64 of ql[64 n +
// l % 64] and bits 2 (l / 32), + 1 of qh[32 n + l % 32]; scale (int8) l / 16 of the super-block.
void set_q(uint8_t* blk, int e, int q) {
  const int n = e / 128, l = e % 128;
  uint8_t& ql = blk[64 * n + l % 64];
  uint8_t& qh = blk[128 + 32 * n + l % 32];
  const int ns = 4 * (l / 64), hs = 2 * (l / 32);
  ql = uint8_t((ql & ~(0xF << ns)) | ((q & 0xF) << ns));
  qh = uint8_t((qh & ~(3 << hs)) | ((q >> 4) << hs));
}

uint32_t word_at(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// What one lane holds after dequant's loads for slice j of super-block sb: q[m][r][p] the 6-bit
// value in k16 step m, register r, half p; sc[m][h] the int8 scale step m multiplies row g + 8h
// by (formed by lane 4g + m, shuffled), d[h] row g + 8h's f16 d.
struct Fragments {
  int q[4][4][2];
  int sc[4][2];
  uint16_t d[2];
};

// tile_sb: one tile super-block (3360 bytes) as q6k_to_tiles writes it.
Fragments kernel_fragments(const uint8_t* tile_sb, int64_t sb, int j, int lane) {
  // load_w: the ring entry of the super-block (qh words of slices 0 and 2, then scales and d).
  uint8_t entry[2 * kQ6kTileQuantStride + kQ6kTileBytes - kQ6kTileScales];
  std::memcpy(entry, tile_sb + kQ6kTileQuantStride * cuda::wgmma::q6k_slice_qh_word(0), kQ6kTileQuantStride);
  std::memcpy(entry + kQ6kTileQuantStride, tile_sb + kQ6kTileQuantStride * cuda::wgmma::q6k_slice_qh_word(2),
              kQ6kTileQuantStride);
  std::memcpy(entry + 2 * kQ6kTileQuantStride, tile_sb + kQ6kTileScales, kQ6kTileBytes - kQ6kTileScales);
  const uint8_t* hdr = entry + 2 * kQ6kTileQuantStride;
  const int g = lane / 4;
  Fragments f{};
  // dequant: the ql word (the stage's copy of word q6k_slice_ql_word(j)) and the qh half.
  const uint8_t* qlp = tile_sb + kQ6kTileQuantStride * cuda::wgmma::q6k_slice_ql_word(j) + 16 * lane;
  const uint32_t ql[4] = {word_at(qlp), word_at(qlp + 4), word_at(qlp + 8), word_at(qlp + 12)};
  const uint8_t* qhp = entry + (j / 2) * kQ6kTileQuantStride + 16 * lane + 8 * (j % 2);
  const uint32_t qh[2] = {word_at(qhp), word_at(qhp + 4)};
  for (int m = 0; m < 4; ++m) {
    const int c = m;  // the lane of this row pair that forms step m's scales
    const uint8_t* scp = hdr + cuda::wgmma::q6k_scale_offset(sb, cuda::wgmma::q6k_step_group(j, c)) + 16 * g;
    f.sc[m][0] = int(int8_t(scp[0]));
    f.sc[m][1] = int(int8_t(scp[4]));
    const uint32_t qlw[2] = {m % 2 ? ql[2] : ql[0], m % 2 ? ql[3] : ql[1]};
    for (int h = 0; h < 2; ++h) {
      const uint32_t lo = (qlw[h] >> (4 * (m / 2))) & 0x0F0F0F0Fu;
      const uint32_t hi = (m < 2 ? qh[h] << (4 - 2 * m) : qh[h] >> (2 * m - 4)) & 0x30303030u;
      const uint32_t v = lo | hi;
      // PRMT 0x4140 gives bytes 0, 1 (register h), 0x4342 bytes 2, 3 (register 2 + h).
      for (int i = 0; i < 4; ++i) f.q[m][2 * (i / 2) + h][i % 2] = int((v >> (8 * i)) & 0xFF);
    }
  }
  for (int h = 0; h < 2; ++h) std::memcpy(&f.d[h], hdr + (kQ6kTileD - kQ6kTileScales) + 4 * g + 2 * h, 2);
  return f;
}

// The position function is a permutation of each super-block whose slice j (positions 64 j ..)
// holds the four groups q6k_step_group(j, m), and it keeps to_half_rows' pairs: elements 4i,
// 4i + 1 at an even position and the next, 4i + 2, 4i + 3 likewise.
TEST(WgmmaQ6kLayout, PositionsPermuteEachSuperBlockBySlice) {
  for (int64_t sb : {0, 1, 2, 7}) {
    std::set<uint32_t> seen;
    for (uint32_t e = 0; e < 256; ++e) {
      const uint32_t p = q6k_fragment_k_position(sb, e);
      ASSERT_LT(p, 256u);
      ASSERT_TRUE(seen.insert(p).second) << "sb " << sb << " e " << e;
      const int j = int(p / 64), m = int(p % 64) / 16;
      EXPECT_EQ(int(e / 16), cuda::wgmma::q6k_step_group(j, m)) << "sb " << sb << " e " << e;
    }
    for (uint32_t e = 0; e < 256; e += 4) {
      const uint32_t a = q6k_fragment_k_position(sb, e), b = q6k_fragment_k_position(sb, e + 2);
      EXPECT_EQ(a % 2, 0u);
      EXPECT_EQ(b % 2, 0u);
      EXPECT_EQ(q6k_fragment_k_position(sb, e + 1), a + 1);
      EXPECT_EQ(q6k_fragment_k_position(sb, e + 3), b + 1);
    }
  }
}

// Which element each (lane, k16 step, register, half) of the kernel's fragments holds, found
// without the position function: in pass b every element of the GGUF rows gets q = 63 where
// bit b of its tag (super-block, row, element) is set and 0 elsewhere, so the fragments' values
// over 14 passes spell each fragment's tag. Every element must turn up exactly once, in the row
// the PTX rule gives the register, at the activations' position 64 j + 16 m + k.
TEST(WgmmaQ6kLayout, FragmentsHoldTheElementsThePositionFunctionSays) {
  constexpr int n_sb = 3;  // both parities, and a super-block past the first pair
  constexpr int kTagBits = 14;
  const size_t row_bytes = size_t(kSbBytes) * n_sb;
  std::vector<uint8_t> src(kRows * row_bytes), tiles(q6k_tiles_bytes(kRows, n_sb));
  // tag[sb][j][lane][m][r][p]
  std::vector<uint32_t> tag(size_t(n_sb) * 4 * 32 * 4 * 4 * 2, 0);
  for (int b = 0; b < kTagBits; ++b) {
    std::fill(src.begin(), src.end(), uint8_t(0));
    for (int r = 0; r < kRows; ++r)
      for (int sb = 0; sb < n_sb; ++sb)
        for (int e = 0; e < 256; ++e) {
          const uint32_t t = (uint32_t(sb) * kRows + uint32_t(r)) * 256 + uint32_t(e);
          set_q(src.data() + size_t(r) * row_bytes + size_t(sb) * kSbBytes, e, (t >> b) & 1 ? 63 : 0);
        }
    q6k_to_tiles(src.data(), kRows, n_sb, tiles.data());
    size_t i = 0;
    for (int sb = 0; sb < n_sb; ++sb)
      for (int j = 0; j < 4; ++j)
        for (int lane = 0; lane < 32; ++lane) {
          const Fragments f = kernel_fragments(tiles.data() + size_t(sb) * kQ6kTileBytes, sb, j, lane);
          for (int m = 0; m < 4; ++m)
            for (int r = 0; r < 4; ++r)
              for (int p = 0; p < 2; ++p, ++i) {
                const int q = f.q[m][r][p];
                ASSERT_TRUE(q == 0 || q == 63) << "a 6-bit value mixes elements: " << q << " (pass " << b << ")";
                if (q == 63) tag[i] |= 1u << b;
              }
        }
  }
  std::set<uint32_t> seen;
  size_t i = 0;
  for (int sb = 0; sb < n_sb; ++sb)
    for (int j = 0; j < 4; ++j)
      for (int lane = 0; lane < 32; ++lane)
        for (int m = 0; m < 4; ++m)
          for (int r = 0; r < 4; ++r)
            for (int p = 0; p < 2; ++p, ++i) {
              const int g = lane / 4, c = lane % 4;
              const uint32_t t = tag[i], e = t % 256, row = (t / 256) % kRows, from_sb = t / 256 / kRows;
              const std::string where = "sb " + std::to_string(sb) + " slice " + std::to_string(j) + " lane " +
                                        std::to_string(lane) + " step " + std::to_string(m) + " register " +
                                        std::to_string(r) + " half " + std::to_string(p);
              ASSERT_TRUE(seen.insert(t).second) << where << ": element seen twice";
              EXPECT_EQ(from_sb, uint32_t(sb)) << where;
              EXPECT_EQ(row, uint32_t(g + 8 * (r % 2))) << where;  // PTX: odd registers are row g + 8
              const uint32_t k = uint32_t(2 * c + 8 * (r / 2) + p);    // PTX: the fragment's k in the step
              EXPECT_EQ(q6k_fragment_k_position(sb, e), uint32_t(64 * j + 16 * m) + k) << where << " element " << e;
            }
  EXPECT_EQ(seen.size(), size_t(n_sb) * kRows * 256);
}

// Values: random GGUF super-blocks (random quants, signed scales, d) through q6k_to_tiles and the
// kernel's selection give, at each fragment, (q - 32) sc d equal to the library's dequantized
// element at the position function's inverse (exact: 11 x 8 x 6 bits fit a float), with the
// scale of the element's group and the d of the fragment's row; and the kernel's f16 weight
// (q - 32) half(d sc) is within (2^-10 + 2^-22) |w| + 2^-19 of it (the GPU test's bound).
TEST(WgmmaQ6kLayout, FragmentValuesEqualTheDequantizedRows) {
  std::mt19937 rng(61);
  constexpr int n_sb = 4;
  const size_t row_bytes = size_t(kSbBytes) * n_sb;
  std::vector<uint8_t> src(kRows * row_bytes);
  for (auto& v : src) v = uint8_t(rng());
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  for (int r = 0; r < kRows; ++r)
    for (int sb = 0; sb < n_sb; ++sb) {
      const uint16_t d = f32_to_f16(normal(rng));
      std::memcpy(src.data() + size_t(r) * row_bytes + size_t(sb) * kSbBytes + 208, &d, 2);
    }
  std::vector<float> W(size_t(kRows) * 256 * n_sb);
  for (int r = 0; r < kRows; ++r) dequantize_row(GgmlType::Q6_K, src.data() + size_t(r) * row_bytes, W.data() + size_t(r) * 256 * n_sb, 256 * n_sb);
  std::vector<uint8_t> tiles(q6k_tiles_bytes(kRows, n_sb));
  q6k_to_tiles(src.data(), kRows, n_sb, tiles.data());
  for (int sb = 0; sb < n_sb; ++sb) {
    uint32_t element_at[256];
    for (uint32_t e = 0; e < 256; ++e) element_at[q6k_fragment_k_position(sb, e)] = e;
    for (int j = 0; j < 4; ++j)
      for (int lane = 0; lane < 32; ++lane) {
        const Fragments f = kernel_fragments(tiles.data() + size_t(sb) * kQ6kTileBytes, sb, j, lane);
        const int g = lane / 4, c = lane % 4;
        for (int m = 0; m < 4; ++m)
          for (int r = 0; r < 4; ++r)
            for (int p = 0; p < 2; ++p) {
              const int h = r % 2, row = g + 8 * h;
              const uint32_t e = element_at[64 * j + 16 * m + 2 * c + 8 * (r / 2) + p];
              const uint8_t* blk = src.data() + size_t(row) * row_bytes + size_t(sb) * kSbBytes;
              uint16_t d_row;
              std::memcpy(&d_row, blk + 208, 2);
              ASSERT_EQ(f.sc[m][h], int(int8_t(blk[192 + e / 16]))) << "sb " << sb << " row " << row << " e " << e;
              ASSERT_EQ(f.d[h], d_row) << "sb " << sb << " row " << row;
              const double d = f16_to_f32(f.d[h]);
              const double w = W[size_t(row) * 256 * n_sb + size_t(sb) * 256 + e];
              ASSERT_EQ(double(f.q[m][r][p] - 32) * f.sc[m][h] * d, w) << "sb " << sb << " row " << row << " e " << e;
              const float s16 = f16_to_f32(f32_to_f16(float(d * f.sc[m][h])));
              const double w16 = f16_to_f32(f32_to_f16(float(f.q[m][r][p] - 32) * s16));
              EXPECT_LE(std::fabs(w16 - w), (0x1p-10 + 0x1p-22) * std::fabs(w) + 0x1p-19) << "e " << e;
            }
      }
  }
}

}  // namespace
}  // namespace df
