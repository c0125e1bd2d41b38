// The partial kernel of the split attention (attention_decode.cu) for a whole GQA group: one
// block per (KV head, row, chunk of kSplitPositions positions) computes the chunk's softmax
// partials of all the query heads that share the KV head (up to kGroupMaxHeads per block), so
// each K and V row is read from memory once per group, not once per query head. Measured on
// the H200 (27B shape, 16 layers, session 6): decode costs 0.36 ms more per token at 1K context
// and 2.15 ms more at 32K than at an empty one (the per-head kernel: 1.48 and 3.54 ms).
//
// Why this shape. A decode step reads the context's K/V once per layer; the per-head kernel read
// it n_head / n_head_kv times and each warp walked positions with one dependent load at a time
// (load K -> dot -> reduce -> exp -> load V), so it was latency-bound. Here the block copies
// tiles of `tile` positions of K and V into shared memory with cp.async, two stages, so the next
// tile's loads (tile * head_bytes * 2 bytes, 32 KiB at head dim 256 f16) are in flight while this
// one is computed; the copy is plain 16-byte transfers whatever the compute layout needs. From
// shared memory, the scores put a position on each lane (lane t = position t, a segment of `tile`
// lanes per query head), so a dot product needs no cross-lane reduction and the tile's softmax
// is one segment max and sum; the PV product puts 4 consecutive dims and several heads on each
// thread (8 warps), so a V element read from shared memory serves all of them. Row stride: an odd number
// of 16-byte units, so the lanes' 16-byte reads of 32 different rows are conflict-free.
//
// Arithmetic: fp32, an online softmax over the chunk's tiles in position order (running max m,
// sum l, the accumulator rescaled by exp(m_old - m_new)); the tile size is a function of the
// head's byte size only. So a row's partials depend only on its query, position and the cache.
#pragma once
#include <cmath>

#include "backend/cuda/attention_span.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace df::cuda {

// 8 warps: at short contexts the grid is small (4 KV heads x 4 chunks at 1K), so a block's own
// speed counts; a score segment per head needs kGroupThreads / kGroupMaxTile >= kGroupMaxHeads.
constexpr int kGroupThreads = 256;
constexpr int kGroupMaxHeads = 8;              // query heads per block; larger groups take several blocks
constexpr int kGroupMaxTile = 32;              // positions per tile: a warp's lanes in the score phase
static_assert(kGroupThreads / kGroupMaxTile >= kGroupMaxHeads, "a score segment per head");
constexpr int kGroupMinTile = 4;               // the PV loop takes positions 4 at a time
constexpr int kGroupPvCols = 1;                // 4-dim columns per PV thread: head dim <= 4 * kGroupThreads * this
constexpr size_t kGroupSmemBudget = 112 * 1024;  // dynamic shared memory of a block, at most

// What the host decides for a layer shape (group_tiling in attention_decode.cu).
struct GroupTiling {
  int heads;      // query heads per block (the group, or kGroupMaxHeads)
  int subgroups;  // blocks per KV head and chunk
  int tile;       // positions per tile, a power of two in kGroupMinTile..kGroupMaxTile
  int row_bytes;  // shared-memory stride of a K/V row
  int unit;       // bytes per cp.async: 16, 8 or 4 (divides head_bytes)
};

// Bytes of dynamic shared memory: q [heads][D] and the weights [heads][tile] as floats, then two
// stages of K and V tiles [tile][row_bytes].
inline size_t group_smem_bytes(int heads, int D, int tile, int row_bytes) {
  return size_t(heads) * D * 4 + size_t(heads) * tile * 4 + 4 * size_t(tile) * row_bytes;
}

namespace group_detail {

template <int kBytes>
__device__ __forceinline__ void copy_async(uint8_t* dst, const uint8_t* src, bool live) {
  const uint32_t d = uint32_t(__cvta_generic_to_shared(dst));
  if constexpr (kBytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(live ? 16 : 0));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(d), "l"(src), "n"(kBytes),
                 "r"(live ? kBytes : 0));
}
__device__ __forceinline__ void copy_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void copy_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Elements j.. of a K/V head row in shared memory (j a multiple of the count).
template <typename Read>
struct SmemRow {
  __device__ static void get8(const uint8_t* row, int j, float (&x)[8]) {
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] = Read::at(row, j + k);
  }
  __device__ static void get4(const uint8_t* row, int j, float (&x)[4]) {
#pragma unroll
    for (int k = 0; k < 4; ++k) x[k] = Read::at(row, j + k);
  }
};
__device__ __forceinline__ void halves(uint32_t w, float& lo, float& hi) {
  lo = half_bits_to_float(uint16_t(w & 0xffffu));
  hi = half_bits_to_float(uint16_t(w >> 16));
}
template <>
struct SmemRow<ReadF16> {
  __device__ static void get8(const uint8_t* row, int j, float (&x)[8]) {
    const uint4 u = *reinterpret_cast<const uint4*>(row + 2 * j);
    halves(u.x, x[0], x[1]), halves(u.y, x[2], x[3]), halves(u.z, x[4], x[5]), halves(u.w, x[6], x[7]);
  }
  __device__ static void get4(const uint8_t* row, int j, float (&x)[4]) {
    const uint2 u = *reinterpret_cast<const uint2*>(row + 2 * j);
    halves(u.x, x[0], x[1]), halves(u.y, x[2], x[3]);
  }
};
template <>
struct SmemRow<ReadF32> {
  __device__ static void get8(const uint8_t* row, int j, float (&x)[8]) {
    const float4 a = *reinterpret_cast<const float4*>(row + 4 * j);
    const float4 b = *reinterpret_cast<const float4*>(row + 4 * j + 16);
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
  }
  __device__ static void get4(const uint8_t* row, int j, float (&x)[4]) {
    const float4 a = *reinterpret_cast<const float4*>(row + 4 * j);
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w;
  }
};

