// The IQ4_XS tile layout (quant/iq4xs_tiles.h) and the operands the CUDA kernels build from it
// (backend/cuda/iq4xs_operands.cuh, run here on the CPU with PRMT emulated), against the GGUF
// blocks read the other way round: every nibble of every row is found where the layout's rule
// puts it (computed here from the row's side), every header decodes to the row's d and eight
// scales ls - 32, padding rows of the last tile repeat the last row, every tile byte is written
// once; the code-book lookup gives kIQ4Values for every selector; and the A operands of each
// lane hold, in each m16n8k32 fragment slot, the code-book value of the element whose
// activation the kernel puts in the same slot.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "backend/cuda/iq4xs_operands.cuh"
#include "quant/blocks.h"
#include "quant/iq4xs_tiles.h"

namespace df {
namespace {

constexpr int kSb = 136;

uint32_t word_at(const std::vector<uint8_t>& v, size_t at) {
  return uint32_t(v[at]) | uint32_t(v[at + 1]) << 8 | uint32_t(v[at + 2]) << 16 | uint32_t(v[at + 3]) << 24;
}

// The GGUF code-book index of element e (< 256) of a super-block.
int gguf_index(const uint8_t* sb, int e) {
  const int ib = e / 32, k = e % 32;
  const uint8_t b = sb[8 + 16 * ib + k % 16];
  return k < 16 ? b & 15 : b >> 4;
}

// Where element e of super-block sb of row r lands: the tile byte and the nibble in its word.
struct NibbleAt {
  size_t word;  // byte offset of the 4-byte word
  int nibble;   // 0..7
};
NibbleAt nibble_at(int64_t r, int sb, int n_sb, int e) {
  const size_t sb_base = (size_t(r / 16) * size_t(n_sb) + size_t(sb)) * 2176;
  const int rr = int(r % 16), g = rr % 8, h = rr / 8;
  const int ib = e / 32, k = e % 32, c = k / 8;
  const size_t word = sb_base + 512 * size_t(ib / 2) + 16 * size_t(4 * g + c) + 4 * size_t(2 * (ib % 2) + h);
  return {word, k % 8};
}
size_t header_at(int64_t r, int sb, int n_sb) {
  const int rr = int(r % 16);
  return (size_t(r / 16) * size_t(n_sb) + size_t(sb)) * 2176 + 2048 + 16 * size_t(rr % 8) + 8 * size_t(rr / 8);
}

std::vector<uint8_t> random_rows(int64_t n_out, int n_sb, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> src(size_t(n_out) * kSb * size_t(n_sb));
  for (auto& v : src) v = uint8_t(rng());
  return src;
}

TEST(Iq4xsTiles, EveryNibbleAndHeaderIsWhereTheLayoutPutsIt) {
  for (const auto& [n_out, n_sb] : {std::pair<int64_t, int>{37, 3}, {16, 1}, {48, 20}, {5, 2}}) {
    const std::vector<uint8_t> src = random_rows(n_out, n_sb, 5 + uint32_t(n_out));
    const size_t bytes = iq4xs_tiles_bytes(n_out, n_sb);
    ASSERT_EQ(bytes, size_t((n_out + 15) / 16) * size_t(n_sb) * 2176);
    std::vector<uint8_t> dst(bytes, 0xA5);
    std::vector<int> hits(2 * bytes, 0);  // per nibble
    iq4xs_to_tiles(src.data(), n_out, n_sb, dst.data());
    const int64_t padded = (n_out + 15) / 16 * 16;
    for (int64_t r = 0; r < padded; ++r) {
      const int64_t from = std::min(r, n_out - 1);  // padding rows repeat the last one
      for (int sb = 0; sb < n_sb; ++sb) {
        const uint8_t* gg = src.data() + size_t(from) * kSb * size_t(n_sb) + size_t(kSb) * size_t(sb);
        const std::string where = "row " + std::to_string(r) + " super-block " + std::to_string(sb) + " (" +
                                  std::to_string(n_out) + " x " + std::to_string(n_sb) + ")";
        for (int e = 0; e < 256; ++e) {
          const NibbleAt at = nibble_at(r, sb, n_sb, e);
          ASSERT_LT(at.word + 3, bytes);
          const int got = int(word_at(dst, at.word) >> (4 * at.nibble)) & 15;
          ASSERT_EQ(got, gguf_index(gg, e)) << where << " element " << e;
          hits[2 * at.word + size_t(at.nibble)]++;
        }
        const size_t hd = header_at(r, sb, n_sb);
        const uint32_t x = word_at(dst, hd), y = word_at(dst, hd + 4);
        ASSERT_EQ(iq4xs::d_bits(x, y) & 0xFFFFu, uint32_t(gg[0]) | uint32_t(gg[1]) << 8) << where << ": d";
        const unsigned scales_h = unsigned(gg[2]) | unsigned(gg[3]) << 8;
        for (int j = 0; j < 8; ++j) {
          const int ls = int(((gg[4 + j / 2] >> (4 * (j % 2))) & 15) | ((scales_h >> (2 * j)) & 3) << 4);
          ASSERT_EQ(iq4xs::scale_of(x, y, j), ls - 32) << where << ": scale " << j;
          ASSERT_EQ(iq4xs::scale_at(j < 4 ? x : y, iq4xs::scale_shift(j)), ls - 32) << where << ": scale " << j;
        }
        for (int k = 0; k < 16; ++k) hits[2 * hd + size_t(k)]++;  // the header's 16 nibbles
      }
    }
    for (size_t i = 0; i < hits.size(); ++i)
      ASSERT_EQ(hits[i], 1) << "tile byte " << i / 2 << " nibble " << i % 2 << " written " << hits[i] << " times";
  }
}

TEST(Iq4xsTiles, LookupGivesTheCodeBook) {
  for (uint32_t w = 0; w < 0x10000u; ++w)
    for (uint32_t upper : {0u, 0xFFFF0000u, 0x5A3C0000u}) {  // PRMT reads the low 16 bits alone
      uint32_t lo = 0, hi = 0;
      iq4xs::values4(w | upper, lo, hi);
      for (int k = 0; k < 4; ++k) {
        const int v = int(int8_t(uint8_t(lo >> (8 * k)))) + int(int8_t(uint8_t(hi >> (8 * k))));
        ASSERT_EQ(v, int(quant::kIQ4Values[(w >> (4 * k)) & 15])) << "selector " << w << " byte " << k;
      }
    }
}

// Per lane (g, c) and sub-block: fragment register i (rows g, g + 8 alternately; k 4c.. for
// i < 2, 16 + 4c.. above) byte j holds, as lo + hi, the code-book value of element 8c + j
// (i < 2) or 8c + 4 + j of the sub-block of its row: the elements whose activations the kernels
// put in the same k slots (b0 = the 4 bytes at element 8c, b1 the 4 at 8c + 4).
TEST(Iq4xsTiles, FragmentSlotsHoldTheirElementsValues) {
  const int64_t n_out = 21;
  const int n_sb = 2;
  const std::vector<uint8_t> src = random_rows(n_out, n_sb, 77);
  std::vector<uint8_t> dst(iq4xs_tiles_bytes(n_out, n_sb));
  iq4xs_to_tiles(src.data(), n_out, n_sb, dst.data());
  for (int64_t t = 0; t < 2; ++t)
    for (int sb = 0; sb < n_sb; ++sb)
      for (int lane = 0; lane < 32; ++lane)
        for (int ib = 0; ib < 8; ++ib) {
          const int g = lane / 4, c = lane % 4, i = ib / 2, p = ib % 2;
          const size_t base = (size_t(t) * n_sb + size_t(sb)) * 2176 + 512 * size_t(i) + 16 * size_t(lane);
          // The lane's 16-byte word: sub-block 2i rows g, g + 8, then 2i + 1 rows g, g + 8.
          const uint32_t w_g = word_at(dst, base + 8 * size_t(p)), w_g8 = word_at(dst, base + 8 * size_t(p) + 4);
          uint32_t lo[4], hi[4];
          iq4xs::a_operands(w_g, w_g8, lo, hi);
          for (int reg = 0; reg < 4; ++reg) {
            const int64_t row = std::min(16 * t + g + 8 * (reg % 2), n_out - 1);
            const uint8_t* gg = src.data() + size_t(row) * kSb * size_t(n_sb) + size_t(kSb) * size_t(sb);
            for (int j = 0; j < 4; ++j) {
              const int e = 32 * ib + 8 * c + 4 * (reg / 2) + j;
              const int v = int(int8_t(uint8_t(lo[reg] >> (8 * j)))) + int(int8_t(uint8_t(hi[reg] >> (8 * j))));
              ASSERT_EQ(v, int(quant::kIQ4Values[gguf_index(gg, e)]))
                  << "tile " << t << " super-block " << sb << " lane " << lane << " sub-block " << ib << " register "
                  << reg << " byte " << j;
            }
          }
        }
}

}  // namespace
}  // namespace df
