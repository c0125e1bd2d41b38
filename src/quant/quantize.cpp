// quantize_row: dispatch on the type to the per-family quantizers.
#include "quant/quantize.h"

#include <cstring>

#include "quant/blocks.h"
#include "quant/quantize_rows.h"
#include "util/error.h"
#include "util/half.h"

namespace df {

namespace {

using QuantizeFn = void (*)(const float*, void*, int64_t);

// Block quantizer and its block size, or nullptr.
QuantizeFn block_quantizer(GgmlType t, int& block) {
  using namespace quant;
  block = kQK;
  switch (t) {
    case GgmlType::Q4_0: return quantize_q4_0;
    case GgmlType::Q4_1: return quantize_q4_1;
    case GgmlType::Q5_0: return quantize_q5_0;
    case GgmlType::Q5_1: return quantize_q5_1;
    case GgmlType::Q8_0: return quantize_q8_0;
    case GgmlType::Q8_1: return quantize_q8_1;
    case GgmlType::IQ4_NL: return quantize_iq4_nl;
    default: break;
  }
  block = kQKK;
  switch (t) {
    case GgmlType::Q2_K: return quantize_q2_k;
    case GgmlType::Q3_K: return quantize_q3_k;
    case GgmlType::Q4_K: return quantize_q4_k;
    case GgmlType::Q5_K: return quantize_q5_k;
    case GgmlType::Q6_K: return quantize_q6_k;
    case GgmlType::Q8_K: return quantize_q8_k;
    case GgmlType::IQ4_XS: return quantize_iq4_xs;
    default: return nullptr;
  }
}

}  // namespace

bool can_quantize(GgmlType t) {
  int block;
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || block_quantizer(t, block) != nullptr;
}

void quantize_row(GgmlType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case GgmlType::F32: std::memcpy(dst, src, size_t(n) * sizeof(float)); return;
    case GgmlType::F16: {
      auto* y = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) y[i] = f32_to_f16(src[i]);
      return;
    }
    case GgmlType::BF16: {
      auto* y = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(src[i]);
      return;
    }
    default: break;
  }
  int block;
  const QuantizeFn fn = block_quantizer(t, block);
  if (!fn) {
    const TypeTraits* tr = find_type_traits(uint32_t(t));
    fail("cannot quantize to type {}", tr ? tr->name : "unknown");
  }
  fn(src, dst, n / block);
}

}  // namespace df
