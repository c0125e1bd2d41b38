// Paged KV cache: store and causal GQA attention, f16 or f32 storage (KvLayerView::type).
//
// attention: one block of 4 warps per (head, query row). Warp w takes positions w, w+4, ...
// with its own online softmax (running max m, sum l, accumulator in shared memory), then the
// four partial results are merged. Each position's K and V head vectors are read once per
// query head. Simple and exact in fp32; flash-style tiling over query rows and heads of a GQA
// group (reading K/V once per group) is the speed work for later.
#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace df::cuda {

namespace {

constexpr int kAttnWarps = 4;

// Slot of position p in the cache, in elements, or -1 when p has no block.
__device__ __forceinline__ int64_t kv_slot(const int32_t* table, int n_blocks, int block_tokens, size_t token_stride,
                                           int p) {
  const int b = p / block_tokens;
  if (p < 0 || b >= n_blocks) return -1;
  return (int64_t(table[b]) * block_tokens + p % block_tokens) * int64_t(token_stride);
}

template <typename T>
__global__ void kv_store_k(T* kd, T* vd, int block_tokens, size_t ts, const int32_t* __restrict__ table,
                           int n_blocks, const float* __restrict__ k, const float* __restrict__ v,
                           const int32_t* __restrict__ pos) {
  const int r = blockIdx.x;
  const int64_t at = kv_slot(table, n_blocks, block_tokens, ts, pos[r]);
  if (at < 0) return;  // no block for this position: the model reserves blocks first
  for (size_t i = threadIdx.x; i < ts; i += blockDim.x) {
    kv_put(kd + at + i, k[r * ts + i]);
    kv_put(vd + at + i, v[r * ts + i]);
  }
}

template <typename T>
__global__ void __launch_bounds__(kAttnWarps* kWarp)
    attention_k(const float* __restrict__ q, size_t q_row_stride, size_t q_head_stride,
                const int32_t* __restrict__ pos, int n_head, const T* __restrict__ kd, const T* __restrict__ vd,
                int block_tokens, int n_head_kv, int D, const int32_t* __restrict__ table, int n_blocks,
                float scale, float* __restrict__ out) {
  extern __shared__ float sm[];
  float* qs = sm;                            // [D]
  float* acc_all = sm + D;                   // [kAttnWarps][D]
  __shared__ float part_m[kAttnWarps], part_l[kAttnWarps];
  const int h = blockIdx.x, r = blockIdx.y;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const float* qh = q + r * q_row_stride + h * q_head_stride;
  for (int j = threadIdx.x; j < D; j += blockDim.x) qs[j] = qh[j];
  float* acc = acc_all + warp * D;
  for (int j = lane; j < D; j += kWarp) acc[j] = 0.0f;
  __syncthreads();

  const int kvh = h / (n_head / n_head_kv);
  const size_t ts = size_t(n_head_kv) * D;
  const int last = pos[r];
  float m = -INFINITY, l = 0.0f;
  bool missing = false;
  for (int p = warp; p <= last; p += kAttnWarps) {
    const int64_t slot = kv_slot(table, n_blocks, block_tokens, ts, p);
    if (slot < 0) {
      missing = true;
      break;
    }
    const T* kp = kd + slot + int64_t(kvh) * D;
    const T* vp = vd + slot + int64_t(kvh) * D;
    float s = 0.0f;
    for (int j = lane; j < D; j += kWarp) s += qs[j] * kv_load(kp + j);
    s = warp_sum(s) * scale;
    if (s > m) {  // new maximum: rescale what we have (exp(-inf) = 0 on the first position)
      const float decay = expf(m - s);
      l = l * decay + 1.0f;
      for (int j = lane; j < D; j += kWarp) acc[j] = acc[j] * decay + kv_load(vp + j);
      m = s;
    } else {
      const float w = expf(s - m);
      l += w;
      for (int j = lane; j < D; j += kWarp) acc[j] += w * kv_load(vp + j);
    }
  }
  if (lane == 0) {
    part_m[warp] = missing ? NAN : m;
    part_l[warp] = l;
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int w = 0; w < kAttnWarps; ++w) mx = fmaxf(mx, part_m[w]);  // fmaxf drops NaN: checked below
  bool bad = false;
  float wt[kAttnWarps], denom = 0.0f;
  for (int w = 0; w < kAttnWarps; ++w) {
    bad |= isnan(part_m[w]);
    wt[w] = expf(part_m[w] - mx);  // a warp with no positions has m = -inf, weight 0
    denom += part_l[w] * wt[w];
  }
  float* o = out + (int64_t(r) * n_head + h) * D;
  for (int j = threadIdx.x; j < D; j += blockDim.x) {
    float num = 0.0f;
    for (int w = 0; w < kAttnWarps; ++w) num += acc_all[w * D + j] * wt[w];
    o[j] = bad ? NAN : num / denom;
  }
}

template <typename T>
void launch_attention(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos,
                      int n_head, const KvLayerView& kv, const int32_t* table, int n_blocks, float scale, float* out,
                      cudaStream_t s) {
  const dim3 grid{unsigned(n_head), unsigned(rows)};
  const size_t shared = size_t(1 + kAttnWarps) * kv.head_dim * sizeof(float);
  attention_k<T><<<grid, kAttnWarps * kWarp, shared, s>>>(
      q, q_row_stride, q_head_stride, pos, n_head, static_cast<const T*>(kv.k), static_cast<const T*>(kv.v),
      kv.block_tokens, kv.n_head_kv, kv.head_dim, table, n_blocks, scale, out);
}

}  // namespace

void kv_store(const KvLayerView& kv, const int32_t* table, int n_blocks, const float* k, const float* v,
              const int32_t* pos, int rows, cudaStream_t s) {
  if (kv.type == GgmlType::F32) {
    kv_store_k<float><<<rows, 128, 0, s>>>(static_cast<float*>(kv.k), static_cast<float*>(kv.v), kv.block_tokens,
                                           kv.token_stride(), table, n_blocks, k, v, pos);
  } else {
    kv_store_k<uint16_t><<<rows, 128, 0, s>>>(static_cast<uint16_t*>(kv.k), static_cast<uint16_t*>(kv.v),
                                              kv.block_tokens, kv.token_stride(), table, n_blocks, k, v, pos);
  }
}

void attention(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos, int n_head,
               const KvLayerView& kv, const int32_t* table, int n_blocks, float scale, float* out, cudaStream_t s) {
  if (kv.type == GgmlType::F32) {
    launch_attention<float>(q, q_row_stride, q_head_stride, rows, pos, n_head, kv, table, n_blocks, scale, out, s);
  } else {
    launch_attention<uint16_t>(q, q_row_stride, q_head_stride, rows, pos, n_head, kv, table, n_blocks, scale, out, s);
  }
}

}  // namespace df::cuda
