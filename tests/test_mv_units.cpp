// The weight units of the fast CUDA matmul (src/backend/cuda/mv_units.cuh), run on the CPU: the
// same load/decode code the kernels use, compiled for the host. No GPU needed, so CI checks the
// byte offsets, the PRMT realignment of 2-byte-aligned blocks, the bit tricks of the integer to
// float conversion and the code-book lookup. Every element of a row must be produced exactly
// once, bit-identical to quant/dequant up to the sign of zeros (the kernels then differ from the CPU's exact weights
// only by their fp32 sums, which tests/test_cuda_ops.cpp bounds on a GPU).
//
// Inputs: rows quantized from random normals (with outliers), and rows of random bytes whose f16
// scale fields are overwritten with random finite values (every quant and scale bit pattern).
// Rows start at the weakest alignment each unit accepts, so the realignment paths run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/mv_units.cuh"
#include "quant/blocks.h"
#include "quant/dequant.h"
#include "quant/quantize.h"
#include "quant/types.h"
#include "util/half.h"

namespace df {
namespace {

const GgmlType kTypes[] = {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,   GgmlType::Q8_0, GgmlType::Q4_0,
                           GgmlType::IQ4_XS, GgmlType::F32, GgmlType::F16, GgmlType::BF16};

// Byte offsets of the f16 scale fields in a block (kept finite in random-byte rows).
std::vector<int> half_fields(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: return {0, 2};
    case GgmlType::Q6_K: return {208};
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::IQ4_XS: return {0};
    default: return {};
  }
}

// Smallest row start alignment the unit accepts.
size_t min_alignment(GgmlType t) {
  switch (t) {
    case GgmlType::Q6_K:
    case GgmlType::Q8_0:
    case GgmlType::Q4_0: return 4;
    case GgmlType::IQ4_XS: return 8;
    default: return 16;
  }
}

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Decodes every unit of a row into out[n_in] (NaN-filled first); counts how often each element
// was written.
template <GgmlType T>
void decode_row(const uint8_t* row, int64_t n_in, std::vector<float>& out, std::vector<int>& writes) {
  using U = mv::Unit<T>;
  out.assign(size_t(n_in), std::nanf(""));
  writes.assign(size_t(n_in), 0);
  const unsigned n_units = unsigned(n_in / U::kElems);
  for (unsigned u = 0; u < n_units; ++u) {
    uint32_t w[U::kWords];
    U::load(row, u, w);
    typename U::Pre pre;
    U::prepare(w, u, pre);
    for (int k = 0; k < U::kRuns; ++k) {
      const int64_t e0 = U::run_start(u, k);
      for (int q = 0; q < U::kRun / 4; ++q) {
        float v[4];
        U::decode(w, pre, u, k, q, v);
        for (int m = 0; m < 4; ++m) {
          const int64_t e = e0 + 4 * q + m;
          ASSERT_GE(e, 0);
          ASSERT_LT(e, n_in);
          out[size_t(e)] = v[m];
          writes[size_t(e)]++;
        }
      }
    }
  }
}

void fill_rows(GgmlType t, int64_t n_in, int n_rows, bool random_bytes, std::mt19937_64& rng, uint8_t* dst,
               size_t row_bytes) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  const TypeTraits& tr = type_traits(t);
  std::vector<float> src(static_cast<size_t>(n_in));
  for (int r = 0; r < n_rows; ++r) {
    uint8_t* row = dst + size_t(r) * row_bytes;
    if (!random_bytes || tr.block_size == 1) {
      for (auto& f : src) f = 0.05f * nd(rng);
      src[size_t(r * 37) % src.size()] = 0.9f;  // an outlier
      quantize_row(t, src.data(), row, n_in);
      continue;
    }
    for (size_t i = 0; i < row_bytes; ++i) row[i] = uint8_t(byte(rng));
    for (int64_t b = 0; b < n_in / tr.block_size; ++b)
      for (int off : half_fields(t)) {
        const uint16_t h = f32_to_f16(std::ldexp(nd(rng), -4));
        std::memcpy(row + size_t(b) * size_t(tr.type_size) + size_t(off), &h, 2);
      }
  }
}

