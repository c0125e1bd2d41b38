// Gated DeltaNet ops: causal conv1d + SiLU with its state, per-head L2 norm, the gates, and the
// delta rule.
//
// gdn_delta_rule here is the recurrent form (decode, verify, and chunked = true for shapes that
// deltanet_chunked.cu does not take; both forms compute the same function to fp32 round-off,
// backend.h). Each thread owns one value column j of one head's
// state S[h][.][j]: per token it decays and reads the column (m = S^T k), applies the delta
// update and reads the output (o = S^T q), so columns never communicate and the only barrier
// is the per-token load of q and k into shared memory. S stays in global memory (L2-resident:
// 64 KB per head at d_k = d_v = 128). gdn_recurrent_reg_k keeps the column in registers
// instead (d_k 64 or 128); the version with S in global memory serves the other shapes.
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

// Outputs: one thread per (channel, row); reads the old state only.
__global__ void conv1d_silu_out_k(const float* __restrict__ x, size_t x_stride, int rows, int channels,
                                  const float* __restrict__ w, int kernel, const float* __restrict__ state,
                                  float* __restrict__ out, size_t out_stride) {
  pdl_wait();
  pdl_trigger();
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  const int hist = kernel - 1;
  const float* wc = w + int64_t(c) * kernel;
  for (int t = blockIdx.y; t < rows; t += gridDim.y) {
    float s = 0.0f;
    for (int j = 0; j < kernel; ++j) s += wc[j] * conv_input(x, x_stride, state, hist, channels, t - hist + j, c);
    out[int64_t(t) * out_stride + c] = s / (1.0f + expf(-s));
  }
}

// New state = the last K-1 inputs of [state | x], oldest first. Ascending i reads
// state[i + rows] (when rows < K-1) before anything overwrites it. Runs after the outputs.
__global__ void conv1d_state_k(const float* __restrict__ x, size_t x_stride, int rows, int channels, int kernel,
                               float* state) {
  pdl_wait();
  pdl_trigger();
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  const int hist = kernel - 1;
  for (int i = 0; i < hist; ++i)
    state[int64_t(i) * channels + c] = conv_input(x, x_stride, state, hist, channels, rows - hist + i, c);
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
  for (int j = lane; j < dim; j += kWarp) ss += v[j] * v[j];
  const float f = scale / fmaxf(sqrtf(warp_sum(ss)), eps);
  for (int j = lane; j < dim; j += kWarp) v[j] *= f;
}

__global__ void gdn_gates_k(float* b, float* a, const float* __restrict__ a_coef, const float* __restrict__ dt_bias,
                            int64_t n, int n_v) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int h = int(i % n_v);
    b[i] = sigmoid(b[i]);
    a[i] = a_coef[h] * softplus(a[i] + dt_bias[h]);
  }
}

constexpr int kColsPerBlock = 64;

// grid (n_v, ceil(d_v / kColsPerBlock)); dynamic shared memory: q and k of the token (2 d_k).
__global__ void __launch_bounds__(kColsPerBlock)
    gdn_recurrent_k(int n_k, int n_v, int dk, int dv, const float* __restrict__ qkv, size_t qkv_stride,
                    const float* __restrict__ g, const float* __restrict__ beta, int rows, float* __restrict__ S,
                    float* __restrict__ out, float* __restrict__ row_states) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ float qk[];  // q[dk] then k[dk]
  const int h = blockIdx.x, kh = h % n_k;  // GGUF tiles value heads over key heads
  const int j = blockIdx.y * kColsPerBlock + threadIdx.x;
  const bool active = j < dv;
  float* Sh = S + int64_t(h) * dk * dv;
  const size_t q_off = size_t(kh) * dk, k_off = size_t(n_k + kh) * dk, v_off = size_t(2 * n_k) * dk + size_t(h) * dv;
  const size_t out_stride = size_t(n_v) * dv;
  for (int t = 0; t < rows; ++t) {
    const float* row = qkv + size_t(t) * qkv_stride;
    __syncthreads();  // the previous token's q, k are no longer read
    for (int i = threadIdx.x; i < dk; i += blockDim.x) {
      qk[i] = row[q_off + i];
      qk[dk + i] = row[k_off + i];
    }
    __syncthreads();
    if (!active) continue;
    const float alpha = expf(g[size_t(t) * n_v + h]);
    const float b = beta[size_t(t) * n_v + h];
    float m = 0.0f;
    for (int i = 0; i < dk; ++i) {  // decay and read the memory in one pass
      const float sij = Sh[int64_t(i) * dv + j] * alpha;
      Sh[int64_t(i) * dv + j] = sij;
      m += sij * qk[dk + i];
    }
    const float delta = b * (row[v_off + j] - m);
    float o = 0.0f;
    for (int i = 0; i < dk; ++i) {  // write, then read with the updated state
      const float sij = Sh[int64_t(i) * dv + j] + qk[dk + i] * delta;
      Sh[int64_t(i) * dv + j] = sij;
      if (row_states) row_states[size_t(t) * n_v * dk * dv + (int64_t(h) * dk + i) * dv + j] = sij;
      o += sij * qk[i];
    }
    out[size_t(t) * out_stride + size_t(h) * dv + j] = o;
  }
}

