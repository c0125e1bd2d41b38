// Sequences and the state they own: a recurrent slot and a list of KV blocks. The model reads
// and advances them in forward(); schedulers create and free them.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "state/kv_pool.h"
#include "state/recurrent_pool.h"

namespace df {

struct Sequence {
  int id = -1;
  int recurrent_slot = -1;
  std::vector<int32_t> block_table;
  int n_past = 0;  // tokens whose state is committed (KV rows 0..n_past-1, recurrent state after them)
  // A speculative segment awaiting TargetModel::commit: its first position and row count.
  int spec_begin = -1;
  int spec_rows = 0;
};

class SequenceStore {
 public:
  // kv may be null (no attention layers), rec may be null (no recurrent layers).
  SequenceStore(std::unique_ptr<KvPool> kv, std::unique_ptr<RecurrentPool> rec, int max_tokens_per_seq);

  int create();          // throws df::Error when no slot is free
  void release(int id);  // frees blocks and slot
  void reset(int id);    // back to empty, keeping the id
  Sequence& get(int id);
  // Makes sure positions 0..n_tokens-1 have KV blocks; throws when the pool or the
  // per-sequence limit is exceeded.
  void reserve(int id, int n_tokens);

  KvPool* kv() const { return kv_.get(); }
  RecurrentPool* recurrent() const { return rec_.get(); }
  int max_tokens_per_seq() const { return max_tokens_; }

 private:
  std::unique_ptr<KvPool> kv_;
  std::unique_ptr<RecurrentPool> rec_;
  int max_tokens_;
  int next_id_ = 0;
  std::map<int, Sequence> seqs_;
};

}  // namespace df
