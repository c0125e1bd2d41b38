#include "state/kv_pool.h"

#include "util/error.h"

namespace df {

KvPool::KvPool(Backend& be, int n_layers, int n_blocks, int block_tokens, int n_head_kv, int head_dim, GgmlType type)
    : be_(be), n_layers_(n_layers), n_blocks_(n_blocks), block_tokens_(block_tokens), n_head_kv_(n_head_kv),
      head_dim_(head_dim), type_(type) {
  check_kv_type(type, head_dim);
  // Bytes per token row from the type table (Q8_0: 34 bytes per 32 elements).
  const size_t per_layer = size_t(n_blocks) * block_tokens * row_size(type, int64_t(n_head_kv) * head_dim);
  for (int i = 0; i < n_layers; ++i) {
    k_.push_back(be_.alloc(per_layer));
    v_.push_back(be_.alloc(per_layer));
  }
  bytes_ = 2 * per_layer * size_t(n_layers);
  // Hand out low ids first (pop from the back).
  for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

KvPool::~KvPool() {
  for (auto* p : k_) be_.release(p);
  for (auto* p : v_) be_.release(p);
}

KvLayerView KvPool::layer(int i) const {
  return KvLayerView{k_[size_t(i)], v_[size_t(i)], block_tokens_, n_head_kv_, head_dim_, type_};
}

int32_t KvPool::alloc_block() {
  if (free_.empty()) return -1;
  const int32_t b = free_.back();
  free_.pop_back();
  return b;
}

void KvPool::free_block(int32_t id) { free_.push_back(id); }

}  // namespace df
