// Scalar dot kernels for every supported weight type: the reference for the SIMD kernels and
// the path of builds without AVX2. Integer sums per block (exact), one float scale per block,
// the way llama.cpp's generic kernels are organised.
#include <cstring>

#include "quant/blocks.h"
#include "quant/vec_dot_kernels.h"
#include "util/half.h"

namespace df::quant {

namespace {

float dot_f32(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  double s = 0;  // double: the scalar path is a reference, not a hot loop
  for (int64_t i = 0; i < n; ++i) s += double(x[i]) * y[i];
  return float(s);
}

float dot_f16(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(f16_to_f32(x[i])) * f16_to_f32(y[i]);
  return float(s);
}

float dot_bf16(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(bf16_to_f32(x[i])) * bf16_to_f32(y[i]);
  return float(s);
}

// 32 weight values of a legacy block times a Q8_0/Q8_1 block's quants.
int dot32(const int8_t* q, const int8_t* a) {
  int s = 0;
  for (int j = 0; j < 32; ++j) s += q[j] * a[j];
  return s;
}

// Legacy blocks store element j in the low nibble of byte j and element j+16 in the high one.
void unpack_nibbles(const uint8_t* qs, int offset, int8_t* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = int8_t((qs[j] & 15) - offset);
    q[j + 16] = int8_t((qs[j] >> 4) - offset);
  }
}

void unpack_fifth_bits(const uint8_t* qh_bytes, int8_t* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 32; ++j) q[j] = int8_t(q[j] + int(((qh >> j) & 1) << 4));
}

float dot_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float s = 0;
  for (int64_t i = 0; i < n / kQK; ++i) s += float(dot32(x[i].qs, y[i].qs)) * (f16_to_f32(x[i].d) * f16_to_f32(y[i].d));
  return s;
}

float dot_q4_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float s = 0;
  int8_t q[32];
  for (int64_t i = 0; i < n / kQK; ++i) {
    unpack_nibbles(x[i].qs, 8, q);
    s += float(dot32(q, y[i].qs)) * (f16_to_f32(x[i].d) * f16_to_f32(y[i].d));
  }
  return s;
}

// Q4_1 / Q5_1: y = d*q + m, so the block dot is d*da*sum(q*a) + m*(da*sum(a)) and the second
// factor is the activation's precomputed s.
float dot_q4_1(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float s = 0;
  int8_t q[32];
  for (int64_t i = 0; i < n / kQK; ++i) {
    unpack_nibbles(x[i].qs, 0, q);
    s += float(dot32(q, y[i].qs)) * (f16_to_f32(x[i].d) * f16_to_f32(y[i].d)) + f16_to_f32(x[i].m) * f16_to_f32(y[i].s);
  }
  return s;
}

float dot_q5_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float s = 0;
  int8_t q[32];
  for (int64_t i = 0; i < n / kQK; ++i) {
    unpack_nibbles(x[i].qs, 0, q);
    unpack_fifth_bits(x[i].qh, q);
    for (int8_t& v : q) v = int8_t(v - 16);
    s += float(dot32(q, y[i].qs)) * (f16_to_f32(x[i].d) * f16_to_f32(y[i].d));
  }
  return s;
}

float dot_q5_1(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* y = static_cast<const BlockQ8_1*>(a);
  float s = 0;
  int8_t q[32];
  for (int64_t i = 0; i < n / kQK; ++i) {
    unpack_nibbles(x[i].qs, 0, q);
    unpack_fifth_bits(x[i].qh, q);
    s += float(dot32(q, y[i].qs)) * (f16_to_f32(x[i].d) * f16_to_f32(y[i].d)) + f16_to_f32(x[i].m) * f16_to_f32(y[i].s);
  }
  return s;
}

float dot_iq4_nl(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockIQ4_NL*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float s = 0;
  int8_t q[32];
  for (int64_t i = 0; i < n / kQK; ++i) {
    for (int j = 0; j < 16; ++j) {
      q[j] = kIQ4Values[x[i].qs[j] & 15];
      q[j + 16] = kIQ4Values[x[i].qs[j] >> 4];
    }
    s += float(dot32(q, y[i].qs)) * (f16_to_f32(x[i].d) * f16_to_f32(y[i].d));
  }
  return s;
}

// --- K-quants against Q8_K ------------------------------------------------------------

// sum over groups g of scale[g] * sum_{l < len} q[g*len + l] * a[g*len + l], for 256 values.
int scaled_groups(const int8_t* q, const int8_t* a, const int* scale, int len) {
  int total = 0;
  for (int g = 0; g < 256 / len; ++g) {
    int s = 0;
    for (int l = 0; l < len; ++l) s += q[g * len + l] * a[g * len + l];
    total += scale[g] * s;
  }
  return total;
}

float dot_q2_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ2_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float s = 0;
  int8_t q[256];
  int sc[16];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int msum = 0;
    for (int j = 0; j < 16; ++j) {
      sc[j] = x[i].scales[j] & 15;
      msum += (x[i].scales[j] >> 4) * y[i].bsums[j];
    }
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 4; ++k)
        for (int b = 0; b < 32; ++b) q[128 * h + 32 * k + b] = int8_t((x[i].qs[32 * h + b] >> (2 * k)) & 3);
    const float da = y[i].d;
    s += da * f16_to_f32(x[i].d) * float(scaled_groups(q, y[i].qs, sc, 16)) - da * f16_to_f32(x[i].dmin) * float(msum);
  }
  return s;
}

