// argmax_rows: one block per row scans its n values (strided by thread, so every load of a warp
// is one coalesced 128-byte line), then a (value, index) reduction that keeps the larger value
// and, on equal values, the lower index -- the same choice as the CPU's left-to-right scan.
// NaN never wins (every comparison with it is false). A 248k-entry row is ~1 MB: ~1 us of
// bandwidth, so the launch and the 4-byte download dominate.
#include <climits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace df::cuda {

namespace {

constexpr int kArgmaxThreads = 1024;

struct Best {
  float v;
  int i;  // INT_MAX: nothing seen yet (or only NaN)
};

// Whether (v, i) beats b: larger value, or the same value at a lower index.
__device__ __forceinline__ bool beats(float v, int i, const Best& b) { return v > b.v || (v == b.v && i < b.i); }

__global__ void __launch_bounds__(kArgmaxThreads) argmax_k(const float* __restrict__ x, int n, size_t stride, int32_t* __restrict__ out) {
  pdl_wait();
  pdl_trigger();
  __shared__ Best part[kArgmaxThreads / kWarp];
  const float* row = x + size_t(blockIdx.x) * stride;
  Best b{-INFINITY, INT_MAX};
  for (int i = threadIdx.x; i < n; i += kArgmaxThreads) {
    const float v = row[i];
    if (beats(v, i, b)) b = Best{v, i};
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, b.v, o);
    const int i = __shfl_xor_sync(0xffffffffu, b.i, o);
    if (beats(v, i, b)) b = Best{v, i};
  }
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) part[warp] = b;
  __syncthreads();
  if (warp != 0) return;
  b = lane < kArgmaxThreads / kWarp ? part[lane] : Best{-INFINITY, INT_MAX};
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, b.v, o);
    const int i = __shfl_xor_sync(0xffffffffu, b.i, o);
    if (beats(v, i, b)) b = Best{v, i};
  }
  if (lane == 0) out[blockIdx.x] = b.i == INT_MAX ? 0 : b.i;
}

}  // namespace

void argmax_rows(const float* x, int rows, int n, size_t stride, int32_t* out, cudaStream_t s) {
  launch(argmax_k, unsigned(rows), kArgmaxThreads, 0, s, x, n, stride, out);
}

}  // namespace df::cuda
