// Tests of the quantization layer: type table, dequantization against an independent
// reimplementation of the block formats (docs §9), quantizer round-trip error, dot products
// against double-precision references, tile/row consistency, activation rounding, and the
// f16/bf16 conversions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "quant/dequant.h"
#include "quant/quantize.h"
#include "quant/types.h"
#include "quant/vec_dot.h"
#include "quant/vec_dot_kernels.h"
#include "util/error.h"
#include "util/half.h"

namespace df {
namespace {

const GgmlType kSupported[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,   GgmlType::Q4_0,
                               GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K,   GgmlType::Q3_K,
                               GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS};

std::string type_label(const testing::TestParamInfo<GgmlType>& info) { return type_name(info.param); }

// ------------------------------------------------------------------------------------------
// Type table

TEST(QuantTypes, SizesOfEveryKnownId) {
  struct Row { uint32_t id; const char* name; int block, bytes; };
  const Row rows[] = {{0, "f32", 1, 4},         {1, "f16", 1, 2},         {2, "q4_0", 32, 18},
                      {3, "q4_1", 32, 20},      {6, "q5_0", 32, 22},      {7, "q5_1", 32, 24},
                      {8, "q8_0", 32, 34},      {9, "q8_1", 32, 36},      {10, "q2_K", 256, 84},
                      {11, "q3_K", 256, 110},   {12, "q4_K", 256, 144},   {13, "q5_K", 256, 176},
                      {14, "q6_K", 256, 210},   {15, "q8_K", 256, 292},   {16, "iq2_xxs", 256, 66},
                      {17, "iq2_xs", 256, 74},  {18, "iq3_xxs", 256, 98}, {19, "iq1_s", 256, 50},
                      {20, "iq4_nl", 32, 18},   {21, "iq3_s", 256, 110},  {22, "iq2_s", 256, 82},
                      {23, "iq4_xs", 256, 136}, {24, "i8", 1, 1},         {25, "i16", 1, 2},
                      {26, "i32", 1, 4},        {27, "i64", 1, 8},        {28, "f64", 1, 8},
                      {29, "iq1_m", 256, 56},   {30, "bf16", 1, 2},       {34, "tq1_0", 256, 54},
                      {35, "tq2_0", 256, 66},   {39, "mxfp4", 32, 17}};
  int known = 0;
  for (uint32_t id = 0; id < 64; ++id) known += find_type_traits(id) != nullptr;
  EXPECT_EQ(known, int(std::size(rows)));
  for (const Row& r : rows) {
    const TypeTraits* tr = find_type_traits(r.id);
    ASSERT_NE(tr, nullptr) << r.name;
    EXPECT_EQ(uint32_t(tr->type), r.id);
    EXPECT_STREQ(tr->name, r.name);
    EXPECT_EQ(tr->block_size, r.block) << r.name;
    EXPECT_EQ(tr->type_size, r.bytes) << r.name;
  }
  EXPECT_EQ(row_size(GgmlType::Q4_K, 1024), 4u * 144u);
  EXPECT_EQ(row_size(GgmlType::BF16, 7), 14u);
}

TEST(QuantTypes, UnknownIdsAreRejected) {
  for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 1000u}) {
    EXPECT_EQ(find_type_traits(id), nullptr) << id;
    EXPECT_THROW(type_traits(GgmlType(id)), Error) << id;
  }
}

TEST(QuantTypes, SupportedSetAndDotFormats) {
  for (uint32_t id = 0; id < 64; ++id) {
    const TypeTraits* tr = find_type_traits(id);
    if (!tr) continue;
    const bool expected = std::find(std::begin(kSupported), std::end(kSupported), tr->type) != std::end(kSupported);
    EXPECT_EQ(tr->supported, expected) << tr->name;
  }
  auto dot = [](GgmlType t) { return type_traits(t).vec_dot_type; };
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::IQ4_NL}) EXPECT_EQ(dot(t), GgmlType::Q8_0);
  for (GgmlType t : {GgmlType::Q4_1, GgmlType::Q5_1}) EXPECT_EQ(dot(t), GgmlType::Q8_1);
  for (GgmlType t : {GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::IQ4_XS})
    EXPECT_EQ(dot(t), GgmlType::Q8_K);
  EXPECT_EQ(dot(GgmlType::F16), GgmlType::F16);
  EXPECT_EQ(dot(GgmlType::BF16), GgmlType::BF16);
  EXPECT_EQ(dot(GgmlType::F32), GgmlType::F32);
}

TEST(QuantTypes, NamesLookUpCaseInsensitively) {
  EXPECT_EQ(type_from_name("q4_K"), GgmlType::Q4_K);
  EXPECT_EQ(type_from_name("Q4_K"), GgmlType::Q4_K);
  EXPECT_EQ(type_from_name("q4_k"), GgmlType::Q4_K);
  EXPECT_EQ(type_from_name("IQ4_XS"), GgmlType::IQ4_XS);
  EXPECT_EQ(type_from_name("BF16"), GgmlType::BF16);
  EXPECT_EQ(type_from_name("f32"), GgmlType::F32);
  EXPECT_FALSE(type_from_name("q4_k_m").has_value());
  EXPECT_FALSE(type_from_name("").has_value());
  for (uint32_t id = 0; id < 64; ++id) {
    if (const TypeTraits* tr = find_type_traits(id)) {
      EXPECT_EQ(type_from_name(tr->name), tr->type);
    }
  }
}