float dot_q3_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ3_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float s = 0;
  int8_t q[256], sc8[16];
  int sc[16];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    q3k_scales(x[i].scales, sc8);
    for (int j = 0; j < 16; ++j) sc[j] = sc8[j];
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 4; ++k)
        for (int b = 0; b < 32; ++b) {
          const int low = (x[i].qs[32 * h + b] >> (2 * k)) & 3;
          const bool high = x[i].hmask[b] & (1u << (4 * h + k));
          q[128 * h + 32 * k + b] = int8_t(low - (high ? 0 : 4));
        }
    s += y[i].d * f16_to_f32(x[i].d) * float(scaled_groups(q, y[i].qs, sc, 16));
  }
  return s;
}

// Q4_K / Q5_K: sum_j d*sc_j*dot_j - dmin*m_j*(sum of the sub-block's activations).
float k4_block(float d, float dmin, const uint8_t* scales12, const int8_t* q, const BlockQ8_K& y) {
  int sc[8], msum = 0;
  for (int j = 0; j < 8; ++j) {
    uint8_t s, m;
    k4_scale_min(scales12, j, s, m);
    sc[j] = s;
    msum += m * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
  }
  return y.d * d * float(scaled_groups(q, y.qs, sc, 32)) - y.d * dmin * float(msum);
}

float dot_q4_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float s = 0;
  int8_t q[256];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    for (int g = 0; g < 4; ++g)
      for (int l = 0; l < 32; ++l) {
        q[64 * g + l] = int8_t(x[i].qs[32 * g + l] & 15);
        q[64 * g + 32 + l] = int8_t(x[i].qs[32 * g + l] >> 4);
      }
    s += k4_block(f16_to_f32(x[i].d), f16_to_f32(x[i].dmin), x[i].scales, q, y[i]);
  }
  return s;
}

float dot_q5_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float s = 0;
  int8_t q[256];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    for (int g = 0; g < 4; ++g)
      for (int l = 0; l < 32; ++l) {
        const uint8_t h = x[i].qh[l];
        q[64 * g + l] = int8_t((x[i].qs[32 * g + l] & 15) | (((h >> (2 * g)) & 1) << 4));
        q[64 * g + 32 + l] = int8_t((x[i].qs[32 * g + l] >> 4) | (((h >> (2 * g + 1)) & 1) << 4));
      }
    s += k4_block(f16_to_f32(x[i].d), f16_to_f32(x[i].dmin), x[i].scales, q, y[i]);
  }
  return s;
}

float dot_q6_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float s = 0;
  int8_t q[256];
  int sc[16];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    for (int j = 0; j < 16; ++j) sc[j] = x[i].scales[j];
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = x[i].ql + 64 * h;
      const uint8_t* qh = x[i].qh + 32 * h;
      int8_t* o = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        o[l] = int8_t(((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32);
        o[l + 32] = int8_t(((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32);
        o[l + 64] = int8_t(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        o[l + 96] = int8_t(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
    s += y[i].d * f16_to_f32(x[i].d) * float(scaled_groups(q, y[i].qs, sc, 16));
  }
  return s;
}

float dot_iq4_xs(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockIQ4_XS*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float s = 0;
  int8_t q[256];
  int sc[8];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    for (int ib = 0; ib < 8; ++ib) {
      sc[ib] = (((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | (((x[i].scales_h >> (2 * ib)) & 3) << 4)) - 32;
      for (int j = 0; j < 16; ++j) {
        q[32 * ib + j] = kIQ4Values[x[i].qs[16 * ib + j] & 15];
        q[32 * ib + j + 16] = kIQ4Values[x[i].qs[16 * ib + j] >> 4];
      }
    }
    s += y[i].d * f16_to_f32(x[i].d) * float(scaled_groups(q, y[i].qs, sc, 32));
  }
  return s;
}

}  // namespace

DotFn scalar_dot(GgmlType wt) {
  switch (wt) {
    case GgmlType::F32: return dot_f32;
    case GgmlType::F16: return dot_f16;
    case GgmlType::BF16: return dot_bf16;
    case GgmlType::Q8_0: return dot_q8_0;
    case GgmlType::Q4_0: return dot_q4_0;
    case GgmlType::Q4_1: return dot_q4_1;
    case GgmlType::Q5_0: return dot_q5_0;
    case GgmlType::Q5_1: return dot_q5_1;
    case GgmlType::IQ4_NL: return dot_iq4_nl;
    case GgmlType::Q2_K: return dot_q2_k;
    case GgmlType::Q3_K: return dot_q3_k;
    case GgmlType::Q4_K: return dot_q4_k;
    case GgmlType::Q5_K: return dot_q5_k;
    case GgmlType::Q6_K: return dot_q6_k;
    case GgmlType::IQ4_XS: return dot_iq4_xs;
    default: return nullptr;
  }
}

}  // namespace df::quant
