// Paged KV cache: store and causal GQA attention, f16, f32 or q8_0 storage (KvLayerView::type).
//
// attention: calls of at most kSplitMaxRows rows (decode, verify) take the split kernel of
// attention_decode.cu; longer f16-cache calls of head dim 64, 128 or 256 take the flash kernel
// of flash_attention.cu; the rest (prompts on f32 and q8_0 caches, other head dims) take the
// one-pass kernel here: one block of 4 warps per (head, query row). Warp w takes positions w,
// w+4, ... with its own online softmax (running max m, sum l, accumulator in shared memory),
// then the four partial results are merged. Each position's K and V head vectors are read once
// per query head. Simple and exact in fp32.
//
// q8_0 rows must be the bytes the CPU backend writes (quantize_row: ggml's reference rounding,
// src/quant/activation_quant.cpp), so kv_store mirrors it operation by operation with explicitly
// rounded intrinsics (no FMA contraction): d = amax / 127, id = 1 / d (0 when d = 0), q =
// trunc(x * id + copysign(0.49999997, x * id)) (roundf: halves away from zero), d stored as f16
// rounded to nearest even. Reads dequantize q * d exactly (at most 18 significant bits).
#include <cmath>

#include "backend/cuda/attention_span.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace df::cuda {

namespace {

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
__global__ void __launch_bounds__(kSpanWarps* kWarp)
    attention_k(const float* __restrict__ q, size_t q_row_stride, size_t q_head_stride,
                const int32_t* __restrict__ pos, int n_head, const uint8_t* __restrict__ kd,
                const uint8_t* __restrict__ vd, int block_tokens, int n_head_kv, int D, size_t tb, size_t hb,
                const int32_t* __restrict__ table, int n_blocks, float scale, float* __restrict__ out) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ float sm[];  // attend_span's
  const int h = blockIdx.x, r = blockIdx.y;
  const int kvh = h / (n_head / n_head_kv);
  const SpanResult res = attend_span<Read>(q + r * q_row_stride + h * q_head_stride, sm, kd, vd, block_tokens, kvh, D,
                                           tb, hb, table, n_blocks, scale, 0, pos[r]);
  float* o = out + (int64_t(r) * n_head + h) * D;
  for (int j = threadIdx.x; j < D; j += blockDim.x) o[j] = res.bad ? NAN : span_num(sm, D, res, j) / res.denom;
}

template <typename Read>
void launch_attention(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos,
                      int n_head, const KvLayerView& kv, const int32_t* table, int n_blocks, float scale, float* out,
                      cudaStream_t s) {
  const dim3 grid{unsigned(n_head), unsigned(rows)};
  const size_t shared = size_t(1 + kSpanWarps) * kv.head_dim * sizeof(float);
  launch(attention_k<Read>, grid, kSpanWarps * kWarp, shared, s,
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
