// float -> block formats, used by make-model, the converter and activation quantization.
#pragma once
#include <cstdint>

#include "quant/types.h"

namespace df {

// Can quantize_row write this type?
bool can_quantize(GgmlType t);
// Writes row_size(t, n) bytes at dst encoding src[0..n). n % block_size == 0.
// Throws df::Error for types without a quantizer.
void quantize_row(GgmlType t, const float* src, void* dst, int64_t n);

}  // namespace df