// The same recurrence with each thread's share of a state column in registers (d_k = 64 or 128,
// d_v a multiple of 32): 4 threads per column j, each owning DK/4 rows i of S[h][i][j], so S
// is read once and written once per call (the version above reads and writes it twice per
// token from L2), and the two column sums (S^T k, S^T q) reduce over the 4 threads by
// shuffles. 32 columns per block: n_v * d_v / 32 blocks (192 at n_v = 48, d_v = 128) of 128
// threads. q and k of the token are read per thread from L1 (the 8 threads sharing a row part
// read the same addresses). Per-row checkpoints are written from the registers.
template <int DK>
__global__ void __launch_bounds__(128)
    gdn_recurrent_reg_k(int n_k, int n_v, int dv, const float* __restrict__ qkv, size_t qkv_stride,
                        const float* __restrict__ g, const float* __restrict__ beta, int rows, float* __restrict__ S,
                        float* __restrict__ out, float* __restrict__ row_states) {
  pdl_wait();
  pdl_trigger();
  constexpr int kParts = 4, kRowsPerThread = DK / kParts;
  const int h = blockIdx.x, kh = h % n_k;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int part = lane % kParts;
  const int j = blockIdx.y * 32 + warp * 8 + lane / kParts;  // d_v % 32 == 0: always a column
  const int i0 = part * kRowsPerThread;
  float* Sh = S + size_t(h) * DK * dv;
  float s[kRowsPerThread];
#pragma unroll
  for (int ii = 0; ii < kRowsPerThread; ++ii) s[ii] = Sh[size_t(i0 + ii) * dv + j];
  const size_t q_off = size_t(kh) * DK + i0, k_off = size_t(n_k + kh) * DK + i0;
  const size_t v_off = size_t(2 * n_k) * DK + size_t(h) * dv + j;
  const size_t state_floats = size_t(n_v) * DK * dv, out_stride = size_t(n_v) * dv;
  for (int t = 0; t < rows; ++t) {
    const float* row = qkv + size_t(t) * qkv_stride;
    const float alpha = expf(__ldg(g + size_t(t) * n_v + h));
    const float b = __ldg(beta + size_t(t) * n_v + h);
    float kv[kRowsPerThread];
#pragma unroll
    for (int ii = 0; ii < kRowsPerThread; ++ii) kv[ii] = __ldg(row + k_off + ii);
    float m = 0.0f;
#pragma unroll
    for (int ii = 0; ii < kRowsPerThread; ++ii) {  // decay, and read the memory: m = S^T k
      s[ii] *= alpha;
      m = fmaf(s[ii], kv[ii], m);
    }
    m += __shfl_xor_sync(0xffffffffu, m, 1);
    m += __shfl_xor_sync(0xffffffffu, m, 2);
    const float delta = b * (__ldg(row + v_off) - m);
    float o = 0.0f;
#pragma unroll
    for (int ii = 0; ii < kRowsPerThread; ++ii) {  // write, then read with the updated state
      s[ii] = fmaf(kv[ii], delta, s[ii]);
      o = fmaf(s[ii], __ldg(row + q_off + ii), o);
    }
    o += __shfl_xor_sync(0xffffffffu, o, 1);
    o += __shfl_xor_sync(0xffffffffu, o, 2);
    if (part == 0) out[size_t(t) * out_stride + size_t(h) * dv + j] = o;
    if (row_states != nullptr) {
      float* cp = row_states + size_t(t) * state_floats + size_t(h) * DK * dv;
#pragma unroll
      for (int ii = 0; ii < kRowsPerThread; ++ii) cp[size_t(i0 + ii) * dv + j] = s[ii];
    }
  }
#pragma unroll
  for (int ii = 0; ii < kRowsPerThread; ++ii) Sh[size_t(i0 + ii) * dv + j] = s[ii];
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

void gdn_delta_rule(const GdnShape& sh, const float* qkv, size_t qkv_stride, const float* g, const float* beta,
                    int rows, float* S, float* out, float* row_states, cudaStream_t s) {
  if ((sh.d_k == 128 || sh.d_k == 64) && sh.d_v % 32 == 0) {  // registers version (Qwen3.5: 128 x 128)
    const dim3 grid(unsigned(sh.n_v), unsigned(sh.d_v / 32));
    if (sh.d_k == 128) {
      launch(gdn_recurrent_reg_k<128>, grid, 128, 0, s, sh.n_k, sh.n_v, sh.d_v, qkv, qkv_stride, g, beta, rows, S, out,
                                                    row_states);
    } else {
      launch(gdn_recurrent_reg_k<64>, grid, 128, 0, s, sh.n_k, sh.n_v, sh.d_v, qkv, qkv_stride, g, beta, rows, S, out,
                                                   row_states);
    }
    return;
  }
  const dim3 grid(unsigned(sh.n_v), ceil_div(sh.d_v, kColsPerBlock));
  const size_t shared = size_t(2) * sh.d_k * sizeof(float);
  launch(gdn_recurrent_k, grid, kColsPerBlock, shared, s, sh.n_k, sh.n_v, sh.d_k, sh.d_v, qkv, qkv_stride, g, beta, rows,
                                                      S, out, row_states);
}

}  // namespace df::cuda
