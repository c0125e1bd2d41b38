// Single-sequence generation with chain speculation over the Batch API: prefill (features go to
// the draft source), then steps of draft → one verify forward of [anchor, drafts…] → accept →
// commit the kept prefix (rollback by replaying the kept rows) → feed the kept rows to the drafter.
// Greedy drafts stay on the device: the verify reads them there, so the host queues the draft
// and the verify back to back and waits once a step, for the drafts and the verify's ids.
// Output equals plain decoding token for token (greedy) or in distribution (sampling).
// When to speculate: SpecPolicy (spec/spec_policy.h).
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "engine/generator.h"
#include "engine/sampler.h"
#include "model/target_model.h"
#include "spec/draft_source.h"
#include "spec/spec_policy.h"

namespace df {

class Tokenizer;

class SpecDecoder {
 public:
  SpecDecoder(TargetModel& model, DraftSource& drafts, const Tokenizer* tok, int ctx, SpecOptions opt = {});
  ~SpecDecoder();
  SpecDecoder(const SpecDecoder&) = delete;
  SpecDecoder& operator=(const SpecDecoder&) = delete;

  GenerateStats generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                         const std::function<bool(int32_t)>& on_token);

 private:
  int drafts_this_step(int budget) const;

  TargetModel& model_;
  DraftSource& drafts_;
  const Tokenizer* tok_;
  SpecPolicy policy_;
  bool argmax_drafts_;  // SpecOptions::argmax_drafts
  std::unique_ptr<SequenceStore> state_;
  int seq_ = -1;
  Batch batch_;
  ForwardOutput out_;
  // Greedy steps' ids on the device (backend memory): the drafter's B-1 proposals, then the
  // verify rows' B argmax ids. The drafts become the verify's tokens there, and one download
  // after the verify brings both to ids_host_.
  int32_t* ids_dev_ = nullptr;
  std::vector<int32_t> ids_host_;
};

}  // namespace df
