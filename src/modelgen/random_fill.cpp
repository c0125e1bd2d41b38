#include "modelgen/random_fill.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "quant/quantize.h"
#include "util/error.h"
#include "util/half.h"
#include "util/thread_pool.h"

namespace df::modelgen {

namespace {

// ---- random streams -------------------------------------------------------------------------

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// wyrand: one multiply per 64 random bits, plenty for synthetic weights.
struct Rng {
  uint64_t s;
  uint64_t next() {
    s += 0xa0761d6478bd642full;
    const __uint128_t t = __uint128_t(s) * (s ^ 0xe7037ed1a0b428dbull);
    return uint64_t(t >> 64) ^ uint64_t(t);
  }
  float uniform() { return float(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
  // Sum of four uniforms, rescaled to unit variance: close to Gaussian, bounded by 3.5 sigma,
  // and one multiply-hash per value.
  float normal() {
    const uint64_t r = next();
    const float sum = float((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48)) + 2.0f;
    return (sum * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
  }
  int range(int lo, int hi) { return lo + int(((next() >> 32) * uint64_t(hi - lo + 1)) >> 32); }  // [lo, hi]
  float sign() { return (next() >> 63) ? -1.0f : 1.0f; }
  void bytes(uint8_t* p, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const uint64_t r = next();
      std::memcpy(p + i, &r, 8);
    }
    if (i < n) {
      const uint64_t r = next();
      std::memcpy(p + i, &r, n - i);
    }
  }
};

Rng row_rng(uint64_t tensor_seed, int64_t row) {
  return Rng{splitmix64(tensor_seed ^ splitmix64(uint64_t(row) + 1))};
}

// ---- random quant blocks ----------------------------------------------------------------------
//
// Each generator writes one block with uniformly random quant bits and random per-block scales
// (and per-sub-block scales spanning the whole scale field, so that kernels reading the wrong
// scale or the wrong bits give visibly different results), with mins set so every sub-block is
// centred on zero. The super-block scale d is the target std divided by the expected RMS of
// (scale * quant) for the chosen ranges, times a per-block jitter in [0.75, 1.25).

constexpr float kJitterMeanSquare = 0.75f * 0.75f + 0.75f * 0.5f + 0.5f * 0.5f / 3.0f;

float jitter(Rng& r) { return 0.75f + 0.5f * r.uniform(); }

// Mean of k^2 over the integers k in [lo, hi].
float mean_square(int lo, int hi) {
  double s = 0;
  for (int k = lo; k <= hi; ++k) s += double(k) * k;
  return float(s / (hi - lo + 1));
}

// Mean of kvalues_iq4nl^2 (the IQ4_NL / IQ4_XS non-linear grid).
constexpr float kIq4nlMeanSquare = 4548.0f;

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

float base_scale(float std, float unit_mean_square) {
  return std / std::sqrt(unit_mean_square * kJitterMeanSquare);
}

// Q8_0: f16 d; int8 q[32] in [-127, 127].
void block_q8_0(Rng& r, float std, uint8_t* b) {
  static const float ms = mean_square(-127, 127);
  put_f16(b, r.sign() * base_scale(std, ms) * jitter(r));
  for (int j = 0; j < 32; ++j) b[2 + j] = uint8_t(int8_t(r.range(-127, 127)));
}

// Q4_0: f16 d; nibbles q with y = d * (q - 8). A random sign of d centres the blocks.
void block_q4_0(Rng& r, float std, uint8_t* b) {
  put_f16(b, r.sign() * base_scale(std, mean_square(-8, 7)) * jitter(r));
  r.bytes(b + 2, 16);
}

// Q4_1: f16 d, f16 m; y = d * q + m with m = -7.5 d.
void block_q4_1(Rng& r, float std, uint8_t* b) {
  const float d = base_scale(std, 21.25f) * jitter(r);
  put_f16(b, d);
  put_f16(b + 2, -7.5f * d);
  r.bytes(b + 4, 16);
}

// Q5_0: f16 d; qh[4]; qs[16]; y = d * (q - 16).
void block_q5_0(Rng& r, float std, uint8_t* b) {
  put_f16(b, r.sign() * base_scale(std, mean_square(-16, 15)) * jitter(r));
  r.bytes(b + 2, 20);
}

// Q5_1: f16 d, f16 m; qh[4]; qs[16]; y = d * q + m with m = -15.5 d.
void block_q5_1(Rng& r, float std, uint8_t* b) {
  const float d = base_scale(std, 85.25f) * jitter(r);
  put_f16(b, d);
  put_f16(b + 2, -15.5f * d);
  r.bytes(b + 4, 20);
}

// IQ4_NL: f16 d; nibble indices into the 16-value grid.
void block_iq4_nl(Rng& r, float std, uint8_t* b) {
  put_f16(b, r.sign() * base_scale(std, kIq4nlMeanSquare) * jitter(r));
  r.bytes(b + 2, 16);
}

// Sub-block scale/min pairs for Q4_K/Q5_K: scale in [16, 63] (the top bits are exercised),
// min = scale / 1.25 so that dmin = 1.25 * mid * d centres every sub-block.
constexpr float kMinRatio = 1.25f;

// The 12-byte 6-bit scale/min packing of Q4_K/Q5_K (inverse of get_scale_min_k4).
void pack_scale_min_k4(const int sc[8], const int mn[8], uint8_t* q) {
  for (int j = 0; j < 4; ++j) {
    q[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    q[j + 4] = uint8_t((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    q[j + 8] = uint8_t((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
}

// Q4_K / Q5_K: f16 d, f16 dmin, scales[12], [qh[32]], qs[128]; y = d*sc*q - dmin*mn.
// `mid` is the centre of the quant range (7.5 for 4 bits, 15.5 for 5 bits).
void block_k_with_mins(Rng& r, float std, uint8_t* b, float mid, float quant_variance, int n_bits_bytes) {
  static const float sc_ms = mean_square(16, 63);
  const float d = base_scale(std, sc_ms * quant_variance) * jitter(r);
  int sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = r.range(16, 63);
    mn[j] = int(std::lround(float(sc[j]) / kMinRatio));
  }
  put_f16(b, d);
  put_f16(b + 2, d * mid * kMinRatio);
  pack_scale_min_k4(sc, mn, b + 4);
  r.bytes(b + 16, size_t(n_bits_bytes));
}

void block_q4_k(Rng& r, float std, uint8_t* b) { block_k_with_mins(r, std, b, 7.5f, 21.25f, 128); }
void block_q5_k(Rng& r, float std, uint8_t* b) { block_k_with_mins(r, std, b, 15.5f, 85.25f, 32 + 128); }

// Q6_K: ql[128], qh[64], int8 scales[16], f16 d; y = d * sc * (q - 32). Scales of random sign.
void block_q6_k(Rng& r, float std, uint8_t* b) {
  static const float sc_ms = mean_square(16, 127);
  r.bytes(b, 192);
  for (int j = 0; j < 16; ++j) b[192 + j] = uint8_t(int8_t(r.sign() * float(r.range(16, 127))));
  put_f16(b + 208, base_scale(std, sc_ms * mean_square(-32, 31)) * jitter(r));
}

// Q2_K: scales[16] (low nibble scale, high nibble min), qs[64], f16 d, f16 dmin.
void block_q2_k(Rng& r, float std, uint8_t* b) {
  static const float sc_ms = mean_square(4, 15);
  const float d = base_scale(std, sc_ms * 1.25f) * jitter(r);
  for (int j = 0; j < 16; ++j) {
    const int sc = r.range(4, 15);
    const int mn = int(std::lround(float(sc) / kMinRatio));
    b[j] = uint8_t(sc | (mn << 4));
  }
  r.bytes(b + 16, 64);
  put_f16(b + 80, d);
  put_f16(b + 82, d * 1.5f * kMinRatio);
}

// Q3_K: hmask[32], qs[64], scales[12] (16 six-bit values, stored +32), f16 d;
// y = d * (s - 32) * q3 with q3 in [-4, 3]. Signed scales centre the blocks.
void block_q3_k(Rng& r, float std, uint8_t* b) {
  static const float sc_ms = mean_square(8, 31);
  r.bytes(b, 96);
  int s[16];
  for (int j = 0; j < 16; ++j) s[j] = 32 + int(r.sign()) * r.range(8, 31);
  uint8_t* q = b + 96;
  for (int i = 0; i < 8; ++i) q[i] = uint8_t((s[i] & 15) | ((s[i + 8] & 15) << 4));
  for (int k = 0; k < 4; ++k) {
    uint8_t hi = 0;
    for (int g = 0; g < 4; ++g) hi |= uint8_t(((s[4 * g + k] >> 4) & 3) << (2 * g));
    q[8 + k] = hi;
  }
  put_f16(b + 108, base_scale(std, sc_ms * mean_square(-4, 3)) * jitter(r));
}

// IQ4_XS: f16 d, u16 scales_h, scales_l[4], qs[128]; sub-block scale d * (ls - 32) with ls a
// 6-bit value, quants index the IQ4_NL grid. Signed sub-block scales centre the blocks.
void block_iq4_xs(Rng& r, float std, uint8_t* b) {
  static const float sc_ms = mean_square(8, 31);
  put_f16(b, base_scale(std, sc_ms * kIq4nlMeanSquare) * jitter(r));
  uint16_t scales_h = 0;
  uint8_t* scales_l = b + 4;
  std::memset(scales_l, 0, 4);
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = 32 + int(r.sign()) * r.range(8, 31);
    scales_l[ib / 2] |= uint8_t((ls & 15) << (4 * (ib % 2)));
    scales_h |= uint16_t(((ls >> 4) & 3) << (2 * ib));
  }
  std::memcpy(b + 2, &scales_h, 2);
  r.bytes(b + 8, 128);
}

using BlockGenerator = void (*)(Rng&, float, uint8_t*);

struct DirectType {
  GgmlType type;
  BlockGenerator gen;
  int block_bytes;  // checked against the type table
};

constexpr DirectType kDirect[] = {
    {GgmlType::Q8_0, block_q8_0, 34},     {GgmlType::Q4_0, block_q4_0, 18},
    {GgmlType::Q4_1, block_q4_1, 20},     {GgmlType::Q5_0, block_q5_0, 22},
    {GgmlType::Q5_1, block_q5_1, 24},     {GgmlType::IQ4_NL, block_iq4_nl, 18},
    {GgmlType::Q2_K, block_q2_k, 84},     {GgmlType::Q3_K, block_q3_k, 110},
    {GgmlType::Q4_K, block_q4_k, 144},    {GgmlType::Q5_K, block_q5_k, 176},
    {GgmlType::Q6_K, block_q6_k, 210},    {GgmlType::IQ4_XS, block_iq4_xs, 136},
};

const DirectType* find_direct(GgmlType t) {
  for (const DirectType& d : kDirect)
    if (d.type == t) return &d;
  return nullptr;
}

bool is_float_type(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

// ---- rows ------------------------------------------------------------------------------------

float sample(Rng& r, const WeightInit& init) {
  if (init.kind == WeightInit::Kind::NegExp) return -std::exp(init.a + (init.b - init.a) * r.uniform());
  return init.a + init.b * r.normal();
}

void float_row(Rng& r, const WeightInit& init, GgmlType type, int64_t n, uint8_t* dst, std::vector<float>& buf) {
  switch (type) {
    case GgmlType::F32:
      for (int64_t i = 0; i < n; ++i) {
        const float v = sample(r, init);
        std::memcpy(dst + 4 * i, &v, 4);
      }
      return;
    case GgmlType::F16:
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const float v = sample(r, init);
        const uint16_t h = type == GgmlType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    default:  // any other type: Gaussian floats through the reference quantizer
      buf.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) buf[size_t(i)] = sample(r, init);
      quantize_row(type, buf.data(), dst, n);
  }
}

}  // namespace

bool can_generate(GgmlType t) { return is_float_type(t) || find_direct(t) != nullptr || can_quantize(t); }

void fill_tensor(const PlannedTensor& t, uint64_t seed, uint8_t* dst, ThreadPool& pool) {
  const int64_t ne0 = t.ne[0];
  int64_t rows = 1;
  for (size_t i = 1; i < t.ne.size(); ++i) rows *= t.ne[i];
  const TypeTraits& tr = type_traits(t.type);
  const size_t row_bytes = row_size(t.type, ne0);
  const uint64_t tensor_seed = splitmix64(seed ^ fnv1a(t.name));

  const DirectType* direct = find_direct(t.type);
  if (direct && direct->block_bytes != tr.type_size)
    fail("make-model: block generator for {} writes {} bytes but the type table says {}", tr.name,
         direct->block_bytes, tr.type_size);
  const bool use_direct = direct && t.init.kind == WeightInit::Kind::Normal && t.init.a == 0.0f;
  if (!use_direct && !is_float_type(t.type) && !can_quantize(t.type))
    fail("make-model: cannot write {} as {} (no generator or quantizer)", t.name, tr.name);

  // Rows of ~64 KiB per task keep the pool busy on small tensors without per-row overhead.
  const int64_t grain = std::max<int64_t>(1, int64_t(65536 / std::max<size_t>(row_bytes, 1)));
  pool.parallel_for(rows, grain, [&](int64_t begin, int64_t end, int) {
    std::vector<float> buf;
    for (int64_t row = begin; row < end; ++row) {
      Rng r = row_rng(tensor_seed, row);
      uint8_t* out = dst + size_t(row) * row_bytes;
      if (use_direct) {
        const int64_t n_blocks = ne0 / tr.block_size;
        for (int64_t k = 0; k < n_blocks; ++k) direct->gen(r, t.init.b, out + size_t(k) * size_t(tr.type_size));
      } else {
        float_row(r, t.init, t.type, ne0, out, buf);
      }
    }
  });
}

}  // namespace df::modelgen
