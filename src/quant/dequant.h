// Block formats -> float. Bit-exact with ggml's reference dequantization.
#pragma once
#include <cstdint>

#include "quant/types.h"

namespace df {

// dst[0..n) = values of a row of n elements stored at src in type t. n % block_size == 0.
// Throws df::Error for unsupported types.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

}  // namespace df
