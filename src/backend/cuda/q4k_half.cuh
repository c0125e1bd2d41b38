// Q4_K weights as f16, the way the prompt GEMMs on dequantized tiles (deq_gemm.cu, deq_wgmma.cu)
// form them: w = fma(q, half(d sc), half(-dmin m)), so both kernels multiply the same f16 bits.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/backend.h"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/kernels.h"

namespace df::cuda {

__device__ __forceinline__ uint32_t half2_bits(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }
__device__ __forceinline__ __half2 bits_half2(uint32_t u) { return *reinterpret_cast<__half2*>(&u); }

// Four 4-bit values (bytes of v, each 0..15) as two half2 of (q0, q1) and (q2, q3): each byte
// becomes the low byte of the f16 1024 + q (0x64 above it), then 1024 comes off exactly.
__device__ __forceinline__ void nibbles_to_half(uint32_t v, __half2& lo, __half2& hi) {
  const __half2 k1024 = __half2half2(__ushort_as_half(0x6400));
  lo = __hsub2(bits_half2(__byte_perm(v, 0x64u, 0x4140)), k1024);
  hi = __hsub2(bits_half2(__byte_perm(v, 0x64u, 0x4342)), k1024);
}

// Scale and (negated) min of sub-block s of a Q4_K header, as half2 pairs for __hfma2.
__device__ __forceinline__ void sub_block_scale(const uint8_t* hdr, int s, __half2& sc2, __half2& mn2) {
  const uint32_t w0 = *reinterpret_cast<const uint32_t*>(hdr);
  const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(w0 & 0xFFFF)));
  const float dmin = __half2float(__ushort_as_half(static_cast<unsigned short>(w0 >> 16)));
  int sc, mn;
  k4_scale_min(hdr + 4, s, sc, mn);
  sc2 = __float2half2_rn(d * float(sc));
  mn2 = __float2half2_rn(-(dmin * float(mn)));
}

// Eight quants (the low or high nibbles of the bytes of q, 8 consecutive elements) as eight f16
// weights, four half2 words in element order (what one 16-byte store writes).
__device__ __forceinline__ uint4 q4k_eight_halves(uint2 q, int shift, __half2 sc, __half2 mn) {
  uint32_t out[4];
#pragma unroll
  for (int w = 0; w < 2; ++w) {
    const uint32_t v = ((w == 0 ? q.x : q.y) >> shift) & 0x0F0F0F0Fu;
    __half2 a, b;
    nibbles_to_half(v, a, b);
    out[2 * w] = half2_bits(__hfma2(a, sc, mn));
    out[2 * w + 1] = half2_bits(__hfma2(b, sc, mn));
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// The f16 operands the GEMMs on dequantized tiles read (deq_gemm.cu, deq_wgmma.cu,
// deq_wgmma_q6k.cu, deq_wgmma_q80.cu): the weights checked (tiles of one n_in: Q6_K for order
// kQ6k, Q8_0 for kQ80, else Q4_K), x converted by to_half_rows_scaled in that order of k into
// the scratch (deq_gemm_scratch_bytes' layout: the f16 rows, then, 256-byte aligned, the rows'
// power-of-two shifts). Defined in deq_gemm.cu; `what` names the caller in the error.
struct HalfOperands {
  const __half* xh;
  const int* shift;
  int64_t n_in;
  int rows_pad;
};
HalfOperands half_operands(const Weight* const* ws, int n, const float* x, int rows, void* scratch, cudaStream_t s,
                           const char* what, HalfOrder order = HalfOrder::kNatural);

}  // namespace df::cuda
