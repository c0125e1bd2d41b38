// Dot products of weight rows (any supported type) with activation rows that were converted
// once to the weight type's vec_dot_type (Q8_0, Q8_1, Q8_K, F16, BF16 or F32), as llama.cpp
// does on the CPU. SIMD (AVX2 / AVX-512) where the build allows, scalar otherwise.
#pragma once
#include <cstddef>
#include <cstdint>

#include "quant/types.h"

namespace df {

// Bytes one activation row of n elements takes in the vec_dot_type of weight type wt.
size_t activation_row_size(GgmlType wt, int64_t n);
// Converts a float activation row into the vec_dot_type of weight type wt.
void quantize_activation_row(GgmlType wt, const float* x, void* dst, int64_t n);

// Returns sum_k w[k] * a[k] for one weight row (type wt) and one converted activation row.
float vec_dot(GgmlType wt, int64_t n, const void* w_row, const void* a_row);

// out[c * ldo + r] = vec_dot(w row r, activation row c) for r < nr, c < nc.
// Rows are w + r * w_stride and a + c * a_stride (bytes). Tiled so each weight block is
// loaded once for several activation rows (prefill and verify speed).
void vec_dot_tile(GgmlType wt, int64_t n, const void* w, size_t w_stride, int nr,
                  const void* a, size_t a_stride, int nc, float* out, size_t ldo);

}  // namespace df
