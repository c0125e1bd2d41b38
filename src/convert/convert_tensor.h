// One checkpoint tensor -> the bytes of its GGUF tensor: value-head reordering, the elementwise
// op, then conversion to the output type, row by row in parallel and without materialising the
// whole tensor in float (a 27B embedding is 5 GB as f32).
#pragma once
#include <cstdint>

#include "convert/safetensors.h"
#include "convert/tensor_map.h"
#include "model/hparams.h"
#include "quant/types.h"

namespace df {
class ThreadPool;
}

namespace df::convert {

struct TensorConversion {
  const StTensor* src = nullptr;
  ValueOp op = ValueOp::None;
  VHeadAxis v_heads = VHeadAxis::None;
  GgmlType type = GgmlType::F32;
};

// Rows are the HF tensor's outer elements, the row length its last dimension (GGUF ne0); the
// dims of size 1 that GGUF drops (conv1d's [CD, 1, K]) do not matter. Writes
// rows * row_size(type, ne0) bytes at dst.
void convert_tensor(const TensorConversion& c, const HParams& hp, uint8_t* dst, ThreadPool& pool);

}  // namespace df::convert
