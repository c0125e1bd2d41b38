// How deq_wgmma_q80.cu builds its register A fragments from Q8_0 tiles, checked on a CPU against
// independent facts: GGUF Q8_0 rows (blocks of an f16 d and 32 int8 quants, and the library's
// dequantize_row), quant/q80_tiles.h's q80_to_tiles, and the PTX ISA's rule for wgmma's A
// fragments in a k16 step (lane 4g + c, register r, half p: row g + 8 (r % 2), k = 2c + 8 (r / 2)
// + p) and for PRMT (byte n of the result is byte selector-nibble n of {b, a}).
//
// kernel_fragments below is the kernel's selection and arithmetic written out in scalar C++ (the
// same block words, XOR, PRMT selectors, f16 constant, d word and ring-entry copy as dequant and
// load_w), so these tests fail if the kernel's selection, the position function
// (wgmma_q80_layout.h q80_fragment_k_position, the activations' order) or the tile layout
// disagree; MutantsFail shows that they do fail for a wrong selection or a wrong order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/cuda/wgmma_layout.h"
#include "backend/cuda/wgmma_q80_layout.h"
#include "quant/dequant.h"
#include "quant/q80_tiles.h"
#include "quant/types.h"
#include "util/half.h"

namespace df {
namespace {

using cuda::wgmma::q80_fragment_k_position;

constexpr int kBlockBytes = 34, kSbBytes = 8 * kBlockBytes, kRows = 16;
constexpr uint16_t kOne = 0x3C00;  // f16 1.0

uint32_t word_at(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// PTX prmt.b32 (default mode): byte n of the result is byte (sel >> 4n) & 7 of the 8 bytes
// {b, a} (a's bytes 0..3, then b's).
uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  const uint64_t both = uint64_t(a) | uint64_t(b) << 32;
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) r |= uint32_t((both >> (8 * ((sel >> (4 * n)) & 7))) & 0xFF) << (8 * n);
  return r;
}

// Ways to get the kernel's selection wrong, for MutantsFail (all false: the kernel's).
struct Mutation {
  bool swap_u = false;     // step 2 jj + u takes word 2h + 1 - u
  bool swap_h = false;     // row h takes the other row's word
  bool swap_prmt = false;  // bytes 2, 3 to register h, bytes 0, 1 to 2 + h
  bool swap_d = false;     // block jj multiplied by the other block's d
};

// What one lane holds after dequant for slice js of a super-block: q[s][r][p] the integer value
// (1024 + (byte ^ 0x80)) - 1152 in k16 step s, register r, half p; d[s][h] the f16 d step s
// multiplies row g + 8h by; w[s][r][p] the f16 weight, half(d) q rounded once (hmul2).
struct Fragments {
  int q[4][4][2];
  uint16_t d[4][2];
  float w[4][4][2];
};

// tile_sb: one tile super-block (4352 bytes) as q80_to_tiles writes it.
Fragments kernel_fragments(const uint8_t* tile_sb, int js, int lane, const Mutation& mu = {}) {
  // load_w: the stage's two block words (blocks 2 js, 2 js + 1) and the ring entry (all d).
  uint8_t entry[kQ80TileBytes - kQ80TileScales];
  std::memcpy(entry, tile_sb + kQ80TileScales, sizeof(entry));
  const int g = lane / 4;
  Fragments f{};
  const float k1152 = f16_to_f32(0x6480);
  const uint8_t* dp = entry + cuda::wgmma::q80_scale_offset(g, 2 * js, 0);
  const uint32_t dv[2] = {word_at(dp), word_at(dp + 4)};
  for (int jj = 0; jj < 2; ++jj) {
    const uint8_t* qp = tile_sb + kQ80TileBlockStride * (2 * js + jj) + 16 * lane;
    const uint32_t words[4] = {word_at(qp), word_at(qp + 4), word_at(qp + 8), word_at(qp + 12)};
    const uint32_t d2 = dv[mu.swap_d ? 1 - jj : jj];
    for (int u = 0; u < 2; ++u)
      for (int h = 0; h < 2; ++h) {
        const int s = 2 * jj + u;
        const uint32_t v = words[2 * (mu.swap_h ? 1 - h : h) + (mu.swap_u ? 1 - u : u)] ^ 0x80808080u;
        const uint16_t d = uint16_t(d2 >> (16 * h));
        f.d[s][h] = d;
        const uint32_t pairs[2] = {prmt(v, 0x64u, mu.swap_prmt ? 0x4342 : 0x4140),
                                   prmt(v, 0x64u, mu.swap_prmt ? 0x4140 : 0x4342)};
        for (int i = 0; i < 2; ++i)  // register h (i = 0), 2 + h (i = 1)
          for (int p = 0; p < 2; ++p) {
            const float q = f16_to_f32(uint16_t(pairs[i] >> (16 * p))) - k1152;  // exact: integers < 2048
            f.q[s][2 * i + h][p] = int(q);
            // hmul2: the exact product (8 x 11 significant bits, exact in a float) rounded once.
            f.w[s][2 * i + h][p] = f16_to_f32(f32_to_f16(q * f16_to_f32(d)));
          }
      }
  }
  return f;
}

void put_f16(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }

// Which element each (lane, k16 step, register, half) of the kernel's fragments holds, found
// without the position function: in pass b every quant of the GGUF rows is 1 where bit b of its
// tag (super-block, row, element) is set and 0 elsewhere (all d 1), so the fragments' values
// over 13 passes spell each fragment's tag. Every element must turn up exactly once, in the row
// the PTX rule gives the register, at the activations' position 64 js + 16 s + k of its
// super-block. Returns the number of fragment slots that break this, and the first one's story.
size_t tag_mismatches(uint32_t (*position)(uint32_t), const Mutation& mu, std::string& first) {
  constexpr int n_sb = 2;
  constexpr int kTagBits = 13;  // 2 x 16 x 256 tags
  const size_t row_bytes = size_t(kSbBytes) * n_sb;
  std::vector<uint8_t> src(kRows * row_bytes), tiles(q80_tiles_bytes(kRows, n_sb));
  std::vector<uint32_t> tag(size_t(n_sb) * 4 * 32 * 4 * 4 * 2, 0);  // [sb][js][lane][s][r][p]
  size_t bad = 0;
  auto fail = [&](const std::string& why) {
    if (bad++ == 0) first = why;
  };
  for (int b = 0; b < kTagBits; ++b) {
    for (int r = 0; r < kRows; ++r)
      for (int sb = 0; sb < n_sb; ++sb)
        for (int blk = 0; blk < 8; ++blk) {
          uint8_t* p = src.data() + size_t(r) * row_bytes + size_t(sb) * kSbBytes + size_t(blk) * kBlockBytes;
          put_f16(p, kOne);
          for (int i = 0; i < 32; ++i) {
            const uint32_t t = (uint32_t(sb) * kRows + uint32_t(r)) * 256 + uint32_t(32 * blk + i);
            p[2 + i] = uint8_t((t >> b) & 1);
          }
        }
    q80_to_tiles(src.data(), kRows, n_sb, tiles.data());
    size_t i = 0;
    for (int sb = 0; sb < n_sb; ++sb)
      for (int js = 0; js < 4; ++js)
        for (int lane = 0; lane < 32; ++lane) {
          const Fragments f = kernel_fragments(tiles.data() + size_t(sb) * kQ80TileBytes, js, lane, mu);
          for (int s = 0; s < 4; ++s)
            for (int r = 0; r < 4; ++r)
              for (int p = 0; p < 2; ++p, ++i) {
                const int q = f.q[s][r][p];
                if (q != 0 && q != 1) fail("a value that is no quant: " + std::to_string(q));
                if (q == 1) tag[i] |= 1u << b;
              }
        }
  }
  std::set<uint32_t> seen;
  size_t i = 0;
  for (int sb = 0; sb < n_sb; ++sb)
    for (int js = 0; js < 4; ++js)
      for (int lane = 0; lane < 32; ++lane)
        for (int s = 0; s < 4; ++s)
          for (int r = 0; r < 4; ++r)
            for (int p = 0; p < 2; ++p, ++i) {
              const int g = lane / 4, c = lane % 4;
              const uint32_t t = tag[i], e = t % 256, row = (t / 256) % kRows, from_sb = t / 256 / kRows;
              const std::string where = "sb " + std::to_string(sb) + " slice " + std::to_string(js) + " lane " +
                                        std::to_string(lane) + " step " + std::to_string(s) + " register " +
                                        std::to_string(r) + " half " + std::to_string(p) + " element " +
                                        std::to_string(e) + ": ";
              const uint32_t k = uint32_t(2 * c + 8 * (r / 2) + p);  // PTX: the fragment's k in the step
              if (!seen.insert(t).second) fail(where + "element seen twice");
              if (from_sb != uint32_t(sb)) fail(where + "from super-block " + std::to_string(from_sb));
              if (row != uint32_t(g + 8 * (r % 2))) fail(where + "from row " + std::to_string(row));  // PTX: odd registers are row g + 8
              if (e / 64 != uint32_t(js) || position(e % 64) != uint32_t(16 * s) + k)
                fail(where + "the activations hold it elsewhere");
              if (int(e / 32) != cuda::wgmma::q80_step_block(js, s)) fail(where + "not the step's block");
            }
  if (seen.size() != size_t(n_sb) * kRows * 256) fail("not every element once");
  return bad;
}

// Values: random GGUF blocks (random quants, d of normal size, some subnormal or tiny) through
// q80_to_tiles and the kernel's selection give, at each fragment, q d equal to the library's
// dequantized element at the position function's inverse (exact), with the d of the fragment's
// row and the element's block; and the kernel's f16 weight half(d) q is within 2^-11 |w| + 2^-25
// of it (the GPU test's bound). Returns the number of fragment slots that break this.
size_t value_mismatches(uint32_t (*position)(uint32_t), const Mutation& mu, std::string& first) {
  std::mt19937 rng(80);
  constexpr int n_sb = 3;
  const size_t row_bytes = size_t(kSbBytes) * n_sb;
  std::vector<uint8_t> src(kRows * row_bytes);
  for (auto& v : src) v = uint8_t(rng());
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  for (int r = 0; r < kRows; ++r)
    for (int blk = 0; blk < 8 * n_sb; ++blk) {
      const float d = blk % 5 == 4 ? normal(rng) * 1e-3f : normal(rng);  // every fifth subnormal-sized
      put_f16(src.data() + size_t(r) * row_bytes + size_t(blk) * kBlockBytes, f32_to_f16(d));
    }
  std::vector<float> W(size_t(kRows) * 256 * n_sb);
  for (int r = 0; r < kRows; ++r)
    dequantize_row(GgmlType::Q8_0, src.data() + size_t(r) * row_bytes, W.data() + size_t(r) * 256 * n_sb, 256 * n_sb);
  std::vector<uint8_t> tiles(q80_tiles_bytes(kRows, n_sb));
  q80_to_tiles(src.data(), kRows, n_sb, tiles.data());
  uint32_t element_at[64];
  for (uint32_t e = 0; e < 64; ++e) element_at[position(e) % 64] = e;
  size_t bad = 0;
  auto fail = [&](const std::string& why) {
    if (bad++ == 0) first = why;
  };
  for (int sb = 0; sb < n_sb; ++sb)
    for (int js = 0; js < 4; ++js)
      for (int lane = 0; lane < 32; ++lane) {
        const Fragments f = kernel_fragments(tiles.data() + size_t(sb) * kQ80TileBytes, js, lane, mu);
        const int g = lane / 4, c = lane % 4;
        for (int s = 0; s < 4; ++s)
          for (int r = 0; r < 4; ++r)
            for (int p = 0; p < 2; ++p) {
              const int h = r % 2, row = g + 8 * h;
              const uint32_t e = 64 * uint32_t(js) + element_at[16 * s + 2 * c + 8 * (r / 2) + p];
              const uint8_t* blk = src.data() + size_t(row) * row_bytes + size_t(sb) * kSbBytes + (e / 32) * kBlockBytes;
              uint16_t d_row;
              std::memcpy(&d_row, blk, 2);
              const double w = W[size_t(row) * 256 * n_sb + size_t(sb) * 256 + e];
              const double d = f16_to_f32(f.d[s][h]);
              const std::string where = "sb " + std::to_string(sb) + " row " + std::to_string(row) + " element " +
                                        std::to_string(e) + ": ";
              if (f.d[s][h] != d_row)
                fail(where + "another block's or row's d");
              else if (double(f.q[s][r][p]) * d != w)
                fail(where + "q d " + std::to_string(f.q[s][r][p] * d) + " vs " + std::to_string(w));
              else if (std::fabs(double(f.w[s][r][p]) - w) > 0x1p-11 * std::fabs(w) + 0x1p-25)
                fail(where + "f16 weight off by more than the bound");
            }
      }
  return bad;
}

// The position function is a permutation of each slice whose k16 step s (positions 16 s ..)
// holds elements of block q80_step_block(js, s) only, it keeps to_half_rows' pairs (elements 4i,
// 4i + 1 at an even position, the next two likewise), and it is Q4_K's fragment_k_position.
TEST(WgmmaQ80Layout, PositionsPermuteEachSliceByBlock) {
  std::set<uint32_t> seen;
  for (uint32_t e = 0; e < 64; ++e) {
    const uint32_t p = q80_fragment_k_position(e);
    ASSERT_LT(p, 64u);
    ASSERT_TRUE(seen.insert(p).second) << "e " << e;
    for (int js = 0; js < 4; ++js) EXPECT_EQ(int(64 * js + e) / 32, cuda::wgmma::q80_step_block(js, int(p / 16)));
    EXPECT_EQ(p, cuda::wgmma::fragment_k_position(e)) << "e " << e;
  }
  for (uint32_t e = 0; e < 64; e += 4) {
    const uint32_t a = q80_fragment_k_position(e), b = q80_fragment_k_position(e + 2);
    EXPECT_EQ(a % 2, 0u);
    EXPECT_EQ(b % 2, 0u);
    EXPECT_EQ(q80_fragment_k_position(e + 1), a + 1);
    EXPECT_EQ(q80_fragment_k_position(e + 3), b + 1);
  }
  // The d a lane reads: row g + 8h, block jb at 32 g + 4 jb + 2 h (quant/q80_tiles.h).
  EXPECT_EQ(cuda::wgmma::q80_scale_offset(5, 3, 1), 4096 + 32 * 5 + 4 * 3 + 2 - kQ80TileScales);
}

TEST(WgmmaQ80Layout, FragmentsHoldTheElementsThePositionFunctionSays) {
  std::string first;
  EXPECT_EQ(tag_mismatches(q80_fragment_k_position, {}, first), 0u) << first;
}

TEST(WgmmaQ80Layout, FragmentValuesEqualTheDequantizedRows) {
  std::string first;
  EXPECT_EQ(value_mismatches(q80_fragment_k_position, {}, first), 0u) << first;
}

// Wrong orders of k for the activations (positions still a permutation keeping the pairs).
uint32_t blocks_swapped(uint32_t e) { return q80_fragment_k_position(e ^ 32); }
uint32_t halves_swapped(uint32_t e) { return q80_fragment_k_position(e) ^ 8; }
uint32_t lanes_rotated(uint32_t e) { return (q80_fragment_k_position(e) & ~6u) | ((q80_fragment_k_position(e) + 2) & 6u); }
uint32_t natural(uint32_t e) { return e; }

// Each wrong selection in the kernel and each wrong order of k fails the checks above.
TEST(WgmmaQ80Layout, MutantsFail) {
  std::string first;
  Mutation m;
  m.swap_u = true;
  EXPECT_GT(tag_mismatches(q80_fragment_k_position, m, first), 0u) << "words of a row's two steps swapped";
  m = {};
  m.swap_h = true;
  EXPECT_GT(tag_mismatches(q80_fragment_k_position, m, first), 0u) << "rows swapped";
  m = {};
  m.swap_prmt = true;
  EXPECT_GT(tag_mismatches(q80_fragment_k_position, m, first), 0u) << "PRMT selectors swapped";
  m = {};
  m.swap_d = true;
  EXPECT_GT(value_mismatches(q80_fragment_k_position, m, first), 0u) << "the other block's d";
  for (auto* pos : {blocks_swapped, halves_swapped, lanes_rotated, natural}) {
    EXPECT_GT(tag_mismatches(pos, {}, first), 0u);
    EXPECT_GT(value_mismatches(pos, {}, first), 0u);
  }
}

}  // namespace
}  // namespace df
