// K-quant quantizers (Q2_K ... Q6_K). Each super-block of 256 is split into sub-blocks whose
// scales (and mins) are first fitted in float by a small grid search (scale_search.cpp),
// then themselves quantized to 4/6/8 bits against one f16 super-block scale; finally every
// weight is re-rounded against its actual, quantized scale so no error from the scale
// quantization is left uncorrected.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/quantize_rows.h"
#include "quant/scale_search.h"
#include "util/half.h"

namespace df::quant {

namespace {

// Error weights for the asymmetric fits: the group's RMS plus |x|, so large values count more
// without letting the smallest ones go to zero weight (llama.cpp's choice for Q4_K/Q5_K).
void rms_plus_abs_weights(const float* x, int n, float* w) {
  float sum_x2 = 0;
  for (int l = 0; l < n; ++l) sum_x2 += x[l] * x[l];
  const float av = std::sqrt(sum_x2 / float(n));
  for (int l = 0; l < n; ++l) w[l] = av + std::fabs(x[l]);
}

// Q4_K / Q5_K share everything but the grid size (15 or 31) and the search parameters.
// Fits 8 sub-blocks of 32, quantizes their scales and mins to 6 bits, re-rounds the weights.
void fit_k4_superblock(const float* x, int nmax, float rmin, int nstep, uint16_t& d16, uint16_t& dmin16,
                       uint8_t scales12[12], uint8_t L[256]) {
  float scales[8], mins[8], w[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    rms_plus_abs_weights(x + 32 * j, 32, w);
    scales[j] = fit_affine(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep, false);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = uint8_t(std::min(63, nearest_int(inv_scale * scales[j])));
    lm[j] = uint8_t(std::min(63, nearest_int(inv_min * mins[j])));
  }
  // 6-bit packing, the inverse of k4_scale_min.
  for (int j = 0; j < 4; ++j) {
    scales12[j] = uint8_t(ls[j] | ((ls[j + 4] >> 4) << 6));
    scales12[j + 4] = uint8_t(lm[j] | ((lm[j + 4] >> 4) << 6));
    scales12[j + 8] = uint8_t((ls[j + 4] & 15) | ((lm[j + 4] & 15) << 4));
  }
  d16 = f32_to_f16(max_scale / 63.f);
  dmin16 = f32_to_f16(max_min / 63.f);
  const float d = f16_to_f32(d16), dmin = f16_to_f32(dmin16);
  for (int j = 0; j < 8; ++j) {
    const float dj = d * float(ls[j]);
    if (dj == 0.f) continue;
    const float mj = dmin * float(lm[j]);
    const float inv = 1.f / dj;
    for (int l = 0; l < 32; ++l) L[32 * j + l] = uint8_t(std::clamp(nearest_int((x[32 * j + l] + mj) * inv), 0, nmax));
  }
}

}  // namespace

void quantize_q4_k(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ4_K*>(dst);
  uint8_t L[256];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    fit_k4_superblock(x, 15, -1.f, 20, y[i].d, y[i].dmin, y[i].scales, L);
    // Sub-blocks 2g and 2g+1 share bytes 32g..32g+31: low and high nibbles.
    for (int g = 0; g < 4; ++g)
      for (int l = 0; l < 32; ++l) y[i].qs[32 * g + l] = uint8_t(L[64 * g + l] | (L[64 * g + 32 + l] << 4));
  }
}

void quantize_q5_k(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ5_K*>(dst);
  uint8_t L[256];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    fit_k4_superblock(x, 31, -0.5f, 15, y[i].d, y[i].dmin, y[i].scales, L);
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    for (int g = 0; g < 4; ++g)
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = L[64 * g + l], hi = L[64 * g + 32 + l];
        y[i].qs[32 * g + l] = uint8_t((lo & 15) | ((hi & 15) << 4));
        y[i].qh[l] |= uint8_t(((lo >> 4) << (2 * g)) | ((hi >> 4) << (2 * g + 1)));
      }
  }
}

