// Paged KV cache: store and causal GQA attention, f16, f32 or q8_0 storage (KvLayerView::type).
//
// attention: one block of 4 warps per (head, query row). Warp w takes positions w, w+4, ...
// with its own online softmax (running max m, sum l, accumulator in shared memory), then the
// four partial results are merged. Each position's K and V head vectors are read once per
// query head. Simple and exact in fp32: every call of up to kFlashMinRows rows, and any call
// flash_attention.cu does not take (f32 and q8_0 caches, other head dims).
//
// q8_0 rows must be the bytes the CPU backend writes (quantize_row: ggml's reference rounding,
// src/quant/activation_quant.cpp), so kv_store mirrors it operation by operation with explicitly
// rounded intrinsics (no FMA contraction): d = amax / 127, id = 1 / d (0 when d = 0), q =
// trunc(x * id + copysign(0.49999997, x * id)) (roundf: halves away from zero), d stored as f16
// rounded to nearest even. Reads dequantize q * d exactly (at most 18 significant bits).
#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_slot.cuh"

namespace df::cuda {

namespace {

constexpr int kAttnWarps = 4;
constexpr int kQ8Block = 32, kQ8Bytes = 34;  // elements and bytes of a Q8_0 block

// Element j of a K/V head row stored at p, for each storage format.
struct ReadF32 {
  __device__ static float at(const uint8_t* p, int j) { return kv_load(reinterpret_cast<const float*>(p) + j); }
};
struct ReadF16 {
  __device__ static float at(const uint8_t* p, int j) { return kv_load(reinterpret_cast<const uint16_t*>(p) + j); }
};
struct ReadQ8_0 {
  __device__ static float at(const uint8_t* p, int j) {
    const uint8_t* b = p + (j / kQ8Block) * kQ8Bytes;  // the scale is 2-byte aligned: blocks are 34 bytes
    return float(int8_t(b[2 + j % kQ8Block])) * half_bits_to_float(*reinterpret_cast<const uint16_t*>(b));
  }
};

// f32 / f16: one thread per element.
template <typename T>
__global__ void kv_store_k(uint8_t* kd, uint8_t* vd, int block_tokens, size_t ts, size_t tb,
                           const int32_t* __restrict__ table, int n_blocks, const float* __restrict__ k,
                           const float* __restrict__ v, const int32_t* __restrict__ pos) {
  pdl_wait();
  pdl_trigger();
  const int r = blockIdx.x;
  const int64_t slot = kv_slot(table, n_blocks, block_tokens, pos[r]);
  if (slot < 0) return;  // no block for this position: the model reserves blocks first
  T* kt = reinterpret_cast<T*>(kd + slot * int64_t(tb));
  T* vt = reinterpret_cast<T*>(vd + slot * int64_t(tb));
  for (size_t i = threadIdx.x; i < ts; i += blockDim.x) {
    kv_put(kt + i, k[r * ts + i]);
    kv_put(vt + i, v[r * ts + i]);
  }
}

// One Q8_0 block from one warp, lane i holding element x = x[i]; bytes as quantize_row writes them.
__device__ __forceinline__ void q8_0_block_put(uint8_t* blk, float x, int lane) {
  const float amax = warp_max(fabsf(x));  // the max is exact, so its order does not matter
  const float d = __fdiv_rn(amax, 127.0f);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  const float p = __fmul_rn(x, id);
  const int q = __float2int_rz(__fadd_rn(p, copysignf(0.49999997f, p)));
  if (lane == 0) *reinterpret_cast<uint16_t*>(blk) = __half_as_ushort(__float2half_rn(d));
  blk[2 + lane] = uint8_t(int8_t(q));
}

// q8_0: one warp per 32-element block; a token's K blocks, then its V blocks, spread over the warps.
__global__ void kv_store_q8_0_k(uint8_t* kd, uint8_t* vd, int block_tokens, size_t ts, size_t tb,
                                const int32_t* __restrict__ table, int n_blocks, const float* __restrict__ k,
                                const float* __restrict__ v, const int32_t* __restrict__ pos) {
  pdl_wait();
  pdl_trigger();
  const int r = blockIdx.x;
  const int64_t slot = kv_slot(table, n_blocks, block_tokens, pos[r]);
  if (slot < 0) return;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, n_warps = blockDim.x / kWarp;
  const int nb = int(ts / kQ8Block);
  for (int b = warp; b < 2 * nb; b += n_warps) {
    const bool is_v = b >= nb;
    const int i = is_v ? b - nb : b;
    const float x = (is_v ? v : k)[r * ts + size_t(i) * kQ8Block + lane];
    q8_0_block_put((is_v ? vd : kd) + slot * int64_t(tb) + int64_t(i) * kQ8Bytes, x, lane);
  }
}

template <typename Read>
__global__ void __launch_bounds__(kAttnWarps* kWarp)
    attention_k(const float* __restrict__ q, size_t q_row_stride, size_t q_head_stride,
                const int32_t* __restrict__ pos, int n_head, const uint8_t* __restrict__ kd,
                const uint8_t* __restrict__ vd, int block_tokens, int n_head_kv, int D, size_t tb, size_t hb,
                const int32_t* __restrict__ table, int n_blocks, float scale, float* __restrict__ out) {
  pdl_wait();
  pdl_trigger();
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
  const int last = pos[r];
  float m = -INFINITY, l = 0.0f;
  bool missing = false;
  for (int p = warp; p <= last; p += kAttnWarps) {
    const int64_t slot = kv_slot(table, n_blocks, block_tokens, p);
    if (slot < 0) {
      missing = true;
      break;
    }
    const int64_t at = slot * int64_t(tb) + int64_t(kvh) * int64_t(hb);
    const uint8_t* kp = kd + at;
    const uint8_t* vp = vd + at;
    float s = 0.0f;
    for (int j = lane; j < D; j += kWarp) s += qs[j] * Read::at(kp, j);
    s = warp_sum(s) * scale;
    if (s > m) {  // new maximum: rescale what we have (exp(-inf) = 0 on the first position)
      const float decay = expf(m - s);
      l = l * decay + 1.0f;
      for (int j = lane; j < D; j += kWarp) acc[j] = acc[j] * decay + Read::at(vp, j);
      m = s;
    } else {
      const float w = expf(s - m);
      l += w;
      for (int j = lane; j < D; j += kWarp) acc[j] += w * Read::at(vp, j);
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

template <typename Read>
void launch_attention(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos,
                      int n_head, const KvLayerView& kv, const int32_t* table, int n_blocks, float scale, float* out,
                      cudaStream_t s) {
  const dim3 grid{unsigned(n_head), unsigned(rows)};
  const size_t shared = size_t(1 + kAttnWarps) * kv.head_dim * sizeof(float);
  launch(attention_k<Read>, grid, kAttnWarps * kWarp, shared, s,
      q, q_row_stride, q_head_stride, pos, n_head, static_cast<const uint8_t*>(kv.k),
      static_cast<const uint8_t*>(kv.v), kv.block_tokens, kv.n_head_kv, kv.head_dim, kv.token_bytes(),
      kv.head_bytes(), table, n_blocks, scale, out);
}

}  // namespace

void kv_store(const KvLayerView& kv, const int32_t* table, int n_blocks, const float* k, const float* v,
              const int32_t* pos, int rows, cudaStream_t s) {
  auto* kd = static_cast<uint8_t*>(kv.k);
  auto* vd = static_cast<uint8_t*>(kv.v);
  const size_t ts = kv.token_stride(), tb = kv.token_bytes();
  switch (kv.type) {
    case GgmlType::F32:
      launch(kv_store_k<float>, rows, 128, 0, s, kd, vd, kv.block_tokens, ts, tb, table, n_blocks, k, v, pos);
      break;
    case GgmlType::Q8_0:
      launch(kv_store_q8_0_k, rows, 128, 0, s, kd, vd, kv.block_tokens, ts, tb, table, n_blocks, k, v, pos);
      break;
    default:
      launch(kv_store_k<uint16_t>, rows, 128, 0, s, kd, vd, kv.block_tokens, ts, tb, table, n_blocks, k, v, pos);
      break;
  }
}

void attention(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos, int n_head,
               const KvLayerView& kv, const int32_t* table, int n_blocks, float scale, float* out, cudaStream_t s) {
  if (rows > kFlashMinRows && flash_attention_supports(kv)) {  // prefill: tensor cores (flash_attention.cu)
    flash_attention(q, q_row_stride, q_head_stride, rows, pos, n_head, kv, table, n_blocks, scale, out, s);
    return;
  }
  switch (kv.type) {
    case GgmlType::F32:
      launch_attention<ReadF32>(q, q_row_stride, q_head_stride, rows, pos, n_head, kv, table, n_blocks, scale, out, s);
      break;
    case GgmlType::Q8_0:
      launch_attention<ReadQ8_0>(q, q_row_stride, q_head_stride, rows, pos, n_head, kv, table, n_blocks, scale, out, s);
      break;
    default:
      launch_attention<ReadF16>(q, q_row_stride, q_head_stride, rows, pos, n_head, kv, table, n_blocks, scale, out, s);
      break;
  }
}

}  // namespace df::cuda