// ------------------------------------------------------------------------------------------
// Dequantization against an independent reimplementation of the formats (docs §9).
//
// For every element the reference gives the exact value in double and the value ggml
// computes: the same formula with each float operation rounded to float in ggml's order
// (double arithmetic on floats, rounded once, is exactly the float operation).

float f(double x) { return float(x); }

double half_value(uint16_t h) {  // IEEE binary16 from its definition
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return s ? -mag : mag;
}
uint16_t rd16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
float h16(const uint8_t* p) { return float(half_value(rd16(p))); }

struct RefOut {
  std::vector<double> exact;
  std::vector<float> ggml;
  std::vector<double> magnitude;  // sum of |terms|, for the tolerance of exact
  void put(double e, float g, double mag) {
    exact.push_back(e);
    ggml.push_back(g);
    magnitude.push_back(mag);
  }
};

const int kKV[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Elements of one block of type t at b appended to out.
void ref_block(GgmlType t, const uint8_t* b, RefOut& out) {
  switch (t) {
    case GgmlType::Q8_0: {
      const float d = h16(b);
      for (int j = 0; j < 32; ++j) {
        const int q = int8_t(b[2 + j]);
        out.put(double(d) * q, f(double(q) * d), std::fabs(double(d) * q));
      }
      return;
    }
    case GgmlType::Q8_1: {
      const float d = h16(b);
      for (int j = 0; j < 32; ++j) {
        const int q = int8_t(b[4 + j]);
        out.put(double(d) * q, f(double(q) * d), std::fabs(double(d) * q));
      }
      return;
    }
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1: {
      const bool has_min = t == GgmlType::Q4_1 || t == GgmlType::Q5_1;
      const bool five = t == GgmlType::Q5_0 || t == GgmlType::Q5_1;
      const float d = h16(b), m = has_min ? h16(b + 2) : 0.f;
      const uint8_t* qh = b + (has_min ? 4 : 2);
      const uint8_t* qs = qh + (five ? 4 : 0);
      const uint32_t h = five ? uint32_t(qh[0] | qh[1] << 8 | qh[2] << 16 | uint32_t(qh[3]) << 24) : 0;
      const int offset = has_min ? 0 : (five ? 16 : 8);
      for (int j = 0; j < 32; ++j) {
        const int nib = j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4);
        const int x = nib + (five ? int((h >> j) & 1) * 16 : 0) - offset;
        const double prod = double(d) * x;
        if (has_min) out.put(prod + m, f(double(f(prod)) + m), std::fabs(prod) + std::fabs(m));
        else out.put(prod, f(prod), std::fabs(prod));
      }
      return;
    }
    case GgmlType::IQ4_NL: {
      const float d = h16(b);
      for (int j = 0; j < 32; ++j) {
        const int v = kKV[j < 16 ? (b[2 + j] & 15) : (b[2 + j - 16] >> 4)];
        out.put(double(d) * v, f(double(d) * v), std::fabs(double(d) * v));
      }
      return;
    }
    case GgmlType::IQ4_XS: {
      const float d = h16(b);
      const int sh = rd16(b + 2);
      for (int ib = 0; ib < 8; ++ib) {
        const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4);
        const float dl = f(double(d) * (ls - 32));
        for (int j = 0; j < 32; ++j) {
          const uint8_t q = b[8 + 16 * ib + (j % 16)];
          const int v = kKV[j < 16 ? (q & 15) : (q >> 4)];
          out.put(double(d) * (ls - 32) * v, f(double(dl) * v), std::fabs(double(d) * (ls - 32) * v));
        }
      }
      return;
    }
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      const bool five = t == GgmlType::Q5_K;
      const float d = h16(b), dmin = h16(b + 2);
      const uint8_t* sc = b + 4;
      const uint8_t* qh = b + 16;
      const uint8_t* qs = b + (five ? 48 : 16);
      for (int s = 0; s < 8; ++s) {  // sub-block s: 32 outputs
        int scale, mn;
        if (s < 4) {
          scale = sc[s] & 63;
          mn = sc[s + 4] & 63;
        } else {
          scale = (sc[s + 4] & 15) | ((sc[s - 4] >> 6) << 4);
          mn = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
        }
        const float d1 = f(double(d) * scale), m1 = f(double(dmin) * mn);
        const int g = s / 2;
        for (int l = 0; l < 32; ++l) {
          const uint8_t byte = qs[32 * g + l];
          int q = (s % 2 == 0) ? (byte & 15) : (byte >> 4);
          if (five) q += ((qh[l] >> s) & 1) * 16;
          const double e = double(d) * scale * q - double(dmin) * mn;
          out.put(e, f(double(f(double(d1) * q)) - m1), std::fabs(double(d) * scale * q) + std::fabs(double(dmin) * mn));
        }
      }
      return;
    }
    case GgmlType::Q6_K: {
      const uint8_t* ql = b;
      const uint8_t* qh = b + 128;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
      const float d = h16(b + 208);
      double ex[256];
      float gg[256];
      for (int n = 0; n < 2; ++n)
        for (int l = 0; l < 32; ++l) {
          const int is = 8 * n + l / 16;
          const uint8_t L0 = ql[64 * n + l], L1 = ql[64 * n + l + 32], H = qh[32 * n + l];
          const int q[4] = {((L0 & 15) | ((H & 3) << 4)) - 32, ((L1 & 15) | (((H >> 2) & 3) << 4)) - 32,
                            ((L0 >> 4) | (((H >> 4) & 3) << 4)) - 32, ((L1 >> 4) | (((H >> 6) & 3) << 4)) - 32};
          for (int k = 0; k < 4; ++k) {
            const int s = sc[is + 2 * k];
            ex[128 * n + l + 32 * k] = double(d) * s * q[k];
            gg[128 * n + l + 32 * k] = f(double(f(double(d) * s)) * q[k]);
          }
        }
      for (int j = 0; j < 256; ++j) out.put(ex[j], gg[j], std::fabs(ex[j]));
      return;
    }
    case GgmlType::Q2_K:
    case GgmlType::Q3_K: {
      const bool three = t == GgmlType::Q3_K;
      const uint8_t* hmask = b;
      const uint8_t* qs = three ? b + 32 : b + 16;
      const uint8_t* sc = three ? b + 96 : b;
      const float d = three ? h16(b + 108) : h16(b + 80);
      const float dmin = three ? 0.f : h16(b + 82);
      int scale[16], mins[16];
      for (int j = 0; j < 16; ++j) {
        if (three) {
          const int low = j < 8 ? (sc[j] & 15) : (sc[j - 8] >> 4);
          const int high = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
          scale[j] = (low | (high << 4)) - 32;
          mins[j] = 0;
        } else {
          scale[j] = sc[j] & 15;
          mins[j] = sc[j] >> 4;
        }
      }
      int is = 0, mask = 1;
      for (int half = 0; half < 2; ++half)
        for (int shift = 0; shift < 8; shift += 2, mask <<= 1)
          for (int run = 0; run < 2; ++run, ++is) {
            const float dl = f(double(d) * scale[is]), ml = f(double(dmin) * mins[is]);
            for (int l = 0; l < 16; ++l) {
              const int idx = 16 * run + l;
              int q = (qs[32 * half + idx] >> shift) & 3;
              if (three) q -= (hmask[idx] & mask) ? 0 : 4;
              const double e = double(d) * scale[is] * q - double(dmin) * mins[is];
              out.put(e, f(double(f(double(dl) * q)) - ml),
                      std::fabs(double(d) * scale[is] * q) + std::fabs(double(dmin) * mins[is]));
            }
          }
      return;
    }
    case GgmlType::Q8_K: {
      float d;
      std::memcpy(&d, b, 4);
      for (int j = 0; j < 256; ++j) {
        const int q = int8_t(b[4 + j]);
        out.put(double(d) * q, f(double(d) * q), std::fabs(double(d) * q));
      }
      return;
    }
    default: FAIL() << "no reference for " << type_name(t);
  }
}

