// What the IQ4_XS integer tensor-core kernels share: imma_iq4xs.cu (calls of up to
// kImmaGemmMinRows rows, and the entry imma_matmul_group dispatches to) and imma_iq4xs_gemm.cu
// (the tiled prefill product for more rows, each output bit-identical to imma_iq4xs.cu's for the
// same row). Both read the weights in the tile layout (quant/iq4xs_tiles.h) only, and the
// activations in the Q4_K kernels' Q8_K layout (q8k_layout: xq, xd), which is the CPU's.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/imma_common.cuh"
#include "backend/cuda/iq4xs_operands.cuh"
#include "backend/cuda/kernels.h"
#include "quant/iq4xs_tiles.h"

namespace df::cuda {

// One sub-block's exact integer dot for an m16n8k32 tile: the lookup's two A operands
// (iq4xs::a_operands) times the same activations, s8 x s8, summed in one accumulator from 0.
__device__ __forceinline__ void iq4xs_dot(int (&d)[4], const uint32_t (&lo)[4], const uint32_t (&hi)[4], uint32_t b0,
                                          uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(lo[0]), "r"(lo[1]), "r"(lo[2]), "r"(lo[3]), "r"(b0), "r"(b1), "r"(0));
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(hi[0]), "r"(hi[1]), "r"(hi[2]), "r"(hi[3]), "r"(b0), "r"(b1));
}

// A row's d from its header words.
__device__ __forceinline__ float iq4xs_d(uint32_t x, uint32_t y) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(iq4xs::d_bits(x, y) & 0xFFFFu)));
}

// The float part of one super-block for one (activation row, output), as the CPU's dot:
// (dx * d) * float(isum), isum = sum_j (ls_j - 32) dot_j exact. Explicit roundings, so the
// decode and prefill kernels agree bit for bit.
__device__ __forceinline__ float iq4xs_sb_term(float dx, float d, int isum) {
  return __fmul_rn(__fmul_rn(dx, d), __int2float_rn(isum));
}

// imma_iq4xs_gemm.cu: y = x W^T for the segments' tiled IQ4_XS weights from the Q8_K
// activations xq / xd (q8k_layout with rows_pad rows), for calls of more than kImmaGemmMinRows
// rows, in the block shape given (kAuto: the one for the grid; each output's bits the same in
// every shape).
void imma_iq4xs_gemm(const Segments& segs, int64_t n_in, const int8_t* xq, const float* xd, int rows, int rows_pad,
                     cudaStream_t s, ImmaGemmShape shape = ImmaGemmShape::kAuto);

// imma_iq4xs.cu: imma_matmul_group for tiled IQ4_XS weights, every row count.
void imma_iq4xs_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                      cudaStream_t s, const void* quantized);

}  // namespace df::cuda
