// Dequantizers of the 256-element K-quant super-blocks: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.
// The float expressions mirror ggml's operation order exactly, e.g. Q4_K computes
// (d*sc)*q - (dmin*m) with the two products rounded first.
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

void dequant_q2_k(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ2_K*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d), dmin = f16_to_f32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2) {
        for (int run = 0; run < 2; ++run) {
          const uint8_t sc = x[i].scales[is++];
          const float dl = d * float(sc & 15), ml = dmin * float(sc >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * float((q[l + 16 * run] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void dequant_q3_k(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ3_K*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    int8_t sc[16];
    q3k_scales(x[i].scales, sc);
    const uint8_t* q = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    uint8_t m = 1;
    int is = 0;
    for (int half = 0; half < 2; ++half, q += 32) {
      for (int shift = 0; shift < 8; shift += 2, m = uint8_t(m << 1)) {
        for (int run = 0; run < 2; ++run) {
          const float dl = d * float(sc[is++]);
          for (int l = 16 * run; l < 16 * run + 16; ++l) {
            const int v = int((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
            *y++ = dl * float(v);
          }
        }
      }
    }
  }
}

void dequant_q4_k(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d), dmin = f16_to_f32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int g = 0; g < 4; ++g, q += 32) {
      uint8_t sc, mn;
      k4_scale_min(x[i].scales, 2 * g, sc, mn);
      const float d1 = d * float(sc), m1 = dmin * float(mn);
      k4_scale_min(x[i].scales, 2 * g + 1, sc, mn);
      const float d2 = d * float(sc), m2 = dmin * float(mn);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 15) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
    }
  }
}

void dequant_q5_k(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d), dmin = f16_to_f32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    const uint8_t* qh = x[i].qh;
    for (int g = 0; g < 4; ++g, q += 32) {
      uint8_t sc, mn;
      k4_scale_min(x[i].scales, 2 * g, sc, mn);
      const float d1 = d * float(sc), m1 = dmin * float(mn);
      k4_scale_min(x[i].scales, 2 * g + 1, sc, mn);
      const float d2 = d * float(sc), m2 = dmin * float(mn);
      const uint8_t u1 = uint8_t(1u << (2 * g)), u2 = uint8_t(2u << (2 * g));
      for (int l = 0; l < 32; ++l) *y++ = d1 * float((q[l] & 15) + ((qh[l] & u1) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float((q[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    }
  }
}

void dequant_q6_k(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int half = 0; half < 2; ++half, y += 128) {
      const uint8_t* ql = x[i].ql + 64 * half;
      const uint8_t* qh = x[i].qh + 32 * half;
      const int8_t* sc = x[i].scales + 8 * half;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = int((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = int((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * float(sc[is]) * float(q1);
        y[l + 32] = d * float(sc[is + 2]) * float(q2);
        y[l + 64] = d * float(sc[is + 4]) * float(q3);
        y[l + 96] = d * float(sc[is + 6]) * float(q4);
      }
    }
  }
}

void dequant_q8_k(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < nb; ++i, y += kQKK)
    for (int j = 0; j < kQKK; ++j) y[j] = x[i].d * float(x[i].qs[j]);
}

}  // namespace df::quant