// Byte offsets of the f16 scale fields of each block format (docs §9 table).
std::vector<int> f16_fields(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: case GgmlType::IQ4_NL: case GgmlType::IQ4_XS:
      return {0};
    case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q8_1: case GgmlType::Q4_K: case GgmlType::Q5_K:
      return {0, 2};
    case GgmlType::Q2_K: return {80, 82};
    case GgmlType::Q3_K: return {108};
    case GgmlType::Q6_K: return {208};
    default: return {};
  }
}

// Random block bytes with finite scales of sane size (magnitudes 2^-10 .. 2).
std::vector<uint8_t> random_blocks(GgmlType t, int nblocks, std::mt19937& rng) {
  const TypeTraits& tr = type_traits(t);
  std::vector<uint8_t> bytes(size_t(nblocks) * tr.type_size);
  for (auto& v : bytes) v = uint8_t(rng());
  for (int i = 0; i < nblocks; ++i) {
    uint8_t* b = bytes.data() + size_t(i) * tr.type_size;
    for (int off : f16_fields(t)) {
      const uint16_t h = uint16_t((rng() & 0x8000) | ((5 + rng() % 12) << 10) | (rng() & 1023));
      b[off] = uint8_t(h);
      b[off + 1] = uint8_t(h >> 8);
    }
    if (t == GgmlType::Q8_K) {
      const float d = std::ldexp(float(rng() % 1000 + 1), -12) * ((rng() & 1) ? -1.f : 1.f);
      std::memcpy(b, &d, 4);
    }
  }
  return bytes;
}

class DequantTest : public testing::TestWithParam<GgmlType> {};

