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
// d_v a multiple of 32): 4 threads per column j, each owning DK/4 rows i of S[h][i][j], so S
// is read once and written once per call (the version above reads and writes it twice per
// token from L2), and the two column sums (S^T k, S^T q) reduce over the 4 threads by
// shuffles. 16 columns per block: n_v * d_v / 16 blocks (384 at n_v = 48, d_v = 128) of 64
// threads, so the 132 SMs of an H200 hold 2-3 blocks each (128-thread blocks left 60 SMs with
// twice the work of the others, which bounds a verify step's checkpoint writes). q and k of the
// token are read per thread from L1 (the 8 threads sharing a row part read the same addresses).
// With keep_state the column is not written back. The block shape does not change any sum.
constexpr int kRegColsPerBlock = 16;
constexpr int kRegThreads = 4 * kRegColsPerBlock;  // 4 threads share a column

template <int DK>
__global__ void __launch_bounds__(kRegThreads)
    gdn_recurrent_reg_k(int n_k, int n_v, int dv, const float* __restrict__ qkv, size_t qkv_stride,
                        const float* __restrict__ g, const float* __restrict__ beta, int rows,
                        const int32_t* __restrict__ rows_limit, float* __restrict__ S, float* __restrict__ out,
                        bool keep_state) {
  pdl_wait();
  pdl_trigger();
  if (rows_limit != nullptr) rows = min(rows, *rows_limit);
  constexpr int kParts = 4, kRowsPerThread = DK / kParts;
  const int h = blockIdx.x, kh = h % n_k;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int part = lane % kParts;
  const int j = blockIdx.y * kRegColsPerBlock + warp * 8 + lane / kParts;  // d_v % 16 == 0: always a column
  const int i0 = part * kRowsPerThread;
  float* Sh = S + size_t(h) * DK * dv;
  float s[kRowsPerThread];
#pragma unroll
  for (int ii = 0; ii < kRowsPerThread; ++ii) s[ii] = Sh[size_t(i0 + ii) * dv + j];
  const size_t q_off = size_t(kh) * DK + i0, k_off = size_t(n_k + kh) * DK + i0;
  const size_t v_off = size_t(2 * n_k) * DK + size_t(h) * dv + j;
  const size_t out_stride = size_t(n_v) * dv;
  // A row's inputs (its share of k and q, v of column j, the decay and beta) are loaded while
  // the row before is computed: the rows form a chain through the state, and the loads' latency
  // was most of each link. The arithmetic and its order are unchanged.
  struct RowInputs {
    float k[kRowsPerThread], q[kRowsPerThread];
    float alpha, b, v;
  };
  auto load = [&](int t, RowInputs& in) {
    const float* row = qkv + size_t(t) * qkv_stride;
    in.alpha = expf(__ldg(g + size_t(t) * n_v + h));
    in.b = __ldg(beta + size_t(t) * n_v + h);
    in.v = __ldg(row + v_off);
#pragma unroll
    for (int ii = 0; ii < kRowsPerThread; ++ii) {
      in.k[ii] = __ldg(row + k_off + ii);
      in.q[ii] = __ldg(row + q_off + ii);
    }
  };
  RowInputs cur, next;
  if (rows > 0) load(0, cur);
  for (int t = 0; t < rows; ++t) {
    if (t + 1 < rows) load(t + 1, next);
    float m = 0.0f;
#pragma unroll
    for (int ii = 0; ii < kRowsPerThread; ++ii) {  // decay, and read the memory: m = S^T k
      s[ii] *= cur.alpha;
      m = fmaf(s[ii], cur.k[ii], m);
    }
    m += __shfl_xor_sync(0xffffffffu, m, 1);
    m += __shfl_xor_sync(0xffffffffu, m, 2);
    const float delta = cur.b * (cur.v - m);
    float o = 0.0f;
#pragma unroll
    for (int ii = 0; ii < kRowsPerThread; ++ii) {  // write, then read with the updated state
      s[ii] = fmaf(cur.k[ii], delta, s[ii]);
      o = fmaf(s[ii], cur.q[ii], o);
    }
    o += __shfl_xor_sync(0xffffffffu, o, 1);
    o += __shfl_xor_sync(0xffffffffu, o, 2);
    if (part == 0) out[size_t(t) * out_stride + size_t(h) * dv + j] = o;
    if (t + 1 < rows) cur = next;
  }
  if (keep_state) return;
#pragma unroll
  for (int ii = 0; ii < kRowsPerThread; ++ii) Sh[size_t(i0 + ii) * dv + j] = s[ii];
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
