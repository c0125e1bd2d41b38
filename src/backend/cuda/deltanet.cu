// The Gated DeltaNet delta rule (the ops before it, conv, norms and gates, are in gdn_prep.cu).
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
#include <stdexcept>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace df::cuda {

namespace {

constexpr int kColsPerBlock = 64;

// grid (n_v, ceil(d_v / kColsPerBlock)); dynamic shared memory: q and k of the token (2 d_k).
__global__ void __launch_bounds__(kColsPerBlock)
    gdn_recurrent_k(int n_k, int n_v, int dk, int dv, const float* __restrict__ qkv, size_t qkv_stride,
                    const float* __restrict__ g, const float* __restrict__ beta, int rows,
                    const int32_t* __restrict__ rows_limit, float* __restrict__ S, float* __restrict__ out) {
  pdl_wait();
  pdl_trigger();
  if (rows_limit != nullptr) rows = min(rows, *rows_limit);
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
      o += sij * qk[i];
    }
    out[size_t(t) * out_stride + size_t(h) * dv + j] = o;
  }
}

// The same recurrence with each thread's share of a state column in registers (d_k = 64 or 128,
// d_v a multiple of 32, gdn_recurrent_in_registers): 4 threads per column j (parts p = lane %
// 4), so S is read once and
// written once per call, and the two column sums (S^T k, S^T q) reduce over the 4 threads by
// shuffles. 16 columns per block: n_v * d_v / 16 blocks (384 at n_v = 48, d_v = 128) of 64
// threads, so the 132 SMs of an H100/H200 hold 2-3 blocks each (128-thread blocks left 60 SMs
// with twice the work of the others, which bounds a verify step's checkpoint writes).
//
// The rows form a chain through the state, and each link is short (two dot products of DK / 4
// terms and two shuffle reductions), so the inputs of up to kStageRows rows are staged in
// shared memory first, with every load in flight at once: a link then waits on shared memory
// only (H100, one layer at the 27B shape, in a stream: 16 rows 21.4 -> 11.2 us, 8 rows 12.2
// -> 6.9, 1 row 4.7 -> 4.9, against loading row t + 1's inputs from global memory while row t
// computed; docs/performance.md, session 16). Part p owns the float4 chunks 4 m + p of a
// column (rows i = 16 m + 4 p + e), so the four parts of a column read 64 consecutive bytes of
// q or k per chunk step (one shared-memory wavefront, broadcast to the warp's eight columns), and each
// dot product keeps four partial sums (one per e) to shorten its dependency chain.
// With keep_state the column is not written back. The block shape does not change any sum.
constexpr int kRegColsPerBlock = 16;
constexpr int kRegThreads = 4 * kRegColsPerBlock;  // 4 threads share a column
constexpr int kStageRows = 16;                     // rows of inputs staged at a time

// One float from global to shared memory without passing through registers (cp.async).
__device__ __forceinline__ void copy_float_async(float* dst, const float* src) {
  const uint32_t d = uint32_t(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src));
}