TEST_P(DequantTest, MatchesFormulasAndGgmlRounding) {
  const GgmlType t = GetParam();
  const TypeTraits& tr = type_traits(t);
  std::mt19937 rng(1234 + uint32_t(t));
  const int nblocks = 64;
  const auto bytes = random_blocks(t, nblocks, rng);
  const int64_t n = int64_t(nblocks) * tr.block_size;
  std::vector<float> y(size_t(n), std::numeric_limits<float>::quiet_NaN());
  dequantize_row(t, bytes.data(), y.data(), n);
  RefOut ref;
  for (int i = 0; i < nblocks; ++i) ref_block(t, bytes.data() + size_t(i) * tr.type_size, ref);
  ASSERT_EQ(ref.exact.size(), size_t(n));
  int bad_exact = 0, bad_bits = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!(std::fabs(y[i] - ref.exact[i]) <= 1e-6 * ref.magnitude[i] + 1e-30)) ++bad_exact;
    uint32_t a, b;
    std::memcpy(&a, &y[i], 4);
    std::memcpy(&b, &ref.ggml[i], 4);
    if (a != b) ++bad_bits;
    if ((bad_exact || bad_bits) && bad_exact + bad_bits < 4)
      ADD_FAILURE() << type_name(t) << " element " << i << ": got " << y[i] << ", exact " << ref.exact[i] << ", ggml order "
                    << ref.ggml[i];
  }
  EXPECT_EQ(bad_exact, 0);
  EXPECT_EQ(bad_bits, 0);
}

INSTANTIATE_TEST_SUITE_P(AllBlockFormats, DequantTest,
                         testing::Values(GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                                         GgmlType::Q8_1, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                                         GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_K, GgmlType::IQ4_NL,
                                         GgmlType::IQ4_XS),
                         type_label);

TEST(Dequant, FloatFormats) {
  std::mt19937 rng(7);
  std::vector<uint16_t> h(1000);
  for (auto& v : h) v = uint16_t(rng());
  std::vector<float> y(h.size());
  dequantize_row(GgmlType::F16, h.data(), y.data(), int64_t(h.size()));
  for (size_t i = 0; i < h.size(); ++i) {
    const double e = half_value(h[i]);
    if (((h[i] >> 10) & 31) == 31) EXPECT_EQ(std::isnan(y[i]), (h[i] & 1023) != 0);
    else EXPECT_EQ(double(y[i]), e) << i;
  }
  dequantize_row(GgmlType::BF16, h.data(), y.data(), int64_t(h.size()));
  for (size_t i = 0; i < h.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &y[i], 4);
    EXPECT_EQ(bits, uint32_t(h[i]) << 16);
  }
  const float x[3] = {1.5f, -2.f, 3e-20f};
  dequantize_row(GgmlType::F32, x, y.data(), 3);
  EXPECT_EQ(y[0], 1.5f);
  EXPECT_EQ(y[2], 3e-20f);
}

TEST(Dequant, UnsupportedTypesThrow) {
  std::vector<uint8_t> b(1024);
  std::vector<float> y(256);
  EXPECT_THROW(dequantize_row(GgmlType::IQ2_XXS, b.data(), y.data(), 256), Error);
  EXPECT_THROW(dequantize_row(GgmlType::MXFP4, b.data(), y.data(), 32), Error);
  EXPECT_THROW(dequantize_row(GgmlType(77), b.data(), y.data(), 32), Error);
}

// ------------------------------------------------------------------------------------------
// Quantize -> dequantize round trip

enum class Data { Gaussian, Outliers };

std::vector<float> make_data(Data kind, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = g(rng);
  if (kind == Data::Outliers)
    for (int64_t i = 0; i < n; i += 37 + int64_t(rng() % 60)) x[size_t(i)] *= 12.f;  // ~1.5% large values
  return x;
}

double rel_rmse(const std::vector<float>& x, const std::vector<float>& y) {
  double e = 0, s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    s += double(x[i]) * x[i];
  }
  return std::sqrt(e / s);
}

struct RmseBound {
  GgmlType type;
  double gaussian, outliers;
};

// Relative RMSE bounds. For a uniform grid, the error is about step/sqrt(12), and the step
// halves with each extra bit: ~8.5 bits/weight gives ~0.5% on Gaussian data, ~4.5 bits ~7-9%,
// ~2.6 bits ~30%. Blocks holding an outlier get a coarser step, hence the looser second
// column. The bounds sit ~10-20% above what llama.cpp's reference quantizers reach.
const RmseBound kRmseBounds[] = {
    {GgmlType::Q8_0, 0.0065, 0.0125},  {GgmlType::Q6_K, 0.020, 0.034},   {GgmlType::Q5_1, 0.042, 0.057},
    {GgmlType::Q5_K, 0.040, 0.054},    {GgmlType::Q5_0, 0.048, 0.092},   {GgmlType::Q4_1, 0.087, 0.115},
    {GgmlType::Q4_K, 0.079, 0.106},    {GgmlType::Q4_0, 0.095, 0.175},   {GgmlType::IQ4_NL, 0.084, 0.135},
    {GgmlType::IQ4_XS, 0.085, 0.136},  {GgmlType::Q3_K, 0.168, 0.208},   {GgmlType::Q2_K, 0.33, 0.34},
};

