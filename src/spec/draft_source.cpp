#include "spec/draft_source.h"

#include "model/target_model.h"
#include "util/error.h"

namespace df {

DFlashSource::DFlashSource(DraftModel& draft, TargetModel& target, int ctx)
    : draft_(draft), target_(target), state_(draft.make_state(1, ctx)) {
  seq_ = state_->create();
}

void DFlashSource::on_target_rows(int kept) { draft_.ingest(*state_, seq_, target_.features(), kept); }

void DFlashSource::propose(int32_t anchor, int n, std::vector<float>& logits) {
  if (n > draft_.block_size() - 1) fail("asked for {} drafts from a block of {}", n, draft_.block_size());
  draft_.draft(*state_, seq_, anchor, logits);  // B - 1 rows; the caller wants the first n
  logits.resize(size_t(n) * size_t(target_.hparams().n_vocab));
}

void DFlashSource::reset() { state_->reset(seq_); }

}  // namespace df