template <int DK>
__global__ void __launch_bounds__(kRegThreads)
    gdn_recurrent_reg_k(int n_k, int n_v, int dv, const float* __restrict__ qkv, size_t qkv_stride,
                        const float* __restrict__ g, const float* __restrict__ beta, int rows,
                        const int32_t* __restrict__ rows_limit, float* __restrict__ S, float* __restrict__ out,
                        bool keep_state) {
  constexpr int kParts = 4, kChunks = DK / (4 * kParts);  // float4 chunks a part owns
  __shared__ float4 q_st[kStageRows][DK / 4], k_st[kStageRows][DK / 4];
  __shared__ float v_st[kStageRows][kRegColsPerBlock], alpha_st[kStageRows], beta_st[kStageRows];
  pdl_wait();
  pdl_trigger();
  if (rows_limit != nullptr) rows = min(rows, *rows_limit);
  const int h = blockIdx.x, kh = h % n_k;  // GGUF tiles value heads over key heads
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int part = lane % kParts;
  const int col0 = blockIdx.y * kRegColsPerBlock;
  const int jl = warp * 8 + lane / kParts, j = col0 + jl;  // d_v % 16 == 0: always a column
  float* Sh = S + size_t(h) * DK * dv;
  float s[4 * kChunks];  // s[4 m + e] = S[h][16 m + 4 part + e][j]
#pragma unroll
  for (int m = 0; m < kChunks; ++m)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[4 * m + e] = Sh[size_t(16 * m + 4 * part + e) * dv + j];
  const size_t q_off = size_t(kh) * DK, k_off = size_t(n_k + kh) * DK;
  const size_t v_off = size_t(2 * n_k) * DK + size_t(h) * dv + col0;
  const size_t out_stride = size_t(n_v) * dv;
  for (int t0 = 0; t0 < rows; t0 += kStageRows) {
    const int n = min(kStageRows, rows - t0);
    __syncthreads();  // the previous rows' inputs are no longer read
    // q | k and v of the rows by asynchronous copies (no registers held; all in flight at once);
    // consecutive threads copy consecutive floats.
    for (int e = threadIdx.x; e < n * 2 * DK; e += kRegThreads) {
      const int t = e / (2 * DK), c = e % (2 * DK);
      float* dst = reinterpret_cast<float*>(c < DK ? q_st[t] : k_st[t]) + c % DK;
      copy_float_async(dst, qkv + size_t(t0 + t) * qkv_stride + (c < DK ? q_off + c : k_off + c - DK));
    }
    for (int e = threadIdx.x; e < n * kRegColsPerBlock; e += kRegThreads) {
      const int t = e / kRegColsPerBlock, c = e % kRegColsPerBlock;
      copy_float_async(&v_st[t][c], qkv + size_t(t0 + t) * qkv_stride + v_off + c);
    }
    asm volatile("cp.async.commit_group;\n" ::);
    for (int t = threadIdx.x; t < n; t += kRegThreads) {
      alpha_st[t] = expf(__ldg(g + size_t(t0 + t) * n_v + h));
      beta_st[t] = __ldg(beta + size_t(t0 + t) * n_v + h);
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    __syncthreads();
    for (int t = 0; t < n; ++t) {
      const float alpha = alpha_st[t];
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int m = 0; m < kChunks; ++m) {  // decay, and read the memory: m = S^T k
        const float4 k4 = k_st[t][4 * m + part];
        const float kv[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[4 * m + e] *= alpha;
          acc[e] = fmaf(s[4 * m + e], kv[e], acc[e]);
        }
      }
      float mem = (acc[0] + acc[1]) + (acc[2] + acc[3]);
      mem += __shfl_xor_sync(0xffffffffu, mem, 1);
      mem += __shfl_xor_sync(0xffffffffu, mem, 2);
      const float delta = beta_st[t] * (v_st[t][jl] - mem);
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[e] = 0.0f;
#pragma unroll
      for (int m = 0; m < kChunks; ++m) {  // write, then read with the updated state: o = S^T q
        const float4 k4 = k_st[t][4 * m + part], q4 = q_st[t][4 * m + part];
        const float kv[4] = {k4.x, k4.y, k4.z, k4.w}, qv[4] = {q4.x, q4.y, q4.z, q4.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[4 * m + e] = fmaf(kv[e], delta, s[4 * m + e]);
          acc[e] = fmaf(s[4 * m + e], qv[e], acc[e]);
        }
      }
      float o = (acc[0] + acc[1]) + (acc[2] + acc[3]);
      o += __shfl_xor_sync(0xffffffffu, o, 1);
      o += __shfl_xor_sync(0xffffffffu, o, 2);
      if (part == 0) out[size_t(t0 + t) * out_stride + size_t(h) * dv + j] = o;
    }
  }
  if (keep_state) return;
#pragma unroll
  for (int m = 0; m < kChunks; ++m)
#pragma unroll
    for (int e = 0; e < 4; ++e) Sh[size_t(16 * m + 4 * part + e) * dv + j] = s[4 * m + e];
}

}  // namespace

bool gdn_recurrent_in_registers(const GdnShape& sh) { return (sh.d_k == 128 || sh.d_k == 64) && sh.d_v % 32 == 0; }

void gdn_delta_rule(const GdnShape& sh, const float* qkv, size_t qkv_stride, const float* g, const float* beta,
                    int rows, float* S, float* out, bool keep_state, const int32_t* rows_limit, cudaStream_t s) {
  if (gdn_recurrent_in_registers(sh)) {  // registers version (Qwen3.5: 128 x 128)
    const dim3 grid(unsigned(sh.n_v), unsigned(sh.d_v / kRegColsPerBlock));
    if (sh.d_k == 128) {
      launch(gdn_recurrent_reg_k<128>, grid, kRegThreads, 0, s, sh.n_k, sh.n_v, sh.d_v, qkv, qkv_stride, g, beta, rows,
             rows_limit, S, out, keep_state);
    } else {
      launch(gdn_recurrent_reg_k<64>, grid, kRegThreads, 0, s, sh.n_k, sh.n_v, sh.d_v, qkv, qkv_stride, g, beta, rows,
             rows_limit, S, out, keep_state);
    }
    return;
  }
  if (keep_state) throw std::invalid_argument("gdn_delta_rule: this shape updates S in place (copy it first)");
  const dim3 grid(unsigned(sh.n_v), ceil_div(sh.d_v, kColsPerBlock));
  const size_t shared = size_t(2) * sh.d_k * sizeof(float);
  launch(gdn_recurrent_k, grid, kColsPerBlock, shared, s, sh.n_k, sh.n_v, sh.d_k, sh.d_v, qkv, qkv_stride, g, beta, rows,
         rows_limit, S, out);
}

}  // namespace df::cuda
