// Where a position of a sequence lives in the paged KV cache (attention.cu, flash_attention.cu).
#pragma once
#include <cstdint>

namespace df::cuda {

// Token slot of position p in the cache (block id * block_tokens + offset), or -1 when p has no
// block: beyond the table, or a negative entry (CUDA graphs pad tables with -1 to a bucket
// length, so a graph serves a growing table; cuda_graphs.cpp).
__device__ __forceinline__ int64_t kv_slot(const int32_t* table, int n_blocks, int block_tokens, int p) {
  const int b = p / block_tokens;
  if (p < 0 || b >= n_blocks) return -1;
  const int32_t block = table[b];
  return block < 0 ? -1 : int64_t(block) * block_tokens + p % block_tokens;
}

}  // namespace df::cuda
