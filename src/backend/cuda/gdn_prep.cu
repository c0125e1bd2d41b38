// The Gated DeltaNet ops before the delta rule: causal conv1d + SiLU with its state, the
// per-head L2 norm, the gates, and the three fused for one segment (gdn_conv_norm_gates).
//
// The fused kernel must give the separate kernels' bits (backend.h), so each value has one
// device function that every kernel computes it with (conv_silu_at, the lane order of
// l2_norm_factor's sum, gdn_gate), and the roundings in them are explicit (__fmaf_rn,
// __fmul_rn): nothing is left to the compiler's choice of contraction.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace df::cuda {

namespace {

// Input at time t of channel c; t < 0 reads the state (t = -1 is its newest row).
__device__ __forceinline__ float conv_input(const float* x, size_t x_stride, const float* state, int hist,
                                            int channels, int t, int c) {
  return t < 0 ? state[int64_t(hist + t) * channels + c] : x[int64_t(t) * x_stride + c];
}

// silu of the conv of channel c at row t (wc: the channel's kernel weights, oldest tap first).
__device__ __forceinline__ float conv_silu_at(const float* x, size_t x_stride, const float* state,
                                              const float* __restrict__ wc, int kernel, int channels, int t, int c) {
  const int hist = kernel - 1;
  float s = 0.0f;
  for (int j = 0; j < kernel; ++j) s = __fmaf_rn(wc[j], conv_input(x, x_stride, state, hist, channels, t - hist + j, c), s);
  return __fdiv_rn(s, __fadd_rn(1.0f, expf(-s)));  // silu, its add kept out of expf's last product
}

// The new state of channel c: the last K-1 inputs of [state | x], oldest first. Ascending i
// reads state[i + rows] (when rows < K-1) before anything overwrites it. Must run after every
// read of the old state.
__device__ __forceinline__ void conv_state_update(const float* x, size_t x_stride, int rows, int channels, int kernel,
                                                  float* state, int c) {
  const int hist = kernel - 1;
  for (int i = 0; i < hist; ++i)
    state[int64_t(i) * channels + c] = conv_input(x, x_stride, state, hist, channels, rows - hist + i, c);
}

// A head vector's L2-norm factor scale / max(|v|, eps), from one warp: ss is the lane's sum of
// squares of elements lane, lane + 32, ... in that order (fmaf from 0).
__device__ __forceinline__ float l2_norm_factor(float ss, float eps, float scale) {
  return scale / fmaxf(sqrtf(warp_sum(ss)), eps);
}

// In place: beta = sigmoid(b); g = a_coef * softplus(a + dt_bias).
__device__ __forceinline__ void gdn_gate(float* b, float* a, float a_coef, float dt_bias) {
  *b = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-*b)));  // sigmoid
  *a = __fmul_rn(a_coef, softplus(__fadd_rn(*a, dt_bias)));
}

// Outputs: one thread per (channel, row); reads the old state only.
__global__ void conv1d_silu_out_k(const float* __restrict__ x, size_t x_stride, int rows, int channels,
                                  const float* __restrict__ w, int kernel, const float* __restrict__ state,
                                  float* __restrict__ out, size_t out_stride) {
  pdl_wait();
  pdl_trigger();
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  for (int t = blockIdx.y; t < rows; t += gridDim.y)
    out[int64_t(t) * out_stride + c] = conv_silu_at(x, x_stride, state, w + int64_t(c) * kernel, kernel, channels, t, c);
}

// The state update, after the outputs (a second launch: other blocks read the old state).
__global__ void conv1d_state_k(const float* __restrict__ x, size_t x_stride, int rows, int channels, int kernel,
                               float* state) {
  pdl_wait();
  pdl_trigger();
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  conv_state_update(x, x_stride, rows, channels, kernel, state, c);
}

