// What the Q8_0 integer tensor-core kernels share: imma_q80.cu (the activation quantizer, and the
// kernel for calls of up to kImmaGemmMinRows rows) and imma_q80_gemm.cu (the tiled prefill
// product for more rows, each output bit-identical to imma_q80.cu's for the same row). The
// weights are always in the tile layout (quant/q80_tiles.h); imma_q80.cu's header comment gives
// the design.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/imma_common.cuh"
#include "backend/cuda/kernels.h"
#include "quant/q80_tiles.h"

namespace df::cuda {

// The activations in the CPU's Q8_0 format (quant/activation_quant.cpp quantize_q8_0), rows
// padded to rows_pad (a multiple of 8; padding rows are zeros with d = 0): the int8 values
// row-major, [row][n_in] as the elements lie; the block scales as floats (the f16 value the CPU
// stores, widened), [super-block][row][8], so a lane reads a row's eight scales of a
// super-block as two 16-byte words.
struct Q80Acts {
  int8_t* q;
  float* d;
  int rows_pad;
};

// Byte offsets inside the scratch: q at 0, d after it (256-byte aligned); bytes in all.
struct Q80Layout {
  size_t d, bytes;
};
inline Q80Layout q80_layout(int64_t n_in, int rows_pad) {
  auto align = [](size_t v) { return (v + 255) / 256 * 256; };
  const size_t d = align(size_t(rows_pad) * size_t(n_in));
  return Q80Layout{d, align(d + size_t(n_in / 32) * size_t(rows_pad) * sizeof(float))};
}
inline Q80Acts q80_acts(void* scratch, int64_t n_in, int rows) {
  const int rows_pad = (rows + 7) / 8 * 8;
  auto* base = static_cast<uint8_t*>(scratch);
  return Q80Acts{reinterpret_cast<int8_t*>(base), reinterpret_cast<float*>(base + q80_layout(n_in, rows_pad).d),
                 rows_pad};
}

// d = a * b + c for one m16n8k32 tile of signed bytes, c in every element. The kernels start
// from kMsumMagic (the bits of 1.5 * 2^23): a block's dot is at most 32 * 128 * 127 < 2^22 in
// magnitude, so d is the bit pattern of the float 1.5 * 2^23 + dot and one subtraction gives
// float(dot) exactly (q80_block_fma), without the slower integer-to-float conversion.
__device__ __forceinline__ void imma_16832_ss(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, int c) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c));
}

// One block's term for one (activation row, output), added to acc as both kernels do it:
// acc + float(dot) * (d_w * d_x), one rounding for the product of the scales and one for the
// fused multiply-add (explicit intrinsics, so no kernel is contracted differently). The CPU
// (quant/vec_dot_*) forms the same dot and d_w * d_x; it sums the terms in another order.
__device__ __forceinline__ float q80_block_fma(float acc, int dot_magic, float dw, float dx) {
  const float dot = __fsub_rn(__int_as_float(dot_magic), 12582912.0f);
  return __fmaf_rn(dot, __fmul_rn(dw, dx), acc);
}

// The two f16 scales of a tile's scale word (rows g and g + 8: low and high half) as floats.
__device__ __forceinline__ float2 q80_scale_pair(uint32_t w) {
  return make_float2(half_bits_to_float(uint16_t(w & 0xFFFFu)), half_bits_to_float(uint16_t(w >> 16)));
}

// imma_q80_gemm.cu: y = x W^T for the segments' tiled Q8_0 weights from the activations `a`
// (written by imma_q80.cu's quantizer), for calls of more than kImmaGemmMinRows rows, in the
// block shape given (kAuto: the one for the grid).
void imma_q80_gemm(const Segments& segs, int64_t n_in, const Q80Acts& a, int rows, cudaStream_t s,
                   ImmaGemmShape shape = ImmaGemmShape::kAuto);

// imma_q80.cu: imma_matmul_group for tiled Q8_0 weights (imma_matmul.cu dispatches to it; the
// norms' fused Q8_K activations do not apply), and imma_gemm_quantized's Q8_0 case (x quantized
// before by imma_quantize_q80).
void imma_q80_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                    cudaStream_t s);
void imma_q80_gemm_quantized(const Weight& w, float* y, int rows, const void* scratch, cudaStream_t s,
                             ImmaGemmShape shape);

}  // namespace df::cuda
