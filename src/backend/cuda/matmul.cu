// y[r][o] = sum_k W[o][k] x[r][k] with W in its file format, dequantized on the fly.
//
// The simple correct version: one warp per output row. For block formats each lane
// dequantizes 32-element chunks of that row (chunk = lane, lane + 32, ...) and dots each chunk
// with up to kRowsPerPass activation rows, so one pass reads every weight byte once for all of
// them; more rows take more passes (blockIdx.y), which re-read W (mostly from L2). Activations
// and accumulation stay fp32: no activation quantization here, unlike the CPU backend, so these
// results sit closer to the exact product than the CPU's (the op tests check both).
//
// Bandwidth: decode (1 row) streams W once; with lanes reading their own 18..210-byte blocks
// through byte loads this is far from the 4.8 TB/s ceiling. Fast kernels (wide loads, dp4a /
// tensor cores, split-K for small n_out) replace this later behind the same launcher.
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/kernels.h"

namespace df::cuda {

namespace {

constexpr int kRowsPerPass = 16;  // activation rows sharing one read of a weight row
constexpr int kWarpsPerBlock = 4;  // output rows per thread block

template <GgmlType T>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp)
    matmul_blocks(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_chunks, int64_t n_in, int64_t n_out,
                  const float* __restrict__ x, int rows, float* __restrict__ y) {
  const int lane = threadIdx.x % kWarp;
  const int64_t o = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (o >= n_out) return;
  const int r0 = blockIdx.y * kRowsPerPass;
  const int nr = min(kRowsPerPass, rows - r0);
  const uint8_t* wr = w + o * row_bytes;
  const float* xb = x + int64_t(r0) * n_in;
  float acc[kRowsPerPass];
#pragma unroll
  for (int r = 0; r < kRowsPerPass; ++r) acc[r] = 0.0f;
  for (int64_t c = lane; c < n_chunks; c += kWarp) {
    float v[32];
    deq32<T>(wr, c, v);
#pragma unroll
    for (int r = 0; r < kRowsPerPass; ++r) {
      if (r < nr) {
        const float* xr = xb + r * n_in + c * 32;
        float s = 0.0f;
#pragma unroll
        for (int l = 0; l < 32; ++l) s = fmaf(v[l], xr[l], s);
        acc[r] += s;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerPass; ++r) {
    const float s = warp_sum(acc[r]);
    if (lane == 0 && r < nr) y[int64_t(r0 + r) * n_out + o] = s;
  }
}

// F32 / F16 / BF16: lanes stride over the row element by element (coalesced; any n_in).
template <GgmlType T>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp)
    matmul_float(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_in, int64_t n_out,
                 const float* __restrict__ x, int rows, float* __restrict__ y) {
  const int lane = threadIdx.x % kWarp;
  const int64_t o = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (o >= n_out) return;
  const int r0 = blockIdx.y * kRowsPerPass;
  const int nr = min(kRowsPerPass, rows - r0);
  const uint8_t* wr = w + o * row_bytes;
  const float* xb = x + int64_t(r0) * n_in;
  float acc[kRowsPerPass];
#pragma unroll
  for (int r = 0; r < kRowsPerPass; ++r) acc[r] = 0.0f;
  for (int64_t k = lane; k < n_in; k += kWarp) {
    const float wv = load_float_elem<T>(wr, k);
#pragma unroll
    for (int r = 0; r < kRowsPerPass; ++r)
      if (r < nr) acc[r] = fmaf(wv, xb[r * n_in + k], acc[r]);
  }
#pragma unroll
  for (int r = 0; r < kRowsPerPass; ++r) {
    const float s = warp_sum(acc[r]);
    if (lane == 0 && r < nr) y[int64_t(r0 + r) * n_out + o] = s;
  }
}

}  // namespace

bool matmul_supports(GgmlType t) {
  return dispatch_weight_type(t, [](auto) {});
}

bool matmul(const Weight& w, const float* x, int rows, float* y, cudaStream_t s) {
  const dim3 grid(ceil_div(w.n_out, kWarpsPerBlock), ceil_div(rows, kRowsPerPass));
  const dim3 block(kWarpsPerBlock * kWarp);
  const auto* wd = static_cast<const uint8_t*>(w.data);
  return dispatch_weight_type(w.type, [&](auto tag) {
    constexpr GgmlType T = decltype(tag)::value;
    if constexpr (is_float_format(T)) {
      matmul_float<T><<<grid, block, 0, s>>>(wd, w.row_bytes, w.n_in, w.n_out, x, rows, y);
    } else {
      matmul_blocks<T><<<grid, block, 0, s>>>(wd, w.row_bytes, w.n_in / 32, w.n_in, w.n_out, x, rows, y);
    }
  });
}

}  // namespace df::cuda
