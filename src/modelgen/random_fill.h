// Random tensor data, fast enough for 27B-shape files: every row has its own random stream
// derived from (seed, tensor name, row), so output does not depend on the thread count, and
// quantized matrices are written as random blocks directly (random quants, scales chosen for
// the intended std) instead of quantizing Gaussian floats (internal to modelgen).
#pragma once
#include <cstdint>
#include <string_view>

#include "modelgen/tensor_plan.h"

namespace df {
class ThreadPool;
}

namespace df::modelgen {

// F32/F16/BF16, a type with a block generator here, or one quantize_row can write.
bool can_generate(GgmlType t);

// Writes row_size(t.type, ne0) * rows bytes at dst.
void fill_tensor(const PlannedTensor& t, uint64_t seed, uint8_t* dst, ThreadPool& pool);

}  // namespace df::modelgen