template <GgmlType T>
void check_type() {
  const GgmlType t = T;
  std::mt19937_64 rng(1234 + uint64_t(t));
  for (int64_t n_in : {int64_t(1024), int64_t(3072), int64_t(5120)}) {
    const size_t row_bytes = row_size(t, n_in);
    const size_t align = min_alignment(t);
    constexpr int kRows = 3;
    ASSERT_TRUE(mv::unit_supports(t, n_in, row_bytes, reinterpret_cast<const void*>(uintptr_t(align))))
        << type_name(t) << " n_in " << n_in;
    // A buffer whose rows start at exactly `align` (mod 2 * align).
    std::vector<uint8_t> buf(row_bytes * kRows + 64);
    uint8_t* base = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64 + align;
    ASSERT_LE(base + row_bytes * kRows, buf.data() + buf.size());
    for (bool random_bytes : {false, true}) {
      fill_rows(t, n_in, kRows, random_bytes, rng, base, row_bytes);
      for (int r = 0; r < kRows; ++r) {
        const uint8_t* row = base + size_t(r) * row_bytes;
        ASSERT_TRUE(mv::unit_supports(t, n_in, row_bytes, row)) << "row " << r;
        std::vector<float> want(static_cast<size_t>(n_in)), got;
        std::vector<int> writes;
        dequantize_row(t, row, want.data(), n_in);
        decode_row<T>(row, n_in, got, writes);
        int64_t bad = 0;
        for (int64_t e = 0; e < n_in; ++e) {
          if (writes[size_t(e)] != 1) {
            ADD_FAILURE() << type_name(t) << " n_in " << n_in << ": element " << e << " written " << writes[size_t(e)]
                          << " times";
            return;
          }
          // Bits must match, but for the sign of a zero: Q4_K/Q5_K compute d1 * q as one fma that
          // gives +0 where the CPU's product of a negative scale with q = 0 gives -0 (the sums
          // they feed are the same).
          const bool same = bits(got[size_t(e)]) == bits(want[size_t(e)]) || (got[size_t(e)] == 0 && want[size_t(e)] == 0);
          if (!same && bad++ < 5)
            ADD_FAILURE() << type_name(t) << " n_in " << n_in << (random_bytes ? " random bytes" : " quantized")
                          << " row " << r << " element " << e << ": got " << got[size_t(e)] << " want "
                          << want[size_t(e)];
        }
        EXPECT_EQ(bad, 0) << type_name(t) << " n_in " << n_in;
      }
    }
  }
}

TEST(MvUnits, DecodeMatchesDequantBitForBit) {
  check_type<GgmlType::Q4_K>();
  check_type<GgmlType::Q5_K>();
  check_type<GgmlType::Q6_K>();
  check_type<GgmlType::Q8_0>();
  check_type<GgmlType::Q4_0>();
  check_type<GgmlType::IQ4_XS>();
  check_type<GgmlType::F32>();
  check_type<GgmlType::F16>();
  check_type<GgmlType::BF16>();
}

TEST(MvUnits, CodeBookTableMatchesQuant) {
  for (int i = 0; i < 16; ++i) {
    const uint32_t word = mv::Unit<GgmlType::IQ4_XS>::kTable[i / 4];
    EXPECT_EQ(int((word >> (8 * (i % 4))) & 0xFF) - 128, int(quant::kIQ4Values[i])) << "entry " << i;
  }
  // lookup4 on every index in every byte position.
  for (uint32_t a = 0; a < 16; ++a)
    for (uint32_t b = 0; b < 16; ++b) {
      const uint32_t idx = a | (b << 8) | (((a + b) & 15) << 16) | (((a * 3 + b) & 15) << 24);
      const uint32_t got = mv::Unit<GgmlType::IQ4_XS>::lookup4(idx);
      for (int n = 0; n < 4; ++n)
        EXPECT_EQ(int((got >> (8 * n)) & 0xFF) - 128, int(quant::kIQ4Values[(idx >> (8 * n)) & 15])) << idx << " byte " << n;
    }
}

TEST(MvUnits, SupportsFollowsShapeAndAlignment) {
  const auto* a16 = reinterpret_cast<const void*>(uintptr_t(4096));
  const auto* a4 = reinterpret_cast<const void*>(uintptr_t(4100));
  EXPECT_TRUE(mv::unit_supports(GgmlType::Q4_K, 5120, row_size(GgmlType::Q4_K, 5120), a16));
  EXPECT_FALSE(mv::unit_supports(GgmlType::Q4_K, 5120, row_size(GgmlType::Q4_K, 5120), a4));
  EXPECT_TRUE(mv::unit_supports(GgmlType::Q6_K, 5120, row_size(GgmlType::Q6_K, 5120), a4));
  EXPECT_FALSE(mv::unit_supports(GgmlType::Q6_K, 768, row_size(GgmlType::Q6_K, 768), a16));  // odd block count
  EXPECT_TRUE(mv::unit_supports(GgmlType::Q8_0, 320, row_size(GgmlType::Q8_0, 320), a4));
  EXPECT_FALSE(mv::unit_supports(GgmlType::Q8_0, 96, row_size(GgmlType::Q8_0, 96), a4));
  EXPECT_TRUE(mv::unit_supports(GgmlType::F16, 2048, 4096, a16));
  EXPECT_FALSE(mv::unit_supports(GgmlType::F16, 1536, 3072, a16));  // not whole 1024-element segments
  EXPECT_FALSE(mv::unit_supports(GgmlType::Q4_1, 4096, row_size(GgmlType::Q4_1, 4096), a16));  // generic path
}

}  // namespace
}  // namespace df
