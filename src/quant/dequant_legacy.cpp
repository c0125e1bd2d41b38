// Dequantizers of the 32-element formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q8_1.
#include <cstring>

#include "quant/blocks.h"
#include "quant/dequant_rows.h"
#include "util/half.h"

// Keep ggml's float operations as written (see dequant_rows.h).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace df::quant {

void dequant_q4_0(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = float((x[i].qs[j] & 15) - 8) * d;
      y[j + 16] = float((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequant_q4_1(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d), m = f16_to_f32(x[i].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = float(x[i].qs[j] & 15) * d + m;
      y[j + 16] = float(x[i].qs[j] >> 4) * d + m;
    }
  }
}

// The 5th bits: bit j of the little-endian u32 qh belongs to element j (0..31).
static inline uint32_t load_qh(const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return h;
}

void dequant_q5_0(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d);
    const uint32_t h = load_qh(x[i].qh);
    for (int j = 0; j < 16; ++j) {
      const int x0 = int((x[i].qs[j] & 15) | (((h >> j) & 1) << 4)) - 16;
      const int x1 = int((x[i].qs[j] >> 4) | (((h >> (j + 16)) & 1) << 4)) - 16;
      y[j] = float(x0) * d;
      y[j + 16] = float(x1) * d;
    }
  }
}

void dequant_q5_1(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d), m = f16_to_f32(x[i].m);
    const uint32_t h = load_qh(x[i].qh);
    for (int j = 0; j < 16; ++j) {
      const int x0 = int((x[i].qs[j] & 15) | (((h >> j) & 1) << 4));
      const int x1 = int((x[i].qs[j] >> 4) | (((h >> (j + 16)) & 1) << 4));
      y[j] = float(x0) * d + m;
      y[j + 16] = float(x1) * d + m;
    }
  }
}

void dequant_q8_0(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = float(x[i].qs[j]) * d;
  }
}

void dequant_q8_1(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ8_1*>(src);
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = float(x[i].qs[j]) * d;
  }
}

}  // namespace df::quant
