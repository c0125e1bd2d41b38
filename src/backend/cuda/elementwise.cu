// Element-wise and per-head ops: embed, add, swiglu, mul_sigmoid, gated_rms_norm. All memory
// bound with one read and one write per element; math in fp32 with the CPU backend's formulas.
#include <algorithm>

#include "backend/cuda/dequant.cuh"
#include "backend/cuda/kernels.h"

namespace df::cuda {

namespace {

constexpr int kThreads = 256;

// Grid-stride element loops: enough blocks to fill the GPU, no more (n may exceed 2^31).
inline unsigned elem_blocks(int64_t n) { return unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, 4096)); }

// One block per output row. Token ids were validated by the model; an id outside the table
// writes NaN instead of reading out of bounds.
template <GgmlType T>
__global__ void embed_k(const uint8_t* __restrict__ table, size_t row_bytes, int64_t n_in, int64_t n_rows,
                        const int32_t* __restrict__ tokens, float* __restrict__ out) {
  pdl_wait();
  pdl_trigger();
  const int r = blockIdx.x;
  const int32_t tok = tokens[r];
  float* o = out + int64_t(r) * n_in;
  if (tok < 0 || tok >= n_rows) {
    for (int64_t i = threadIdx.x; i < n_in; i += blockDim.x) o[i] = __int_as_float(0x7fc00000);
    return;
  }
  const uint8_t* row = table + int64_t(tok) * row_bytes;
  if constexpr (is_float_format(T)) {
    for (int64_t i = threadIdx.x; i < n_in; i += blockDim.x) o[i] = load_float_elem<T>(row, i);
  } else {
    for (int64_t c = threadIdx.x; c < n_in / 32; c += blockDim.x) {
      float v[32];
      deq32<T>(row, c, v);
#pragma unroll
      for (int l = 0; l < 32; ++l) o[c * 32 + l] = v[l];
    }
  }
}

__global__ void add_k(float* __restrict__ x, const float* __restrict__ y, int64_t n) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] += y[i];
}

// out may alias gate (the model computes in place).
__global__ void swiglu_k(const float* gate, const float* __restrict__ up, int64_t n, float* out) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = silu(gate[i]) * up[i];
}

// Rows along y (grid-stride: rows may exceed the 65535 limit of gridDim.y).
__global__ void mul_sigmoid_k(float* __restrict__ x, size_t x_stride, const float* __restrict__ g, size_t g_stride,
                              int rows, int n) {
  pdl_wait();
  pdl_trigger();
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    float* xr = x + r * x_stride;
    const float* gr = g + r * g_stride;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) xr[i] *= sigmoid(gr[i]);
  }
}

// One warp per (row, head) vector of length dim, contiguous: v = rms_norm(v; w) * silu(z).
__global__ void gated_rms_norm_k(float* __restrict__ x, const float* __restrict__ z, const float* __restrict__ w,
                                 int64_t n_vec, int dim, float eps) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = blockIdx.x * int64_t(blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (i >= n_vec) return;
  const int lane = threadIdx.x % kWarp;
  float* v = x + i * dim;
  const float* zv = z + i * dim;
  float ss = 0.0f;
  for (int j = lane; j < dim; j += kWarp) ss += v[j] * v[j];
  const float scale = 1.0f / sqrtf(warp_sum(ss) / float(dim) + eps);
  for (int j = lane; j < dim; j += kWarp) v[j] = v[j] * scale * w[j] * silu(zv[j]);
}

}  // namespace

bool embed(const Weight& table, const int32_t* tokens, int rows, float* out, cudaStream_t s) {
  const auto* td = static_cast<const uint8_t*>(table.data);
  return dispatch_weight_type(table.type, [&](auto tag) {
    constexpr GgmlType T = decltype(tag)::value;
    launch(embed_k<T>, rows, 128, 0, s, td, table.row_bytes, table.n_in, table.n_out, tokens, out);
  });
}

void add(float* x, const float* y, int64_t n, cudaStream_t s) { launch(add_k, elem_blocks(n), kThreads, 0, s, x, y, n); }

void swiglu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t s) {
  launch(swiglu_k, elem_blocks(n), kThreads, 0, s, gate, up, n, out);
}

void mul_sigmoid(float* x, size_t x_stride, const float* g, size_t g_stride, int rows, int n, cudaStream_t s) {
  const dim3 grid(ceil_div(n, kThreads), unsigned(std::min(rows, 65535)));
  launch(mul_sigmoid_k, grid, kThreads, 0, s, x, x_stride, g, g_stride, rows, n);
}

void gated_rms_norm(float* x, const float* z, const float* w, int rows, int n_heads, int dim, float eps,
                    cudaStream_t s) {
  const int64_t n_vec = int64_t(rows) * n_heads;
  constexpr int kWarps = 4;
  launch(gated_rms_norm_k, ceil_div(n_vec, kWarps), kWarps * kWarp, 0, s, x, z, w, n_vec, dim, eps);
}

}  // namespace df::cuda