class RoundTripTest : public testing::TestWithParam<RmseBound> {};

TEST_P(RoundTripTest, ErrorWithinBitsBudget) {
  const RmseBound b = GetParam();
  ASSERT_TRUE(can_quantize(b.type));
  for (Data kind : {Data::Gaussian, Data::Outliers})
    for (int64_t n : {256, 512, 4096, 8192}) {
      const auto x = make_data(kind, n, uint32_t(n) * 31 + uint32_t(b.type));
      std::vector<uint8_t> q(row_size(b.type, n));
      quantize_row(b.type, x.data(), q.data(), n);
      std::vector<float> y(static_cast<size_t>(n));
      dequantize_row(b.type, q.data(), y.data(), n);
      const double err = rel_rmse(x, y);
      // Short rows are noisier: allow 15% more at 256 and 512 elements.
      const double bound = (kind == Data::Gaussian ? b.gaussian : b.outliers) * (n < 4096 ? 1.15 : 1.0);
      EXPECT_LT(err, bound) << type_name(b.type) << (kind == Data::Gaussian ? " gaussian" : " outliers") << " n=" << n;
    }
}

INSTANTIATE_TEST_SUITE_P(Quantizers, RoundTripTest, testing::ValuesIn(kRmseBounds),
                         [](const testing::TestParamInfo<RmseBound>& i) { return std::string(type_name(i.param.type)); });

TEST(Quantize, ZeroAndConstantRows) {
  for (const RmseBound& b : kRmseBounds) {
    const int64_t n = 512;
    std::vector<uint8_t> q(row_size(b.type, n));
    std::vector<float> y(static_cast<size_t>(n));
    std::vector<float> zeros(static_cast<size_t>(n), 0.f);
    quantize_row(b.type, zeros.data(), q.data(), n);
    dequantize_row(b.type, q.data(), y.data(), n);
    for (float v : y) ASSERT_EQ(v, 0.f) << type_name(b.type);
    std::vector<float> c(static_cast<size_t>(n), -0.75f);
    quantize_row(b.type, c.data(), q.data(), n);
    dequantize_row(b.type, q.data(), y.data(), n);
    for (float v : y) ASSERT_NEAR(v, -0.75f, 0.75 * 0.1) << type_name(b.type);
  }
}

TEST(Quantize, FloatFormatsAndUnsupported) {
  const float x[4] = {1.f, -0.33333334f, 65504.f, 1e-8f};
  uint16_t h[4];
  quantize_row(GgmlType::F16, x, h, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(h[i], f32_to_f16(x[i]));
  quantize_row(GgmlType::BF16, x, h, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(h[i], f32_to_bf16(x[i]));
  EXPECT_FALSE(can_quantize(GgmlType::IQ2_XXS));
  std::vector<uint8_t> out(1024);
  std::vector<float> in(256, 1.f);
  EXPECT_THROW(quantize_row(GgmlType::IQ2_XXS, in.data(), out.data(), 256), Error);
}

TEST(Quantize, ConcurrentCallsAgree) {
  const auto x = make_data(Data::Outliers, 1 << 15, 99);
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::IQ4_XS, GgmlType::Q8_0}) {
    const size_t bytes = row_size(t, int64_t(x.size()));
    std::vector<uint8_t> serial(bytes), a(bytes), b(bytes);
    quantize_row(t, x.data(), serial.data(), int64_t(x.size()));
    std::thread t1([&] { quantize_row(t, x.data(), a.data(), int64_t(x.size())); });
    std::thread t2([&] { quantize_row(t, x.data(), b.data(), int64_t(x.size())); });
    t1.join();
    t2.join();
    EXPECT_EQ(serial, a) << type_name(t);
    EXPECT_EQ(serial, b) << type_name(t);
  }
}

// ------------------------------------------------------------------------------------------
// Activation quantizers: ggml's reference rounding, re-derived here.

TEST(ActivationQuant, Q8_0AndQ8_1RoundHalfAwayFromZero) {
  auto x = make_data(Data::Outliers, 1024, 5);
  for (int i = 0; i < 64; ++i) x[size_t(i)] = float(i - 32) * 0.5f;  // exact halves in the first blocks
  // Block 2 has amax 127, so x * (1/d) == x: values just below and at halves.
  const float edge[] = {127.f, 0.49999997f, -0.49999997f, 1.4999999f, -2.4999998f, 2.5f, -3.5f, 0.5f, -0.5f, 126.5f};
  for (size_t i = 0; i < std::size(edge); ++i) x[64 + i] = edge[i];
  for (GgmlType wt : {GgmlType::Q8_0, GgmlType::Q4_1}) {
    const bool q81 = wt == GgmlType::Q4_1;
    std::vector<uint8_t> a(activation_row_size(wt, 1024));
    quantize_activation_row(wt, x.data(), a.data(), 1024);
    const size_t bsize = q81 ? 36 : 34;
    ASSERT_EQ(a.size(), 32 * bsize);
    for (int blk = 0; blk < 32; ++blk) {
      const uint8_t* b = a.data() + blk * bsize;
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[size_t(32 * blk + j)]));
      const float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
      EXPECT_EQ(rd16(b), f32_to_f16(d));
      int sum = 0;
      for (int j = 0; j < 32; ++j) {
        const int q = int(std::round(x[size_t(32 * blk + j)] * id));
        EXPECT_EQ(int(int8_t(b[(q81 ? 4 : 2) + j])), q) << "block " << blk << " j " << j;
        sum += q;
      }
      if (q81) {
        EXPECT_EQ(rd16(b + 2), f32_to_f16(float(sum) * d));
      }
    }
  }
}

