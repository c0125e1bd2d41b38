// The Q8_K activations that a producer kernel (rms_norm, add_rms_norm, swiglu, mul_sigmoid,
// gated_rms_norm) writes besides its float output, for the integer tensor-core product that
// reads that output next (imma_matmul_group's `quantized`): the bytes the products' own
// quantizers (quantize_q8k_k, imma_q6k.cu's) would write from the same floats, in both
// consumers' layouts, so the product's result does not change.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cuda/imma_common.cuh"
#include "backend/cuda/imma_q6k.cuh"

namespace df::cuda {

// Where they go inside a q8k_fused_bytes(n_in, rows) buffer: Q4_K's layout (imma_matmul.cu),
// then Q6_K's (q8k_fused_q6k_offset), rows padded to rows_pad as the products pad them.
struct Q8kOut {
  int8_t* xq;
  float* xd;
  uint2* xm;
  Q6kActs q6;
};

inline Q8kOut q8k_out(void* buf, int64_t n_in, int rows) {
  const int rows_pad = (rows + 7) / 8 * 8;
  const Q8kLayout l = q8k_layout(n_in, rows_pad);
  auto* q4 = static_cast<uint8_t*>(buf);
  auto* q6 = q4 + q8k_fused_q6k_offset(n_in, rows_pad);
  return Q8kOut{reinterpret_cast<int8_t*>(q4 + l.q), reinterpret_cast<float*>(q4 + l.d),
                reinterpret_cast<uint2*>(q4 + l.m),
                Q6kActs{reinterpret_cast<int8_t*>(q6 + l.q), reinterpret_cast<float*>(q6 + l.d),
                        reinterpret_cast<uint2*>(q6 + l.s), rows_pad}};
}

// One warp, all 32 lanes: super-block b of row r (rows of n_in) from this lane's eight values
// v (elements 8 lane .. 8 lane + 7 of the block; zeros for padding rows), in both layouts.
__device__ __forceinline__ void q8k_store_both(const float (&v)[8], int b, int r, int n_in, int lane,
                                               const Q8kOut& a) {
  int q[8];
  const float d = q8k_quantize_values(v, q);
  q8k_store_q4k(q, d, b, r, a.q6.rows_pad, n_in, lane, a.xq, a.xd, a.xm);
  q8k_store_q6k(q, d, b, r, lane, a.q6);
}

// This lane's eight values of super-block b of a row that this block's threads have just
// written (after a __syncthreads): read through L2 (__ldcg), never the read-only path, which a
// kernel's own writes do not reach.
__device__ __forceinline__ void q8k_load_written(const float* row, int b, int lane, float (&v)[8]) {
  const float4* p = reinterpret_cast<const float4*>(row + int64_t(b) * kSb + 8 * lane);
  const float4 lo = __ldcg(p), hi = __ldcg(p + 1);
  v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
}

}  // namespace df::cuda
