// Reading the paged KV cache from kernels: where a position lives, and element j of a stored
// K/V head row in each storage format (KvLayerView::type). Shared by attention.cu (store and the
// prompt kernel) and attention_decode.cu (the split decode kernel).
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

}  // namespace df::cuda