TEST(ActivationQuant, Q8_KRoundsHalfToEvenWithBlockSums) {
  auto x = make_data(Data::Gaussian, 512, 6);
  x[3] = -4.5f;  // the block's extreme is negative: scale -127/max > 0
  // Block 1: max -127 makes the scale exactly 1, so x * iscale == x: ties go to even.
  const float edge[] = {-127.f, 0.5f, 1.5f, 2.5f, -2.5f, 3.5f, 0.49999997f, -1.5000001f, 126.5f, 127.f};
  for (size_t i = 0; i < std::size(edge); ++i) x[256 + i] = edge[i];
  for (size_t i = std::size(edge); i < 256; ++i) x[256 + i] = std::clamp(x[256 + i] * 30.f, -126.f, 126.f);
  std::vector<uint8_t> a(activation_row_size(GgmlType::Q4_K, 512));
  ASSERT_EQ(a.size(), 2u * 292u);
  quantize_activation_row(GgmlType::Q4_K, x.data(), a.data(), 512);
  for (int blk = 0; blk < 2; ++blk) {
    const uint8_t* b = a.data() + blk * 292;
    float amax = 0, max = 0;
    for (int j = 0; j < 256; ++j)
      if (std::fabs(x[size_t(256 * blk + j)]) > amax) {
        amax = std::fabs(x[size_t(256 * blk + j)]);
        max = x[size_t(256 * blk + j)];
      }
    const float iscale = -127.f / max;
    float d;
    std::memcpy(&d, b, 4);
    EXPECT_EQ(d, 1 / iscale);
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) {
        const int j = 16 * g + l;
        const int q = std::min(127, int(std::nearbyint(iscale * x[size_t(256 * blk + j)])));
        EXPECT_EQ(int(int8_t(b[4 + j])), q);
        sum += q;
      }
      EXPECT_EQ(int(int16_t(rd16(b + 260 + 2 * g))), sum);
    }
  }
}

// ------------------------------------------------------------------------------------------
// Dot products

struct DotFixture {
  GgmlType t;
  int64_t n;
  std::vector<float> w_float, x;      // original data
  std::vector<uint8_t> w, a;          // encoded weight row and activation row
  std::vector<float> w_deq, a_deq;    // their decoded values
};

std::vector<float> decode_activation(GgmlType wt, const uint8_t* a, int64_t n) {
  const GgmlType at = type_traits(wt).vec_dot_type;
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(at, a, y.data(), n);
  return y;
}

DotFixture make_dot(GgmlType t, int64_t n, uint32_t seed) {
  DotFixture d{t, n, make_data(Data::Outliers, n, seed), make_data(Data::Gaussian, n, seed + 1), {}, {}, {}, {}};
  d.w.resize(row_size(t, n));
  quantize_row(t, d.w_float.data(), d.w.data(), n);
  d.w_deq.resize(static_cast<size_t>(n));
  dequantize_row(t, d.w.data(), d.w_deq.data(), n);
  d.a.resize(activation_row_size(t, n));
  quantize_activation_row(t, d.x.data(), d.a.data(), n);
  d.a_deq = decode_activation(t, d.a.data(), n);
  return d;
}

// Largest error one activation element can carry after conversion to the dot format.
std::vector<double> activation_error_bound(GgmlType wt, const std::vector<float>& x) {
  const GgmlType at = type_traits(wt).vec_dot_type;
  std::vector<double> e(x.size());
  const int block = type_traits(at).block_size;
  for (size_t b0 = 0; b0 < x.size(); b0 += size_t(block)) {
    double amax = 0;
    for (size_t i = b0; i < b0 + size_t(block); ++i) amax = std::max(amax, std::fabs(double(x[i])));
    for (size_t i = b0; i < b0 + size_t(block); ++i) {
      switch (at) {
        case GgmlType::F32: e[i] = 0; break;
        case GgmlType::F16: e[i] = std::fabs(x[i]) * 0x1p-11 + 0x1p-25; break;
        case GgmlType::BF16: e[i] = std::fabs(x[i]) * 0x1p-8; break;
        // Half a step, plus the f16 rounding of the scale (2^-11 relative, times up to 127 steps).
        case GgmlType::Q8_0: case GgmlType::Q8_1: e[i] = amax / 127 * (0.5 + 127 * 0x1p-11) * 1.0001; break;
        case GgmlType::Q8_K: e[i] = amax / 127 * 0.5 * 1.0001; break;  // float scale
        default: ADD_FAILURE();
      }
    }
  }
  return e;
}

