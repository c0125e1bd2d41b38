// Attention for the few query rows of a decode or verify step, split over the context
// (split-K, "flash decoding").
//
// Why. One block per (query head, row) walking the whole context gives a 1-row decode step of a
// 24-head model 24 blocks on a 132-SM GPU, so at long contexts attention runs at a few percent
// of the memory bandwidth. Here the context is cut into chunks of kSplitPositions positions: a
// block per (KV head, row, chunk) computes that chunk's unnormalised softmax partial of every
// query head of the GQA group (its maximum score m, the sum l of exp(score - m), and acc = sum
// exp(score - m) V; attention_group.cuh), and a second kernel merges a row's chunks in chunk
// order. Head dims that are not a multiple of 8 (or q8_0 rows not a multiple of 4 bytes) keep the
// simpler per-query-head partial kernel (attend_span: 4 warps, one position each at a time).
//
// Batch invariance. The chunks are a function of the position alone (fixed size, from 0), and a
// row's partials and merge read only its own query, position and the cache, so a row's output
// does not depend on the other rows of the call, nor on the table's length (CUDA graphs pad
// tables: cuda_graphs.h), which speculation and the graph replays rely on.
//
// Missing blocks. A chunk that meets a position without a block records m = NaN, and the merge
// turns the row's output into NaN, as the old kernel did (the model reserves blocks first).
#include <cmath>

#include "backend/cuda/attention_group.cuh"
#include "backend/cuda/attention_span.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace df::cuda {

