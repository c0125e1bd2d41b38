// Activation quantizers Q8_0, Q8_1 and Q8_K. Their rounding is exactly that of ggml's
// reference quantizers, so a product computed here sees the same integer activations as the
// same product in llama.cpp's reference path. Written with vector extensions (8 lanes):
// activations are converted once per matmul, so this is cheap next to the dot products.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/quantize_rows.h"
#include "quant/vec8.h"
#include "util/half.h"

namespace df::quant {

namespace {

using i8x8 = int8_t __attribute__((vector_size(8)));

inline f32x8 vabs(f32x8 v) {
  u32x8 u;
  std::memcpy(&u, &v, sizeof u);
  u &= 0x7fffffffu;
  std::memcpy(&v, &u, sizeof v);
  return v;
}
inline float hmax(f32x8 v) {
  float m = v[0];
  for (int i = 1; i < 8; ++i) m = std::max(m, v[i]);
  return m;
}

// roundf (halves away from zero): add the float just below 0.5 with the value's sign, then
// truncate. The sum rounds up exactly when the fraction is >= 0.5.
inline i32x8 round_away(f32x8 v) {
  u32x8 bits, half;
  std::memcpy(&bits, &v, sizeof bits);
  const f32x8 h0 = f32x8{} + 0.49999997f;
  std::memcpy(&half, &h0, sizeof half);
  half |= bits & 0x80000000u;
  f32x8 h;
  std::memcpy(&h, &half, sizeof h);
  return __builtin_convertvector(v + h, i32x8);
}

inline void store8(int8_t* dst, i32x8 v) {
  const i8x8 b = __builtin_convertvector(v, i8x8);
  std::memcpy(dst, &b, 8);
}

// Shared body of Q8_0 / Q8_1: d = amax / 127, q = roundf(x / d) via the reciprocal as ggml.
// Returns the sum of the 32 quants.
inline int quantize_block_q8(const float* x, uint16_t& d16, int8_t* qs, float& d_out) {
  f32x8 v[4], amax{};
  for (int k = 0; k < 4; ++k) {
    v[k] = load8(x + 8 * k);
    const f32x8 a = vabs(v[k]);
    amax = amax > a ? amax : a;
  }
  const float d = hmax(amax) / 127.f;
  const float id = d != 0.f ? 1.0f / d : 0.0f;
  d16 = f32_to_f16(d);
  d_out = d;
  i32x8 sum{};
  for (int k = 0; k < 4; ++k) {
    const i32x8 q = round_away(v[k] * id);
    sum += q;
    store8(qs + 8 * k, q);
  }
  int s = 0;
  for (int i = 0; i < 8; ++i) s += sum[i];
  return s;
}

}  // namespace

void quantize_q8_0(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float d;
    quantize_block_q8(x, y[i].d, y[i].qs, d);
  }
}

void quantize_q8_1(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float d;
    const int sum = quantize_block_q8(x, y[i].d, y[i].qs, d);
    y[i].s = f32_to_f16(float(sum) * d);
  }
}

// Q8_K: scale from the signed value of largest magnitude (the first one on ties), so that
// value maps to -127 exactly; rounding ties to even; bsums feed the K-quant min/offset terms.
void quantize_q8_k(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    f32x8 amax_v{};
    for (int k = 0; k < kQKK / 8; ++k) {
      const f32x8 a = vabs(load8(x + 8 * k));
      amax_v = amax_v > a ? amax_v : a;
    }
    const float amax = hmax(amax_v);
    if (!(amax > 0.f)) {
      std::memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    float max = 0;
    for (int j = 0; j < kQKK; ++j)
      if (std::fabs(x[j]) == amax) {
        max = x[j];
        break;
      }
    const float iscale = -127.f / max;
    for (int k = 0; k < kQKK / 8; ++k) {
      i32x8 q = round_even8(load8(x + 8 * k) * iscale);
      q = q > 127 ? i32x8{} + 127 : q;
      store8(y[i].qs + 8 * k, q);
    }
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += y[i].qs[16 * j + l];
      y[i].bsums[j] = int16_t(s);
    }
    y[i].d = 1 / iscale;
  }
}

}  // namespace df::quant