// Q4_1 / Q5_1 against Q8_1: the dot uses the activation block's stored s = f16(d * sum(q))
// for the min term instead of summing the decoded activations, which is how the format (and
// llama.cpp) works; s carries up to ~2^-10 relative error (f16 rounding of s and of d).
double q8_1_offset_tolerance(const DotFixture& d) {
  if (type_traits(d.t).vec_dot_type != GgmlType::Q8_1) return 0;
  const size_t wblock = size_t(type_traits(d.t).type_size);
  double tol = 0;
  for (size_t b = 0; b < size_t(d.n) / 32; ++b) {
    double asum = 0;
    for (size_t j = 0; j < 32; ++j) asum += d.a_deq[32 * b + j];
    tol += std::fabs(double(h16(d.w.data() + b * wblock + 2))) * std::fabs(asum) * 0x1p-10 * 1.01;
  }
  return tol;
}

class VecDotTest : public testing::TestWithParam<GgmlType> {};

TEST_P(VecDotTest, MatchesDoublePrecisionReferences) {
  const GgmlType t = GetParam();
  for (int64_t n : {256, 1024, 4352}) {
    const DotFixture d = make_dot(t, n, uint32_t(n) + 17 * uint32_t(t));
    double ref = 0, mag = 0, exact = 0, act_err = 0;
    const auto abound = activation_error_bound(t, d.x);
    for (int64_t i = 0; i < n; ++i) {
      ref += double(d.w_deq[size_t(i)]) * d.a_deq[size_t(i)];
      mag += std::fabs(double(d.w_deq[size_t(i)]) * d.a_deq[size_t(i)]);
      exact += double(d.w_deq[size_t(i)]) * d.x[size_t(i)];
      act_err += std::fabs(double(d.w_deq[size_t(i)])) * abound[size_t(i)];
    }
    const float got = vec_dot(t, n, d.w.data(), d.a.data());
    // Float accumulation over n products: a few ulps of the magnitude.
    const double tol = 4e-6 * mag + q8_1_offset_tolerance(d) + 1e-30;
    EXPECT_NEAR(got, ref, tol) << type_name(t) << " n=" << n;
    // Against the unconverted activation: within what the conversion may change.
    EXPECT_NEAR(got, exact, act_err + tol) << type_name(t) << " n=" << n;
    // The portable scalar kernel too (what non-AVX2 builds run).
    const quant::DotFn scalar = quant::scalar_dot(t);
    ASSERT_NE(scalar, nullptr);
    EXPECT_NEAR(scalar(n, d.w.data(), d.a.data()), ref, tol) << type_name(t) << " scalar, n=" << n;
  }
}

// Bit-identical, not just close: a row's result must not depend on how many rows it was
// multiplied with (batch invariance: a token's logits in a verify batch equal its logits in
// single-token decode).
TEST_P(VecDotTest, TileEqualsRowDotForAllShapes) {
  const GgmlType t = GetParam();
  // Odd block counts and a float tail, so that unpaired blocks and masked tails are covered.
  const int block = type_traits(t).block_size;
  const int64_t n = block == 1 ? 300 : block == 32 ? 544 : 768;
  constexpr int kMax = 9;
  // Rows with padding between them, as in a slice of a larger matrix.
  const size_t wrow = row_size(t, n), ws = wrow + 48;
  const size_t arow = activation_row_size(t, n), as = arow + 16;
  std::vector<uint8_t> w(ws * kMax), a(as * kMax);
  for (int r = 0; r < kMax; ++r) {
    const auto x = make_data(r % 2 ? Data::Outliers : Data::Gaussian, n, 100 + uint32_t(r));
    quantize_row(t, x.data(), w.data() + size_t(r) * ws, n);
  }
  for (int c = 0; c < kMax; ++c) {
    const auto x = make_data(Data::Gaussian, n, 200 + uint32_t(c));
    quantize_activation_row(t, x.data(), a.data() + size_t(c) * as, n);
  }
  float expect[kMax][kMax];
  for (int c = 0; c < kMax; ++c)
    for (int r = 0; r < kMax; ++r) expect[c][r] = vec_dot(t, n, w.data() + size_t(r) * ws, a.data() + size_t(c) * as);
  const size_t ldo = kMax + 3;
  std::vector<float> out(ldo * kMax);
  for (int nr = 1; nr <= kMax; ++nr)
    for (int nc = 1; nc <= kMax; ++nc) {
      std::fill(out.begin(), out.end(), std::numeric_limits<float>::quiet_NaN());
      vec_dot_tile(t, n, w.data(), ws, nr, a.data(), as, nc, out.data(), ldo);
      for (int c = 0; c < kMax; ++c)
        for (size_t r = 0; r < ldo; ++r) {
          const float v = out[size_t(c) * ldo + r];
          if (c < nc && int(r) < nr)
            ASSERT_EQ(v, expect[c][r]) << type_name(t) << " nr=" << nr << " nc=" << nc << " r=" << r << " c=" << c;
          else
            ASSERT_TRUE(std::isnan(v)) << type_name(t) << " wrote outside the tile at r=" << r << " c=" << c;
        }
    }
}