// One warp per (row, head) vector: x / max(|x|, eps) * scale.
__global__ void l2_norm_heads_k(float* x, size_t row_stride, int64_t n_vec, int n_heads, int dim, float eps,
                                float scale) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = blockIdx.x * int64_t(blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (i >= n_vec) return;
  const int lane = threadIdx.x % kWarp;
  float* v = x + (i / n_heads) * row_stride + (i % n_heads) * dim;
  float ss = 0.0f;
  for (int j = lane; j < dim; j += kWarp) ss = __fmaf_rn(v[j], v[j], ss);
  const float f = l2_norm_factor(ss, eps, scale);
  for (int j = lane; j < dim; j += kWarp) v[j] = __fmul_rn(v[j], f);
}

__global__ void gdn_gates_k(float* b, float* a, const float* __restrict__ a_coef, const float* __restrict__ dt_bias,
                            int64_t n, int n_v) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int h = int(i % n_v);
    gdn_gate(b + i, a + i, a_coef[h], dt_bias[h]);
  }
}

// Rows up to which gdn_conv_norm_gates runs as one kernel. Its blocks (one per head: 80 at the
// 27B shape) take a head's rows x dim values with up to 1024 threads, so a long segment would
// run on too few SMs; longer segments (prefill) take the separate kernels, which give the same
// bits. Decode (1 row) and verify (up to ~16) stay fused. Not tuned on a GPU yet.
constexpr int kFusedMaxRows = 32;
constexpr int kFusedMaxThreads = 1024;
constexpr size_t kFusedMaxStaged = 48 * 1024;  // bytes of staged q/k values (no opt-in needed)

// The fused op, one block per head of channels: q heads (n_k of d_k), k heads (n_k of d_k),
// then value heads (n_v of d_v), in conv-channel order. The block's threads take the head's
// (row, channel) pairs, a thread each where the block is large enough (decode: one per
// channel), so the conv + SiLU of every channel run at once. q/k heads stage the values in
// shared memory (rows x dim); then warp w norms rows w, w + warps, ...: lane l sums the squares
// of the row's channels l, l + 32, ... in that order, so the sum has l2_norm_heads_k's lanes and
// order and the row is normed as that kernel norms it (from the same floats conv1d_silu_out_k
// writes). Value heads write their values out and take their head's gates. Every row reads the
// old state, which only this block's threads update: the barrier after the conv orders those
// reads before the update.
__global__ void __launch_bounds__(kFusedMaxThreads)
    gdn_conv_norm_gates_k(int n_k, int d_k, int n_v, int d_v, const float* __restrict__ x, size_t x_stride, int rows,
                          const float* __restrict__ w, int kernel, float* state, float* __restrict__ out,
                          size_t out_stride, float eps, float q_scale, float* __restrict__ beta,
                          float* __restrict__ alpha, const float* __restrict__ a_coef,
                          const float* __restrict__ dt_bias) {
  extern __shared__ float staged[];  // q/k heads: row t's conv values at t * d_k
  pdl_wait();
  pdl_trigger();
  const int u = blockIdx.x;
  const int channels = 2 * n_k * d_k + n_v * d_v;
  const bool normed = u < 2 * n_k;  // block-uniform
  const int c0 = normed ? u * d_k : 2 * n_k * d_k + (u - 2 * n_k) * d_v;
  const int dim = normed ? d_k : d_v;
  const float scale = u < n_k ? q_scale : 1.0f;
  const int pairs = rows * dim;
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int t = p / dim, c = c0 + (p - t * dim);
    const float y = conv_silu_at(x, x_stride, state, w + int64_t(c) * kernel, kernel, channels, t, c);
    if (normed)
      staged[p] = y;
    else
      out[int64_t(t) * out_stride + c] = y;
  }
  if (!normed) {
    const int h = u - 2 * n_k;
    for (int t = threadIdx.x; t < rows; t += blockDim.x)
      gdn_gate(beta + int64_t(t) * n_v + h, alpha + int64_t(t) * n_v + h, a_coef[h], dt_bias[h]);
  }
  __syncthreads();  // staged[] is complete, and every read of the old state is done
  if (normed) {
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, n_warps = blockDim.x / kWarp;
    for (int t = warp; t < rows; t += n_warps) {  // warp-uniform: the whole warp reduces below
      const float* y = staged + t * dim;
      float ss = 0.0f;
      for (int j = lane; j < dim; j += kWarp) ss = __fmaf_rn(y[j], y[j], ss);
      const float f = l2_norm_factor(ss, eps, scale);
      float* o = out + int64_t(t) * out_stride + c0;
      for (int j = lane; j < dim; j += kWarp) o[j] = __fmul_rn(y[j], f);
    }
  }
  if (kernel > 1)
    for (int j = threadIdx.x; j < dim; j += blockDim.x) conv_state_update(x, x_stride, rows, channels, kernel, state, c0 + j);
}

}  // namespace

