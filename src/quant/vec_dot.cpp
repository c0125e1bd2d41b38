// vec_dot / vec_dot_tile dispatch and activation conversion. SIMD tile kernels where this
// build has them (vec_dot_*_simd.cpp), the scalar kernels (vec_dot_scalar.cpp) otherwise.
#include "quant/vec_dot.h"

#include <cstring>

#include "quant/blocks.h"
#include "quant/quantize_rows.h"
#include "quant/vec_dot_kernels.h"
#include "util/error.h"
#include "util/half.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace df {

namespace {

using namespace quant;

const TypeTraits& dot_traits(GgmlType wt) {
  const TypeTraits& tr = type_traits(wt);
  if (!tr.supported) fail("no dot product for weights of type {}", tr.name);
  return tr;
}

TileFn find_simd_tile(GgmlType wt) {
  for (auto find : {simd_tile_legacy, simd_tile_q4k_q5k, simd_tile_q6k, simd_tile_iq4xs, simd_tile_float})
    if (TileFn f = find(wt)) return f;
  return nullptr;
}

// Kernels per type id, resolved once (the lookup is on every call of the hot loop).
struct KernelTable {
  TileFn tile[40] = {};
  DotFn dot[40] = {};
  KernelTable() {
    for (uint32_t id = 0; id < 40; ++id) {
      const TypeTraits* tr = find_type_traits(id);
      if (!tr || !tr->supported) continue;
      tile[id] = find_simd_tile(tr->type);
      dot[id] = scalar_dot(tr->type);
    }
  }
};

const KernelTable& kernels() {
  static const KernelTable table;
  return table;
}

void to_f16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  // vcvtps2ph with round-to-nearest-even equals f32_to_f16 for all non-NaN inputs.
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < n; ++i) y[i] = f32_to_f16(x[i]);
}

}  // namespace

size_t activation_row_size(GgmlType wt, int64_t n) { return row_size(dot_traits(wt).vec_dot_type, n); }

void quantize_activation_row(GgmlType wt, const float* x, void* dst, int64_t n) {
  const GgmlType at = dot_traits(wt).vec_dot_type;
  switch (at) {
    case GgmlType::F32: std::memcpy(dst, x, size_t(n) * sizeof(float)); return;
    case GgmlType::F16: to_f16(x, static_cast<uint16_t*>(dst), n); return;
    case GgmlType::BF16: {
      auto* y = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
      return;
    }
    case GgmlType::Q8_0: quantize_q8_0(x, dst, n / kQK); return;
    case GgmlType::Q8_1: quantize_q8_1(x, dst, n / kQK); return;
    case GgmlType::Q8_K: quantize_q8_k(x, dst, n / kQKK); return;
    default: fail("unexpected activation type {}", type_name(at));
  }
}

float vec_dot(GgmlType wt, int64_t n, const void* w_row, const void* a_row) {
  const uint32_t id = uint32_t(wt);
  const KernelTable& k = kernels();
  if (id < 40 && k.tile[id]) {
    float out;
    k.tile[id](n, w_row, 0, 1, a_row, 0, 1, &out, 1);
    return out;
  }
  if (id < 40 && k.dot[id]) return k.dot[id](n, w_row, a_row);
  dot_traits(wt);  // throws with the type's name
  fail("no dot product for weights of type id {}", id);
}

void vec_dot_tile(GgmlType wt, int64_t n, const void* w, size_t w_stride, int nr, const void* a, size_t a_stride,
                  int nc, float* out, size_t ldo) {
  const uint32_t id = uint32_t(wt);
  const KernelTable& k = kernels();
  if (id < 40 && k.tile[id]) {
    k.tile[id](n, w, w_stride, nr, a, a_stride, nc, out, ldo);
    return;
  }
  if (id >= 40 || !k.dot[id]) {
    dot_traits(wt);
    fail("no dot product for weights of type id {}", id);
  }
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  for (int c = 0; c < nc; ++c)
    for (int r = 0; r < nr; ++r) out[size_t(c) * ldo + r] = k.dot[id](n, wb + size_t(r) * w_stride, ab + size_t(c) * a_stride);
}

}  // namespace df
