// Single-sequence generation with chain speculation over the Batch API: prefill (features go to
// the draft source), then steps of draft → one verify forward of [anchor, drafts…] → accept →
// commit the kept prefix (rollback by checkpoint copy) → feed the kept rows to the drafter.
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
};

}  // namespace df
