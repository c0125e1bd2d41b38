// Attention for the few query rows of a decode or verify step, split over the context
// (split-K, "flash decoding").
//
// Why. One block per (query head, row) walking the whole context gives a 1-row decode step of a
// 24-head model 24 blocks on a 132-SM GPU, so at long contexts attention runs at a few percent
// of the memory bandwidth. Here the context is cut into chunks of kSplitPositions positions: a
// block per (head, row, chunk) computes that chunk's unnormalised softmax partial (its maximum
// score m, the sum l of exp(score - m), and acc = sum exp(score - m) V), and a second kernel
// merges a row's chunks in chunk order. Inside a block, 4 warps take positions w, w + 4, ... of
// the chunk with their own online softmax, merged in warp order, as the one-pass kernel did.
//
// Batch invariance. The chunks are a function of the position alone (fixed size, from 0), and a
// row's partials and merge read only its own query, position and the cache, so a row's output
// does not depend on the other rows of the call, nor on the table's length (CUDA graphs pad
// tables: cuda_graphs.h), which speculation and the graph replays rely on.
//
// Missing blocks. A chunk that meets a position without a block records m = NaN, and the merge
// turns the row's output into NaN, as the old kernel did (the model reserves blocks first).
#include <cmath>

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

template <typename Read>
void launch_split(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos,
                  int n_head, const KvLayerView& kv, const int32_t* table, int n_blocks, float scale, float* part,
                  float* out, cudaStream_t s) {
  const int chunks = split_chunks(n_blocks, kv.block_tokens);
  const size_t shared = size_t(1 + kSpanWarps) * kv.head_dim * sizeof(float);
  launch(attention_partial_k<Read>, dim3(unsigned(n_head), unsigned(rows), unsigned(chunks)), kSpanWarps * kWarp,
         shared, s, q, q_row_stride, q_head_stride, pos, n_head, static_cast<const uint8_t*>(kv.k),
         static_cast<const uint8_t*>(kv.v), kv.block_tokens, kv.n_head_kv, kv.head_dim, kv.token_bytes(),
         kv.head_bytes(), table, n_blocks, scale, part);
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
