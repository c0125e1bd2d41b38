// Dequantizers of the non-linear 4-bit formats IQ4_NL (32-element blocks) and IQ4_XS
// (256-element super-blocks with 6-bit sub-block scales).
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

void dequant_iq4_nl(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * float(kIQ4Values[x[i].qs[j] & 15]);
      y[j + 16] = d * float(kIQ4Values[x[i].qs[j] >> 4]);
    }
  }
}

void dequant_iq4_xs(const void* src, float* y, int64_t nb) {
  const auto* x = static_cast<const BlockIQ4_XS*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int ib = 0; ib < 8; ++ib, y += 32) {
      const int ls = ((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | (((x[i].scales_h >> (2 * ib)) & 3) << 4);
      const float dl = d * float(ls - 32);
      const uint8_t* qs = x[i].qs + 16 * ib;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * float(kIQ4Values[qs[j] & 15]);
        y[j + 16] = dl * float(kIQ4Values[qs[j] >> 4]);
      }
    }
  }
}

}  // namespace df::quant
