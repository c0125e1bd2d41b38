// Reading the paged KV cache from kernels (where a position lives, element j of a stored K/V
// head row in each storage format) and the softmax over a span of positions that both attention
// kernels are made of: attention.cu (store, and the one-pass kernel for prompts) and
// attention_decode.cu (the split kernel for decode and verify rows).
#pragma once
#include <cstdint>

#include "backend/cuda/common.cuh"

namespace df::cuda {

constexpr int kQ8Block = 32, kQ8Bytes = 34;  // elements and bytes of a Q8_0 block

// Token slot of position p in the cache (block id * block_tokens + offset), or -1 when p has no
// block: beyond the table, or a negative entry (CUDA graphs pad tables with -1 to a bucket
// length, so a graph serves a growing table; cuda_graphs.cpp).
__device__ __forceinline__ int64_t kv_slot(const int32_t* table, int n_blocks, int block_tokens, int p) {
  const int b = p / block_tokens;
  if (p < 0 || b >= n_blocks) return -1;
  const int32_t block = table[b];
  return block < 0 ? -1 : int64_t(block) * block_tokens + p % block_tokens;
}

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

constexpr int kSpanWarps = 4;  // warps of a block running attend_span

// What attend_span leaves: the merged maximum score, sum of exp(score - mx) and whether a
// position had no block (bad), with each warp's weight exp(m_w - mx); the unnormalised output
// element j is span_num(sm, D, r, j).
struct SpanResult {
  float mx, denom;
  bool bad;
  float wt[kSpanWarps];
};

// One query head row (qh, D floats) against positions p0..p_end (p0 <= p_end) of KV head kvh:
// warp w takes positions p0 + w, p0 + w + 4, ... with its own online softmax (running max m,
// sum l, accumulator in shared memory), then the warps' partials are merged in warp order.
// sm: (1 + kSpanWarps) * D floats of shared memory. Called by all kSpanWarps * 32 threads.
template <typename Read>
__device__ __forceinline__ SpanResult attend_span(const float* __restrict__ qh, float* sm, const uint8_t* __restrict__ kd,
                                                  const uint8_t* __restrict__ vd, int block_tokens, int kvh, int D,
                                                  size_t tb, size_t hb, const int32_t* __restrict__ table, int n_blocks,
                                                  float scale, int p0, int p_end) {
  __shared__ float part_m[kSpanWarps], part_l[kSpanWarps];
  float* qs = sm;          // [D]
  float* acc_all = sm + D;  // [kSpanWarps][D]
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  for (int j = threadIdx.x; j < D; j += blockDim.x) qs[j] = qh[j];
  float* acc = acc_all + warp * D;
  for (int j = lane; j < D; j += kWarp) acc[j] = 0.0f;
  __syncthreads();
  float m = -INFINITY, l = 0.0f;
  bool missing = false;
  for (int p = p0 + warp; p <= p_end; p += kSpanWarps) {
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
  // Warp 0 has position p0, so mx is finite unless a score is inf or NaN; a warp without
  // positions (m = -inf) gets weight 0. fmaxf drops NaN: bad records it.
  SpanResult r{-INFINITY, 0.0f, false, {}};
  for (int w = 0; w < kSpanWarps; ++w) {
    r.bad |= isnan(part_m[w]);
    r.mx = fmaxf(r.mx, part_m[w]);
  }
  for (int w = 0; w < kSpanWarps; ++w) {
    r.wt[w] = expf(part_m[w] - r.mx);
    r.denom += part_l[w] * r.wt[w];
  }
  return r;
}

__device__ __forceinline__ float span_num(const float* sm, int D, const SpanResult& r, int j) {
  float num = 0.0f;
  for (int w = 0; w < kSpanWarps; ++w) num += sm[D + w * D + j] * r.wt[w];
  return num;
}

}  // namespace df::cuda