void conv1d_silu(const float* x, size_t x_stride, int rows, int channels, const float* w, int kernel, float* state,
                 float* out, size_t out_stride, cudaStream_t s) {
  constexpr int kThreads = 128;
  const dim3 grid(ceil_div(channels, kThreads), unsigned(std::min(rows, 1024)));
  launch(conv1d_silu_out_k, grid, kThreads, 0, s, x, x_stride, rows, channels, w, kernel, state, out, out_stride);
  if (kernel > 1) launch(conv1d_state_k, ceil_div(channels, kThreads), kThreads, 0, s, x, x_stride, rows, channels, kernel, state);
}

void l2_norm_heads(float* x, size_t row_stride, int rows, int n_heads, int dim, float eps, float scale,
                   cudaStream_t s) {
  const int64_t n_vec = int64_t(rows) * n_heads;
  constexpr int kWarps = 4;
  launch(l2_norm_heads_k, ceil_div(n_vec, kWarps), kWarps * kWarp, 0, s, x, row_stride, n_vec, n_heads, dim, eps, scale);
}

void gdn_gates(float* b, float* a, const float* a_coef, const float* dt_bias, int rows, int n_v, cudaStream_t s) {
  const int64_t n = int64_t(rows) * n_v;
  launch(gdn_gates_k, unsigned(std::min<int64_t>((n + 255) / 256, 1024)), 256, 0, s, b, a, a_coef, dt_bias, n, n_v);
}

void gdn_conv_norm_gates(const GdnShape& sh, const float* x, size_t x_stride, int rows, const float* conv_w, int kernel,
                         float* conv_state, float* out, size_t out_stride, float eps, float q_scale, float* beta,
                         float* alpha, const float* a_coef, const float* dt_bias, cudaStream_t s) {
  const size_t staged = size_t(rows) * size_t(sh.n_k > 0 ? sh.d_k : 0) * sizeof(float);
  if (rows > kFusedMaxRows || staged > kFusedMaxStaged) {  // the separate kernels, as Backend's default runs them
    conv1d_silu(x, x_stride, rows, sh.conv_dim(), conv_w, kernel, conv_state, out, out_stride, s);
    if (sh.n_k > 0) {
      l2_norm_heads(out, out_stride, rows, sh.n_k, sh.d_k, eps, q_scale, s);
      l2_norm_heads(out + size_t(sh.n_k) * sh.d_k, out_stride, rows, sh.n_k, sh.d_k, eps, 1.0f, s);
    }
    if (sh.n_v > 0) gdn_gates(beta, alpha, a_coef, dt_bias, rows, sh.n_v, s);
    return;
  }
  // A thread per (row, channel) of the widest head, in whole warps, at most kFusedMaxThreads.
  const int64_t pairs = int64_t(rows) * std::max(sh.d_k, sh.d_v);
  const int threads = int(std::min<int64_t>(std::max<int64_t>(ceil_div(pairs, kWarp), 1) * kWarp, kFusedMaxThreads));
  launch(gdn_conv_norm_gates_k, unsigned(2 * sh.n_k + sh.n_v), threads, staged, s, sh.n_k, sh.d_k, sh.n_v, sh.d_v,
         x, x_stride, rows, conv_w, kernel, conv_state, out, out_stride, eps, q_scale, beta, alpha, a_coef, dt_bias);
}

}  // namespace df::cuda
