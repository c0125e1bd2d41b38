// dequantize_row: dispatch on the type; float formats are converted here, block formats in
// dequant_legacy.cpp, dequant_kquants.cpp and dequant_iq.cpp.
#include "quant/dequant.h"

#include <cstring>

#include "quant/blocks.h"
#include "quant/dequant_rows.h"
#include "util/error.h"
#include "util/half.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace df {

namespace {

void f16_row(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)  // vcvtph2ps is exact, like the scalar conversion
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
#endif
  for (; i < n; ++i) y[i] = f16_to_f32(x[i]);
}

void bf16_row(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(x[i]);
}

}  // namespace

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  using namespace quant;
  const int64_t nb32 = n / kQK, nb256 = n / kQKK;
  switch (t) {
    case GgmlType::F32: std::memcpy(dst, src, size_t(n) * sizeof(float)); return;
    case GgmlType::F16: f16_row(static_cast<const uint16_t*>(src), dst, n); return;
    case GgmlType::BF16: bf16_row(static_cast<const uint16_t*>(src), dst, n); return;
    case GgmlType::Q4_0: dequant_q4_0(src, dst, nb32); return;
    case GgmlType::Q4_1: dequant_q4_1(src, dst, nb32); return;
    case GgmlType::Q5_0: dequant_q5_0(src, dst, nb32); return;
    case GgmlType::Q5_1: dequant_q5_1(src, dst, nb32); return;
    case GgmlType::Q8_0: dequant_q8_0(src, dst, nb32); return;
    case GgmlType::Q8_1: dequant_q8_1(src, dst, nb32); return;
    case GgmlType::Q2_K: dequant_q2_k(src, dst, nb256); return;
    case GgmlType::Q3_K: dequant_q3_k(src, dst, nb256); return;
    case GgmlType::Q4_K: dequant_q4_k(src, dst, nb256); return;
    case GgmlType::Q5_K: dequant_q5_k(src, dst, nb256); return;
    case GgmlType::Q6_K: dequant_q6_k(src, dst, nb256); return;
    case GgmlType::Q8_K: dequant_q8_k(src, dst, nb256); return;
    case GgmlType::IQ4_NL: dequant_iq4_nl(src, dst, nb32); return;
    case GgmlType::IQ4_XS: dequant_iq4_xs(src, dst, nb256); return;
    default: break;
  }
  const TypeTraits* tr = find_type_traits(uint32_t(t));
  fail("cannot dequantize tensors of type {}", tr ? tr->name : "unknown");
}

}  // namespace df