// Q6_K: 16 sub-blocks of 16 with signed 8-bit scales; the largest-magnitude scale maps to
// -128 so the scale grid uses its full range.
void quantize_q6_k(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ6_K*>(dst);
  uint8_t L[256];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float scales[16], max_scale = 0, max_abs = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = fit_symmetric(16, 32, x + 16 * j, L + 16 * j);
      if (std::fabs(scales[j]) > max_abs) {
        max_abs = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    if (max_abs < 1e-15f) {
      std::memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[i].d = f32_to_f16(1 / iscale);
    for (int j = 0; j < 16; ++j) y[i].scales[j] = int8_t(std::min(127, nearest_int(iscale * scales[j])));
    const float d = f16_to_f32(y[i].d);
    for (int j = 0; j < 16; ++j) {
      const float dj = d * float(y[i].scales[j]);
      if (dj == 0.f) {
        std::fill(L + 16 * j, L + 16 * j + 16, uint8_t(32));
        continue;
      }
      const float inv = 1.f / dj;
      for (int l = 0; l < 16; ++l) L[16 * j + l] = uint8_t(std::clamp(nearest_int(x[16 * j + l] * inv), -32, 31) + 32);
    }
    // Each half of 128: element l, l+32, l+64, l+96 share ql/qh bytes (see dequant_q6_k).
    for (int h = 0; h < 2; ++h) {
      const uint8_t* Lh = L + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = Lh[l], q2 = Lh[l + 32], q3 = Lh[l + 64], q4 = Lh[l + 96];
        y[i].ql[64 * h + l] = uint8_t((q1 & 15) | ((q3 & 15) << 4));
        y[i].ql[64 * h + l + 32] = uint8_t((q2 & 15) | ((q4 & 15) << 4));
        y[i].qh[32 * h + l] = uint8_t((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
    }
  }
}

// Q3_K: 16 sub-blocks of 16 on the symmetric grid [-4, 3], 6-bit signed sub-block scales.
void quantize_q3_k(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ3_K*>(dst);
  uint8_t L[256];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    std::memset(&y[i], 0, sizeof y[i]);
    float scales[16], max_scale = 0, max_abs = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = fit_symmetric(16, 4, x + 16 * j, L + 16 * j);
      if (std::fabs(scales[j]) > max_abs) {
        max_abs = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    if (max_abs < 1e-15f) continue;  // all zero: d = 0
    const float iscale = -32.f / max_scale;
    int8_t sc[16];
    for (int j = 0; j < 16; ++j) {
      const int l = std::clamp(nearest_int(iscale * scales[j]), -32, 31) + 32;
      sc[j] = int8_t(l - 32);
      if (j < 8) y[i].scales[j] = uint8_t(l & 15);
      else y[i].scales[j - 8] |= uint8_t((l & 15) << 4);
      y[i].scales[8 + j % 4] |= uint8_t((l >> 4) << (2 * (j / 4)));
    }
    y[i].d = f32_to_f16(1 / iscale);
    const float d = f16_to_f32(y[i].d);
    for (int j = 0; j < 16; ++j) {
      const float dj = d * float(sc[j]);
      if (dj == 0.f) {
        std::fill(L + 16 * j, L + 16 * j + 16, uint8_t(4));
        continue;
      }
      const float inv = 1.f / dj;
      for (int l = 0; l < 16; ++l) L[16 * j + l] = uint8_t(std::clamp(nearest_int(x[16 * j + l] * inv), -4, 3) + 4);
    }
    // Element 128h + 32k + b: low 2 bits in qs[32h + b] at bit 2k, high bit in hmask[b] at
    // bit 4h + k (set means "no -4 offset").
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 4; ++k)
        for (int b = 0; b < 32; ++b) {
          const uint8_t q = L[128 * h + 32 * k + b];
          y[i].qs[32 * h + b] |= uint8_t((q & 3) << (2 * k));
          if (q > 3) y[i].hmask[b] |= uint8_t(1u << (4 * h + k));
        }
  }
}

// Q2_K: 16 sub-blocks of 16 on [0, 3] with 4-bit scales and mins, fitted to the absolute
// error as llama.cpp does (2-bit grids are too coarse for the squared error to behave).
void quantize_q2_k(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockQ2_K*>(dst);
  uint8_t L[256];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float scales[16], mins[16], w[16], max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) w[l] = std::fabs(x[16 * j + l]);
      scales[j] = fit_affine(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    const float inv_scale = max_scale > 0 ? 15.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 15.f / max_min : 0.f;
    for (int j = 0; j < 16; ++j) {
      const int ls = std::min(15, nearest_int(inv_scale * scales[j]));
      const int lm = std::min(15, nearest_int(inv_min * mins[j]));
      y[i].scales[j] = uint8_t(ls | (lm << 4));
    }
    y[i].d = f32_to_f16(max_scale / 15.f);
    y[i].dmin = f32_to_f16(max_min / 15.f);
    const float d = f16_to_f32(y[i].d), dmin = f16_to_f32(y[i].dmin);
    for (int j = 0; j < 16; ++j) {
      const float dj = d * float(y[i].scales[j] & 15);
      if (dj == 0.f) continue;
      const float mj = dmin * float(y[i].scales[j] >> 4);
      const float inv = 1.f / dj;
      for (int l = 0; l < 16; ++l) L[16 * j + l] = uint8_t(std::clamp(nearest_int((x[16 * j + l] + mj) * inv), 0, 3));
    }
    // Element 128h + 32k + b lives in qs[32h + b] at bit 2k.
    for (int h = 0; h < 2; ++h)
      for (int b = 0; b < 32; ++b) {
        const uint8_t* Lh = L + 128 * h + b;
        y[i].qs[32 * h + b] = uint8_t(Lh[0] | (Lh[32] << 2) | (Lh[64] << 4) | (Lh[96] << 6));
      }
  }
}

}  // namespace df::quant
