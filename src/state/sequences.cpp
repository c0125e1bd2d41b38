#include "state/sequences.h"

#include "util/error.h"

namespace df {

SequenceStore::SequenceStore(std::unique_ptr<KvPool> kv, std::unique_ptr<RecurrentPool> rec, int max_tokens_per_seq)
    : kv_(std::move(kv)), rec_(std::move(rec)), max_tokens_(max_tokens_per_seq) {}

int SequenceStore::create() {
  Sequence s;
  s.id = next_id_++;
  if (rec_) {
    s.recurrent_slot = rec_->alloc_slot();
    if (s.recurrent_slot < 0) fail("no free sequence slot (all recurrent state slots are in use)");
  }
  seqs_.emplace(s.id, std::move(s));
  return next_id_ - 1;
}

Sequence& SequenceStore::get(int id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) fail("unknown sequence id {}", id);
  return it->second;
}

void SequenceStore::release(int id) {
  Sequence& s = get(id);
  if (kv_) for (int32_t b : s.block_table) kv_->free_block(b);
  if (rec_ && s.recurrent_slot >= 0) rec_->free_slot(s.recurrent_slot);
  seqs_.erase(id);
}

void SequenceStore::reset(int id) {
  Sequence& s = get(id);
  if (kv_) for (int32_t b : s.block_table) kv_->free_block(b);
  s.block_table.clear();
  if (rec_ && s.recurrent_slot >= 0) rec_->clear_slot(s.recurrent_slot);
  s.n_past = 0;
  s.spec_begin = -1;
  s.spec_rows = 0;
}

void SequenceStore::reserve(int id, int n_tokens) {
  Sequence& s = get(id);
  if (n_tokens > max_tokens_)
    fail("sequence needs {} tokens but the context holds {} (raise --ctx)", n_tokens, max_tokens_);
  if (!kv_) return;
  const int need = (n_tokens + kv_->block_tokens() - 1) / kv_->block_tokens();
  while (int(s.block_table.size()) < need) {
    const int32_t b = kv_->alloc_block();
    if (b < 0) fail("KV cache is full ({} blocks of {} tokens)", kv_->total_blocks(), kv_->block_tokens());
    s.block_table.push_back(b);
  }
}

}  // namespace df
