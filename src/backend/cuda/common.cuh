// Device helpers shared by the CUDA kernel files: warp/block reductions, f16/bf16 loads and
// stores, the activation functions (with the CPU backend's formulas, in fp32).
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace df::cuda {

constexpr int kWarp = 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, n_warps = blockDim.x / kWarp;
  v = warp_sum(v);
  __syncthreads();  // part[] may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < n_warps ? part[lane] : 0.0f;
  return warp_sum(v);
}

// IEEE half and bfloat16 bits -> float (both exact).
__device__ __forceinline__ float half_bits_to_float(uint16_t b) { return __half2float(__ushort_as_half(b)); }
__device__ __forceinline__ float bf16_bits_to_float(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }

// KV cache element access: float (exact) or f16 storage (round to nearest even, like util/half.h).
__device__ __forceinline__ float kv_load(const float* p) { return *p; }
__device__ __forceinline__ float kv_load(const uint16_t* p) { return half_bits_to_float(*p); }
__device__ __forceinline__ void kv_put(float* p, float x) { *p = x; }
__device__ __forceinline__ void kv_put(uint16_t* p, float x) { *p = __half_as_ushort(__float2half_rn(x)); }

// Accurate expf (not __expf): these feed outputs compared against the CPU to fp32 round-off.
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

inline unsigned ceil_div(int64_t a, int64_t b) { return unsigned((a + b - 1) / b); }

// Calls launch(first_output, outputs, blocks) for slices of n_out small enough for grid.y's
// 65535 blocks of out_per_block outputs each.
template <class F>
void for_output_slices(int64_t n_out, int64_t out_per_block, F&& launch) {
  const int64_t max_out = out_per_block * 65535;
  for (int64_t o = 0; o < n_out; o += max_out) {
    const int64_t n = n_out - o < max_out ? n_out - o : max_out;
    launch(o, n, ceil_div(n, out_per_block));
  }
}

}  // namespace df::cuda