// Dot product of a K row with a q row (D a multiple of 8), 4 partial sums.
template <typename Read>
__device__ __forceinline__ float dot_row(const uint8_t* krow, const float* qh, int D) {
  float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int j = 0; j < D; j += 8) {
    float k[8];
    SmemRow<Read>::get8(krow, j, k);
    const float4 q0 = *reinterpret_cast<const float4*>(qh + j), q1 = *reinterpret_cast<const float4*>(qh + j + 4);
    a[0] = fmaf(q0.x, k[0], a[0]), a[1] = fmaf(q0.y, k[1], a[1]), a[2] = fmaf(q0.z, k[2], a[2]);
    a[3] = fmaf(q0.w, k[3], a[3]), a[0] = fmaf(q1.x, k[4], a[0]), a[1] = fmaf(q1.y, k[5], a[1]);
    a[2] = fmaf(q1.z, k[6], a[2]), a[3] = fmaf(q1.w, k[7], a[3]);
  }
  return (a[0] + a[1]) + (a[2] + a[3]);
}

// Max and sum over aligned segments of `width` lanes (a power of two <= 32); all 32 lanes call
// it, and every lane of a segment gets the same bits (the xor butterfly is symmetric).
__device__ __forceinline__ float segment_max(float v, int width) {
  for (int o = width / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float segment_sum(float v, int width) {
  for (int o = width / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

}  // namespace group_detail

// grid (n_head_kv * subgroups, rows, chunks), kGroupThreads threads, group_smem_bytes of shared
// memory; part: [row][head][chunk][D + 2] = acc[0..D), m, l (m = NaN when a position has no block).
template <typename Read, int kUnit>
__global__ void __launch_bounds__(kGroupThreads, 2)  // 2 blocks an SM: 128 registers
    attention_group_partial_k(const float* __restrict__ q, size_t q_row_stride, size_t q_head_stride,
                              const int32_t* __restrict__ pos, int n_head, const uint8_t* __restrict__ kd,
                              const uint8_t* __restrict__ vd, int block_tokens, int n_head_kv, int D, size_t tb,
                              size_t hb, const int32_t* __restrict__ table, int n_blocks, float scale, GroupTiling gt,
                              float* __restrict__ part) {
  using namespace group_detail;
  pdl_wait();
  pdl_trigger();
  const int group = n_head / n_head_kv;
  const int kvh = int(blockIdx.x) / gt.subgroups, g0 = (int(blockIdx.x) % gt.subgroups) * gt.heads;
  const int nh = min(gt.heads, group - g0), h0 = kvh * group + g0;
  const int r = blockIdx.y, c = blockIdx.z;
  const int last = pos[r];
  const int p0 = c * kSplitPositions;
  if (p0 > last) return;  // past the row's position: the merge never reads this chunk
  const int n_pos = min(last, p0 + kSplitPositions - 1) - p0 + 1;
  const int T = gt.tile, rb = gt.row_bytes, n_tiles = (n_pos + T - 1) / T;
  const int tid = threadIdx.x;

  extern __shared__ __align__(16) uint8_t smem[];
  float* qs = reinterpret_cast<float*>(smem);                      // [heads][D]
  float* ws = qs + gt.heads * D;                                   // [heads][T]: exp(score - m)
  uint8_t* tiles = reinterpret_cast<uint8_t*>(ws + gt.heads * T);  // [stage][K, V][T][rb]
  __shared__ float decay_s[kGroupMaxHeads];                        // exp(m_old - m_new) of this tile

  for (int i = tid; i < nh * D; i += kGroupThreads)
    qs[i] = q[size_t(r) * q_row_stride + size_t(h0 + i / D) * q_head_stride + i % D];

  // Tile `it` of K and V into stage it % 2; rows past the span or without a block become zeros.
  bool missing = false;
  const int per_row = int(hb) / kUnit;
  const int64_t head_at = int64_t(kvh) * int64_t(hb);
  auto copy_tile = [&](int it) {
    uint8_t* kt = tiles + size_t(it & 1) * 2 * T * rb;
    uint8_t* vt = kt + size_t(T) * rb;
    const int t0 = it * T, n = min(T, n_pos - t0);
    for (int e = tid; e < T * per_row; e += kGroupThreads) {
      const int t = e / per_row, u = e - t * per_row;
      const int64_t slot = t < n ? kv_slot(table, n_blocks, block_tokens, p0 + t0 + t) : -1;
      missing |= t < n && slot < 0;
      const bool live = slot >= 0;
      const int64_t at = live ? slot * int64_t(tb) + head_at + int64_t(u) * kUnit : 0;  // src stays mapped
      copy_async<kUnit>(kt + size_t(t) * rb + u * kUnit, kd + at, live);
      copy_async<kUnit>(vt + size_t(t) * rb + u * kUnit, vd + at, live);
    }
    copy_commit();
  };

  // Score role: lane st of segment sg (T lanes) is position st of the tile for head sg.
  const int st = tid % T, sg = tid / T;
  float m_run = -INFINITY, l_run = 0.0f;  // head sg's running max and sum
  // PV role: dims 4 col.. (4 (col + kGroupThreads).. too if kGroupPvCols > 1) of heads hg, hg + n_hg, ...
  const int ncol = D / 4, n_hg = max(1, kGroupThreads / ncol);
  const int col = tid % ncol, hg = tid / ncol;
  float acc[kGroupPvCols][kGroupMaxHeads][4] = {};

  copy_tile(0);
  for (int it = 0; it < n_tiles; ++it) {
    if (it + 1 < n_tiles) {
      copy_tile(it + 1);  // its stage was last read before the previous iteration's final barrier
      copy_wait<1>();
    } else {
      copy_wait<0>();
    }
    __syncthreads();  // tile it (and q) visible to the block
    const uint8_t* kt = tiles + size_t(it & 1) * 2 * T * rb;
    const uint8_t* vt = kt + size_t(T) * rb;
    const int n = min(T, n_pos - it * T);

    {  // scores and the tile's softmax step; every lane runs the segment reductions
      const float dot = sg < nh ? dot_row<Read>(kt + size_t(st) * rb, qs + sg * D, D) : 0.0f;
      const float x = st < n ? dot * scale : -INFINITY;
      const float m_new = fmaxf(m_run, segment_max(x, T));  // finite: position 0 of the tile is in the span
      const float w = st < n ? expf(x - m_new) : 0.0f;
      const float sum = segment_sum(w, T);
      const float decay = expf(m_run - m_new);  // 0 on the first tile (m_run = -inf)
      m_run = m_new;
      l_run = l_run * decay + sum;
      if (sg < nh) {
        ws[sg * T + st] = w;
        if (st == 0) decay_s[sg] = decay;
      }
    }
    __syncthreads();  // weights and decays visible

    if (hg < n_hg) {  // acc = acc * decay + sum_t w_t V_t, positions in order, 4 at a time
#pragma unroll
      for (int i = 0; i < kGroupMaxHeads; ++i) {
        const int g = hg + i * n_hg;
        if (g < nh) {
          const float d = decay_s[g];
#pragma unroll
          for (int cc = 0; cc < kGroupPvCols; ++cc)
#pragma unroll
            for (int k = 0; k < 4; ++k) acc[cc][i][k] *= d;
        }
      }
      for (int t4 = 0; t4 < n; t4 += 4) {  // T % 4 == 0; rows n..T-1 are zeros with weight 0
#pragma unroll
        for (int cc = 0; cc < kGroupPvCols; ++cc) {
          const int cl = col + cc * kGroupThreads;
          if (cl < ncol) {
            float v[4][4];
#pragma unroll
            for (int u = 0; u < 4; ++u) SmemRow<Read>::get4(vt + size_t(t4 + u) * rb, 4 * cl, v[u]);
#pragma unroll
            for (int i = 0; i < kGroupMaxHeads; ++i) {
              const int g = hg + i * n_hg;
              if (g < nh) {
                const float4 w = *reinterpret_cast<const float4*>(ws + g * T + t4);
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                  float a = acc[cc][i][k];
                  a = fmaf(w.x, v[0][k], a);
                  a = fmaf(w.y, v[1][k], a);
                  a = fmaf(w.z, v[2][k], a);
                  acc[cc][i][k] = fmaf(w.w, v[3][k], a);
                }
              }
            }
          }
        }
      }
    }
    __syncthreads();  // this stage and the weights are free for the next tiles
  }

  const bool bad = __syncthreads_or(missing);
  auto out_row = [&](int g) { return part + ((size_t(r) * n_head + h0 + g) * gridDim.z + c) * size_t(D + 2); };
  if (hg < n_hg) {
#pragma unroll
    for (int i = 0; i < kGroupMaxHeads; ++i) {
      const int g = hg + i * n_hg;
      if (g < nh) {
        float* o = out_row(g);
#pragma unroll
        for (int cc = 0; cc < kGroupPvCols; ++cc) {
          const int cl = col + cc * kGroupThreads;
          if (cl < ncol)
#pragma unroll
            for (int k = 0; k < 4; ++k) o[4 * cl + k] = acc[cc][i][k];
        }
      }
    }
  }
  if (st == 0 && sg < nh) {
    float* o = out_row(sg);
    o[D] = bad ? NAN : m_run;
    o[D + 1] = l_run;
  }
}

}  // namespace df::cuda