TEST_P(VecDotTest, ZeroActivationGivesZero) {
  const GgmlType t = GetParam();
  const int64_t n = 512;
  const DotFixture d = make_dot(t, n, 3);
  std::vector<float> zeros(static_cast<size_t>(n), 0.f);
  std::vector<uint8_t> a(activation_row_size(t, n));
  quantize_activation_row(t, zeros.data(), a.data(), n);
  EXPECT_EQ(vec_dot(t, n, d.w.data(), a.data()), 0.f);
}

INSTANTIATE_TEST_SUITE_P(AllSupported, VecDotTest, testing::ValuesIn(kSupported), type_label);

TEST(VecDot, UnsupportedWeightTypesThrow) {
  std::vector<uint8_t> w(4096), a(4096);
  EXPECT_THROW(vec_dot(GgmlType::Q8_K, 256, w.data(), a.data()), Error);
  EXPECT_THROW(vec_dot(GgmlType::IQ2_XS, 256, w.data(), a.data()), Error);
  EXPECT_THROW(activation_row_size(GgmlType::IQ3_S, 256), Error);
  float out;
  EXPECT_THROW(vec_dot_tile(GgmlType::TQ1_0, 256, w.data(), 0, 1, a.data(), 0, 1, &out, 1), Error);
}

// ------------------------------------------------------------------------------------------
// f16 / bf16 conversions, exhaustively

double bf16_value(uint16_t h) {  // bfloat16 from its definition: 8-bit exponent, 7-bit mantissa
  const int s = h >> 15, e = (h >> 7) & 255, m = h & 127;
  const double mag = e == 0 ? std::ldexp(m, -133) : std::ldexp(128 + m, e - 134);
  return s ? -mag : mag;
}

float next_toward(float v, double target) { return std::nextafter(v, float(target)); }

TEST(HalfConversions, F16AllValues) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = uint16_t(i);
    const float v = f16_to_f32(h);
    const int e = (h >> 10) & 31;
    if (e == 31) {
      if (h & 1023) {
        ASSERT_TRUE(std::isnan(v)) << h;
        const uint16_t back = f32_to_f16(v);
        ASSERT_TRUE(((back >> 10) & 31) == 31 && (back & 1023)) << "NaN must stay NaN: " << h;
      } else {
        ASSERT_TRUE(std::isinf(v) && std::signbit(v) == bool(h >> 15)) << h;
        ASSERT_EQ(f32_to_f16(v), h);
      }
      continue;
    }
    ASSERT_EQ(double(v), half_value(h)) << h;
    ASSERT_EQ(std::signbit(v), bool(h >> 15)) << h;
    ASSERT_EQ(f32_to_f16(v), h) << h;
    // Rounding between h and the next half of larger magnitude (finite or infinity): the
    // midpoint goes to the even mantissa, anything off it to the nearer one.
    const uint16_t up = uint16_t(h + 1);
    const double vu = ((up >> 10) & 31) == 31 ? (h >> 15 ? -65536.0 : 65536.0) : half_value(up);
    const double mid = (half_value(h) + vu) / 2;  // exactly representable as a float
    const float midf = float(mid);
    ASSERT_EQ(double(midf), mid);
    const uint16_t even = (h & 1) ? up : h;
    ASSERT_EQ(f32_to_f16(midf), even) << "midpoint above " << h;
    ASSERT_EQ(f32_to_f16(next_toward(midf, half_value(h))), h) << h;
    ASSERT_EQ(f32_to_f16(next_toward(midf, vu)), up) << h;
  }
  // Far out of range and tiny values.
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e10f), 0xfc00);
  EXPECT_EQ(f32_to_f16(1e-10f), 0x0000);
  EXPECT_EQ(f32_to_f16(-1e-10f), 0x8000);
}

TEST(HalfConversions, BF16AllValues) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = uint16_t(i);
    const float v = bf16_to_f32(h);
    const int e = (h >> 7) & 255;
    if (e == 255) {
      if (h & 127) {
        ASSERT_TRUE(std::isnan(v));
        const uint16_t back = f32_to_bf16(v);
        ASSERT_TRUE(((back >> 7) & 255) == 255 && (back & 127)) << h;
      } else {
        ASSERT_TRUE(std::isinf(v));
        ASSERT_EQ(f32_to_bf16(v), h);
      }
      continue;
    }
    ASSERT_EQ(double(v), bf16_value(h)) << h;
    ASSERT_EQ(f32_to_bf16(v), h) << h;
    const uint16_t up = uint16_t(h + 1);
    const double vu = ((up >> 7) & 255) == 255 ? (h >> 15 ? -0x1p128 : 0x1p128) : bf16_value(up);
    const double mid = (bf16_value(h) + vu) / 2;
    const float midf = float(mid);
    ASSERT_EQ(double(midf), mid);
    ASSERT_EQ(f32_to_bf16(midf), (h & 1) ? up : h) << h;
    ASSERT_EQ(f32_to_bf16(next_toward(midf, bf16_value(h))), h) << h;
    ASSERT_EQ(f32_to_bf16(next_toward(midf, vu)), up) << h;
  }
}

}  // namespace
}  // namespace df