namespace {

// Chunks of a table of n_blocks blocks: every position the table can hold has one.
int split_chunks(int n_blocks, int block_tokens) {
  const int64_t positions = int64_t(n_blocks > 0 ? n_blocks : 1) * block_tokens;
  return int((positions + kSplitPositions - 1) / kSplitPositions);
}

// The per-query-head partials (head dims the group kernel does not take).
// grid (n_head, rows, chunks); part: [row][head][chunk][D + 2] = acc[0..D), m, l.
template <typename Read>
__global__ void __launch_bounds__(kSpanWarps* kWarp)
    attention_partial_k(const float* __restrict__ q, size_t q_row_stride, size_t q_head_stride,
                        const int32_t* __restrict__ pos, int n_head, const uint8_t* __restrict__ kd,
                        const uint8_t* __restrict__ vd, int block_tokens, int n_head_kv, int D, size_t tb, size_t hb,
                        const int32_t* __restrict__ table, int n_blocks, float scale, float* __restrict__ part) {
  pdl_wait();
  pdl_trigger();
  const int h = blockIdx.x, r = blockIdx.y, c = blockIdx.z;
  const int last = pos[r];
  const int p0 = c * kSplitPositions;
  if (p0 > last) return;  // past the row's position: the merge never reads this chunk
  const int p_end = min(last, p0 + kSplitPositions - 1);

  extern __shared__ float sm[];  // attend_span's
  const int kvh = h / (n_head / n_head_kv);
  const SpanResult res = attend_span<Read>(q + r * q_row_stride + h * q_head_stride, sm, kd, vd, block_tokens, kvh, D,
                                           tb, hb, table, n_blocks, scale, p0, p_end);
  float* o = part + ((size_t(r) * n_head + h) * gridDim.z + c) * size_t(D + 2);
  for (int j = threadIdx.x; j < D; j += blockDim.x) o[j] = span_num(sm, D, res, j);
  if (threadIdx.x == 0) {
    o[D] = res.bad ? NAN : res.mx;
    o[D + 1] = res.denom;
  }
}

// grid (n_head, rows): out[r][h][j] = sum_c acc_c[j] e_c / sum_c l_c e_c, e_c = exp(m_c - max m),
// over the chunks 0..pos[r] / kSplitPositions in order.
__global__ void attention_merge_k(const int32_t* __restrict__ pos, int n_head, int D, int chunks,
                                  const float* __restrict__ part, float* __restrict__ out) {
  pdl_wait();
  pdl_trigger();
  const int h = blockIdx.x, r = blockIdx.y;
  const int last = pos[r];
  float* o = out + (int64_t(r) * n_head + h) * D;
  const int n = last / kSplitPositions + 1;
  if (last < 0 || n > chunks) {  // no position, or positions beyond the table: as a missing block
    for (int j = threadIdx.x; j < D; j += blockDim.x) o[j] = NAN;
    return;
  }
  const float* p = part + (size_t(r) * n_head + h) * chunks * size_t(D + 2);
  bool bad = false;
  float mx = -INFINITY;
  for (int c = 0; c < n; ++c) {
    const float m = p[size_t(c) * (D + 2) + D];
    bad |= isnan(m);
    mx = fmaxf(mx, m);
  }
  float denom = 0.0f;
  for (int c = 0; c < n; ++c) denom += p[size_t(c) * (D + 2) + D + 1] * expf(p[size_t(c) * (D + 2) + D] - mx);
  for (int j = threadIdx.x; j < D; j += blockDim.x) {
    float num = 0.0f;
    for (int c = 0; c < n; ++c) num += p[size_t(c) * (D + 2) + j] * expf(p[size_t(c) * (D + 2) + D] - mx);
    o[j] = bad ? NAN : num / denom;
  }
}

// The group kernel's tiling for this layer shape, or ok = false where it does not apply.
struct GroupPlan {
  GroupTiling tiling;
  size_t smem;
  bool ok;
};

GroupPlan group_plan(int n_head, const KvLayerView& kv) {
  GroupPlan p{};
  const int group = n_head / kv.n_head_kv, D = kv.head_dim;
  const size_t hb = kv.head_bytes();
  GroupTiling& t = p.tiling;
  t.heads = group < kGroupMaxHeads ? group : kGroupMaxHeads;
  t.subgroups = (group + t.heads - 1) / t.heads;
  int units = int((hb + 15) / 16);
  units += 1 - units % 2;  // odd: 32 lanes reading 16 bytes of 32 rows hit distinct banks
  t.row_bytes = 16 * units;
  t.unit = hb % 16 == 0 ? 16 : hb % 8 == 0 ? 8 : 4;
  for (t.tile = kGroupMaxTile; t.tile > kGroupMinTile; t.tile /= 2)
    if (group_smem_bytes(t.heads, D, t.tile, t.row_bytes) <= kGroupSmemBudget) break;
  p.smem = group_smem_bytes(t.heads, D, t.tile, t.row_bytes);
  const auto addr = reinterpret_cast<uintptr_t>(kv.k) | reinterpret_cast<uintptr_t>(kv.v);
  p.ok = D % 8 == 0 && D <= 4 * kGroupThreads * kGroupPvCols && hb % 4 == 0 && addr % uintptr_t(t.unit) == 0 &&
         p.smem <= kGroupSmemBudget;
  return p;
}

// False (nothing launched) where the device refuses the shared memory the group kernel needs.
template <typename Read, int kUnit>
bool launch_group(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos, int n_head,
                  const KvLayerView& kv, const int32_t* table, int n_blocks, float scale, const GroupPlan& plan,
                  int chunks, float* part, cudaStream_t s) {
  constexpr auto kernel = attention_group_partial_k<Read, kUnit>;
  // Above the default 48 KiB of dynamic shared memory (head dim 256 f16, 6 heads: 73 KiB).
  if (!raise_smem_limit<kernel>(int(kGroupSmemBudget))) return false;  // the fallback kernel runs instead
  const unsigned blocks = unsigned(kv.n_head_kv * plan.tiling.subgroups);
  launch(kernel, dim3(blocks, unsigned(rows), unsigned(chunks)), kGroupThreads, plan.smem, s, q, q_row_stride,
         q_head_stride, pos, n_head, static_cast<const uint8_t*>(kv.k), static_cast<const uint8_t*>(kv.v),
         kv.block_tokens, kv.n_head_kv, kv.head_dim, kv.token_bytes(), kv.head_bytes(), table, n_blocks, scale,
         plan.tiling, part);
  return true;
}

template <typename Read>
void launch_split(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos,
                  int n_head, const KvLayerView& kv, const int32_t* table, int n_blocks, float scale, float* part,
                  float* out, cudaStream_t s) {
  const int chunks = split_chunks(n_blocks, kv.block_tokens);
  const GroupPlan plan = group_plan(n_head, kv);
  bool done = false;
  if (plan.ok && plan.tiling.unit == 16)
    done = launch_group<Read, 16>(q, q_row_stride, q_head_stride, rows, pos, n_head, kv, table, n_blocks, scale, plan,
                                  chunks, part, s);
  else if (plan.ok && plan.tiling.unit == 8)
    done = launch_group<Read, 8>(q, q_row_stride, q_head_stride, rows, pos, n_head, kv, table, n_blocks, scale, plan,
                                 chunks, part, s);
  else if (plan.ok)
    done = launch_group<Read, 4>(q, q_row_stride, q_head_stride, rows, pos, n_head, kv, table, n_blocks, scale, plan,
                                 chunks, part, s);
  if (!done) {
    const size_t shared = size_t(1 + kSpanWarps) * kv.head_dim * sizeof(float);
    launch(attention_partial_k<Read>, dim3(unsigned(n_head), unsigned(rows), unsigned(chunks)), kSpanWarps * kWarp,
           shared, s, q, q_row_stride, q_head_stride, pos, n_head, static_cast<const uint8_t*>(kv.k),
           static_cast<const uint8_t*>(kv.v), kv.block_tokens, kv.n_head_kv, kv.head_dim, kv.token_bytes(),
           kv.head_bytes(), table, n_blocks, scale, part);
  }
  launch(attention_merge_k, dim3(unsigned(n_head), unsigned(rows)), 128, 0, s, pos, n_head, kv.head_dim, chunks,
         static_cast<const float*>(part), out);
}

}  // namespace

size_t attention_split_scratch_bytes(int rows, int n_head, const KvLayerView& kv, int n_blocks) {
  return size_t(rows) * size_t(n_head) * size_t(split_chunks(n_blocks, kv.block_tokens)) * size_t(kv.head_dim + 2) *
         sizeof(float);
}

void attention_split(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos,
                     int n_head, const KvLayerView& kv, const int32_t* table, int n_blocks, float scale, void* scratch,
                     float* out, cudaStream_t s) {
  float* part = static_cast<float*>(scratch);
  switch (kv.type) {
    case GgmlType::F32:
      launch_split<ReadF32>(q, q_row_stride, q_head_stride, rows, pos, n_head, kv, table, n_blocks, scale, part, out, s);
      break;
    case GgmlType::Q8_0:
      launch_split<ReadQ8_0>(q, q_row_stride, q_head_stride, rows, pos, n_head, kv, table, n_blocks, scale, part, out, s);
      break;
    default:
      launch_split<ReadF16>(q, q_row_stride, q_head_stride, rows, pos, n_head, kv, table, n_blocks, scale, part, out, s);
      break;
  }
}

}  // namespace df::cuda
