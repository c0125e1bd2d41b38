#include "spec/draft_source.h"

#include <algorithm>
#include <numeric>

#include "backend/top_k_order.h"
#include "model/target_model.h"
#include "util/error.h"

namespace df {

void DraftSource::on_target_rows_from(int first_row, int kept) {
  if (first_row != 0) fail("this draft source takes target rows from the start of a forward only");
  on_target_rows(kept);
}

void DraftSource::propose_greedy(int32_t anchor, int n, int limit, std::vector<int32_t>& ids) {
  std::vector<float> logits;
  propose(anchor, n, logits);
  const size_t V = n > 0 ? logits.size() / size_t(n) : 0;
  ids.resize(size_t(n));
  for (int i = 0; i < n; ++i) {
    const float* row = logits.data() + size_t(i) * V;
    ids[size_t(i)] = int32_t(std::max_element(row, row + limit) - row);
  }
}

void DraftSource::propose_greedy_to(int32_t anchor, int n, int limit, Backend& be, int32_t* ids) {
  std::vector<int32_t> host;
  propose_greedy(anchor, n, limit, host);
  be.upload(ids, host.data(), size_t(n) * sizeof(int32_t));
}

void DraftSource::propose_top(int32_t anchor, int n, int k, int limit, std::vector<int32_t>& ids,
                              std::vector<float>& logits) {
  std::vector<float> full;
  propose(anchor, n, full);
  const size_t V = n > 0 ? full.size() / size_t(n) : 0;
  if (k < 1 || k > limit || size_t(limit) > V) fail("propose_top: k {} and limit {} for a vocabulary of {}", k, limit, V);
  ids.resize(size_t(n) * size_t(k));
  logits.resize(ids.size());
  std::vector<int32_t> order(static_cast<size_t>(limit));
  for (int i = 0; i < n; ++i) {
    const float* row = full.data() + size_t(i) * V;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      const uint32_t ka = top_k_key(row[size_t(a)]), kb = top_k_key(row[size_t(b)]);
      return ka > kb || (ka == kb && a < b);
    });
    for (int j = 0; j < k; ++j) {
      ids[size_t(i) * size_t(k) + size_t(j)] = order[size_t(j)];
      logits[size_t(i) * size_t(k) + size_t(j)] = row[size_t(order[size_t(j)])];
    }
  }
}

DFlashSource::DFlashSource(DraftModel& draft, TargetModel& target, int ctx)
    : draft_(draft), target_(target), state_(draft.make_state(1, ctx)) {
  seq_ = state_->create();
  backlog_ = static_cast<float*>(
      target_.backend().alloc(size_t(draft_.block_size()) * size_t(target_.feature_width()) * sizeof(float)));
}

DFlashSource::~DFlashSource() { target_.backend().release(backlog_); }

void DFlashSource::on_target_rows(int kept) { on_target_rows_from(0, kept); }

void DFlashSource::on_target_rows_from(int first_row, int kept) {
  const size_t W = size_t(target_.feature_width());
  const float* rows = target_.features() + size_t(first_row) * W;
  const int B = draft_.block_size();
  if (pending_ + kept > B) flush();
  if (kept > B) {  // a prompt chunk: at once
    draft_.ingest(*state_, seq_, rows, kept);
    return;
  }
  target_.backend().copy_2d(backlog_ + size_t(pending_) * W, W * sizeof(float), rows, W * sizeof(float),
                            W * sizeof(float), kept);
  pending_ += kept;
  if (pending_ == B) flush();
}

void DFlashSource::flush() {
  if (pending_ == 0) return;
  // Always a block's rows computed, so a flush is one CUDA graph whatever the count.
  draft_.ingest_padded(*state_, seq_, backlog_, pending_, draft_.block_size());
  pending_ = 0;
}

void DFlashSource::begin_draft(int n) {
  if (n > draft_.block_size() - 1) fail("asked for {} drafts from a block of {}", n, draft_.block_size());
  flush();
}

void DFlashSource::on_verified_rows(int first_row, int kept) {
  flush();
  // The rows after the block must exist in the feature buffer (one row per batch row).
  const int compute = std::max(kept, std::min(draft_.block_size(), target_.options().max_batch_rows - first_row));
  draft_.ingest_padded(*state_, seq_, target_.features() + size_t(first_row) * size_t(target_.feature_width()), kept,
                       compute);
}

void DFlashSource::propose(int32_t anchor, int n, std::vector<float>& logits) {
  begin_draft(n);
  draft_.draft(*state_, seq_, anchor, logits);  // B - 1 rows; the caller wants the first n
  logits.resize(size_t(n) * size_t(target_.hparams().n_vocab));
}

void DFlashSource::propose_greedy(int32_t anchor, int n, int limit, std::vector<int32_t>& ids) {
  begin_draft(n);
  draft_.draft_greedy(*state_, seq_, anchor, limit, ids);  // B - 1 ids; the caller wants the first n
  ids.resize(size_t(n));
}

void DFlashSource::propose_greedy_to(int32_t anchor, int n, int limit, Backend& be, int32_t* ids) {
  if (&be != &target_.backend()) fail("DFlash drafts go to the target's backend");
  begin_draft(n);
  draft_.draft_greedy_to(*state_, seq_, anchor, limit, ids);  // B - 1 ids; the caller reads the first n
}

void DFlashSource::propose_top(int32_t anchor, int n, int k, int limit, std::vector<int32_t>& ids,
                               std::vector<float>& logits) {
  begin_draft(n);
  draft_.draft_top_k(*state_, seq_, anchor, k, limit, ids, logits);  // B - 1 rows; the caller wants the first n
  ids.resize(size_t(n) * size_t(k));
  logits.resize(ids.size());
}

void DFlashSource::reset() {
  state_->reset(seq_);
  pending_ = 0;
}

}  // namespace df
