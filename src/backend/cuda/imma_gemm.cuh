// The tiled Q4_K prefill product (imma_gemm.cu), called by imma_matmul_group for many rows.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/imma_common.cuh"

namespace df::cuda {

// y = x W^T for the segments' weights from the Q8_K activations xq/xd/xm (q8k_layout with
// rows_pad rows, quantize_q8k_k), each output bit-identical to imma_matmul.cu's, in the block
// shape given (kAuto: the one for the grid).
void imma_gemm(const Segments& segs, int64_t n_in, const int8_t* xq, const float* xd, const uint2* xm, int rows,
               int rows_pad, cudaStream_t s, ImmaGemmShape shape = ImmaGemmShape::kAuto);

}  // namespace df::cuda
