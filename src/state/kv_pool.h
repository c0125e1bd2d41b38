// Paged KV storage for all attention layers: fixed-size blocks of tokens handed out to
// sequences. A sequence's block table maps position / block_tokens to a block id.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace df {

class KvPool {
 public:
  // type: F16, F32 or Q8_0 (checked by check_kv_type, backend/backend.h).
  KvPool(Backend& be, int n_layers, int n_blocks, int block_tokens, int n_head_kv, int head_dim, GgmlType type);
  ~KvPool();
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  KvLayerView layer(int i) const;
  int block_tokens() const { return block_tokens_; }
  int total_blocks() const { return n_blocks_; }
  int free_blocks() const { return int(free_.size()); }
  size_t bytes() const { return bytes_; }

  // Returns -1 when the pool is exhausted.
  int32_t alloc_block();
  void free_block(int32_t id);

 private:
  Backend& be_;
  int n_layers_, n_blocks_, block_tokens_, n_head_kv_, head_dim_;
  GgmlType type_;
  size_t bytes_ = 0;
  std::vector<void*> k_, v_;
  std::vector<int32_t> free_;
};

}  // namespace df
