// IQ4_NL and IQ4_XS quantizers: values come from the fixed non-linear code book kIQ4Values,
// so each 32-element group searches a scale whose code-book snapping leaves the least
// x^2-weighted squared error, as llama.cpp does without importance matrix. IQ4_XS then
// quantizes the 8 group scales to 6 signed bits and re-snaps each group to its final scale.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/quantize_rows.h"
#include "quant/scale_search.h"
#include "quant/vec8.h"
#include "util/half.h"

namespace df::quant {

namespace {

constexpr int kTries = 16;  // candidate scales per end of the code book (offsets -7..8)

struct CodeBook {
  float mid[15];   // decision boundaries between neighbouring code values
  float step[15];  // value increase when crossing boundary k
};

constexpr CodeBook make_book() {
  CodeBook b{};
  for (int k = 0; k < 15; ++k) {
    b.mid[k] = 0.5f * float(kIQ4Values[k] + kIQ4Values[k + 1]);
    b.step[k] = float(kIQ4Values[k + 1] - kIQ4Values[k]);
  }
  return b;
}
constexpr CodeBook kBook = make_book();

// Nearest code value of each lane (ties go to the larger value), as a float.
inline f32x8 snap(f32x8 v) {
  f32x8 q = splat8(float(kIQ4Values[0]));
  for (int k = 0; k < 15; ++k) q += v >= kBook.mid[k] ? kBook.step[k] : 0.f;
  return q;
}

// Index of the nearest code value, same tie rule as snap.
inline uint8_t nearest_code(float v) {
  int idx = 0;
  for (int k = 0; k < 15; ++k) idx += v >= kBook.mid[k];
  return uint8_t(idx);
}

// Best float scale for 32 values (0 for an all-zero group). Candidates put the extreme value
// near either end of the code book (-127 or +113: the book is asymmetric); they are
// evaluated one per vector lane, 32 at once.
float fit_group(const float* x) {
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  if (amax < 1e-15f) return 0.f;
  constexpr int kVecs = 2 * kTries / 8;
  f32x8 id[kVecs];
  for (int c = 0; c < 2 * kTries; ++c) {
    const float end = c < kTries ? kIQ4Values[0] : kIQ4Values[15];
    id[c / 8][c % 8] = (end + float(c % kTries - kTries / 2 + 1)) / max;
  }
  // With error weights x^2 the least-squares scale for the chosen codes q is
  // sum(w q x) / sum(w q^2), and the error left falls as sum(w q x)^2 / sum(w q^2) rises.
  f32x8 sqx[kVecs] = {}, sq2[kVecs] = {};
  for (int j = 0; j < 32; ++j) {
    const float xj = x[j], wj = xj * xj;
    for (int k = 0; k < kVecs; ++k) {
      const f32x8 q = snap(id[k] * xj);
      const f32x8 wq = wj * q;
      sqx[k] += wq * xj;
      sq2[k] += wq * q;
    }
  }
  float best_d = 0, best = 0;
  for (int c = 0; c < 2 * kTries; ++c) {
    const float a = sqx[c / 8][c % 8], b = sq2[c / 8][c % 8];
    if (b > 0 && a * a > best * b) {
      best_d = a / b;
      best = best_d * a;
    }
  }
  return best_d;
}

// Code indices of 32 values at scale d, packed two per byte (j and j+16 share byte j).
void encode_group(const float* x, float d, uint8_t* qs) {
  const float id = d != 0.f ? 1.f / d : 0.f;
  for (int j = 0; j < 16; ++j) qs[j] = uint8_t(nearest_code(x[j] * id) | (nearest_code(x[j + 16] * id) << 4));
}

}  // namespace

void quantize_iq4_nl(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockIQ4_NL*>(dst);
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    y[i].d = f32_to_f16(fit_group(x));
    encode_group(x, f16_to_f32(y[i].d), y[i].qs);
  }
}

void quantize_iq4_xs(const float* x, void* dst, int64_t nb) {
  auto* y = static_cast<BlockIQ4_XS*>(dst);
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float scales[8], max_scale = 0, max_abs = 0;
    for (int ib = 0; ib < 8; ++ib) {
      scales[ib] = fit_group(x + 32 * ib);
      if (std::fabs(scales[ib]) > max_abs) {
        max_abs = std::fabs(scales[ib]);
        max_scale = scales[ib];
      }
    }
    std::memset(&y[i], 0, sizeof y[i]);
    if (max_abs == 0.f) continue;  // all zero: d = 0
    // Largest group scale maps to -32, the end of the 6-bit grid with the extra level.
    const float d = -max_scale / 32.f;
    y[i].d = f32_to_f16(d);
    const float dq = f16_to_f32(y[i].d);
    const float id = dq != 0.f ? 1.f / dq : 0.f;
    for (int ib = 0; ib < 8; ++ib) {
      const int l = std::clamp(nearest_int(id * scales[ib]), -32, 31);
      const int ls = l + 32;
      y[i].scales_l[ib / 2] |= uint8_t((ls & 15) << (4 * (ib % 2)));
      y[i].scales_h |= uint16_t((ls >> 4) << (2 * ib));
      encode_group(x + 32 * ib, dq * float(l), y[i].qs + 16 * ib);
    }
  }
}

}  // namespace df::quant
