// Quantizers of the legacy 32-element weight formats Q4_0, Q4_1, Q5_0 and Q5_1, with ggml's
// reference rounding: one scale (and min) per block straight from the block's range. These
// formats are not the project's main targets, so no error search is done.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/quantize_rows.h"
#include "util/half.h"

namespace df::quant {

namespace {

// Signed value of largest magnitude (first one on ties).
float signed_absmax(const float* x, int n) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  return max;
}

void min_max(const float* x, int n, float& mn, float& mx) {
  mn = FLT_MAX;
  mx = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    mn = std::min(mn, x[j]);
    mx = std::max(mx, x[j]);
  }
}

}  // namespace

// Symmetric 4-bit: the extreme value maps to -8 (the grid has one more negative level).
void quantize_q4_0(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    const float d = signed_absmax(x, kQK) / -8;
    const float id = d != 0.f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, int(int8_t(x[j] * id + 8.5f)));
      const int q1 = std::min(15, int(int8_t(x[j + 16] * id + 8.5f)));
      y[i].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void quantize_q4_1(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ4_1*>(dst);
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float mn, mx;
    min_max(x, kQK, mn, mx);
    const float d = (mx - mn) / 15;
    const float id = d != 0.f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(mn);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, int(int8_t((x[j] - mn) * id + 0.5f)));
      const int q1 = std::min(15, int(int8_t((x[j + 16] - mn) * id + 0.5f)));
      y[i].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

// Packs 32 five-bit values: low nibbles in qs (elements j and j+16 share a byte), the fifth
// bit of element j in bit j of qh.
static void pack5(const int* q, uint8_t* qs, uint8_t* qh_bytes) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = uint8_t((q[j] & 15) | ((q[j + 16] & 15) << 4));
    qh |= uint32_t((q[j] >> 4) & 1) << j;
    qh |= uint32_t((q[j + 16] >> 4) & 1) << (j + 16);
  }
  std::memcpy(qh_bytes, &qh, 4);
}

void quantize_q5_0(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ5_0*>(dst);
  int q[kQK];
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    const float d = signed_absmax(x, kQK) / -16;
    const float id = d != 0.f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK; ++j) q[j] = std::min(31, int(int8_t(x[j] * id + 16.5f)));
    pack5(q, y[i].qs, y[i].qh);
  }
}

void quantize_q5_1(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ5_1*>(dst);
  int q[kQK];
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float mn, mx;
    min_max(x, kQK, mn, mx);
    const float d = (mx - mn) / 31;
    const float id = d != 0.f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(mn);
    for (int j = 0; j < kQK; ++j) q[j] = std::min(31, int(uint8_t((x[j] - mn) * id + 0.5f)));
    pack5(q, y[i].qs, y[i].qh);
  }
}

}  // namespace df::quant
