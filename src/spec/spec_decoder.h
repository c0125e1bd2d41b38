// Single-sequence generation with chain speculation over the Batch API: prefill (features go to
// the draft source), then steps of draft → one verify forward of [anchor, drafts…] → accept →
// commit the kept prefix (rollback by checkpoint copy) → feed the kept rows to the drafter.
// Output equals plain decoding token for token (greedy) or in distribution (sampling).
//
// Policy: speculation turns itself off when its measured cost per committed token exceeds the
// measured cost of a plain decode step, and re-probes after `reprobe_tokens` plain tokens.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "engine/generator.h"
#include "engine/sampler.h"
#include "model/target_model.h"
#include "spec/draft_source.h"

namespace df {

class Tokenizer;

struct SpecOptions {
  bool adaptive = true;      // --draft-adaptive: off when slower than plain decoding
  int reprobe_tokens = 64;   // --draft-reprobe: plain tokens before speculation is tried again
  int max_drafts = 0;        // 0 = block_size - 1; else at most this many drafts per step
};

class SpecDecoder {
 public:
  SpecDecoder(TargetModel& model, DraftSource& drafts, const Tokenizer* tok, int ctx, SpecOptions opt = {});

  GenerateStats generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                         const std::function<bool(int32_t)>& on_token);

 private:
  struct Step;
  int drafts_this_step(int budget) ;
  void update_policy(double seconds, int committed, int drafted);

  TargetModel& model_;
  DraftSource& drafts_;
  const Tokenizer* tok_;
  SpecOptions opt_;
  std::unique_ptr<SequenceStore> state_;
  int seq_ = -1;
  Batch batch_;
  ForwardOutput out_;
  // Policy state: exponential moving averages of seconds per committed token.
  double plain_cost_ = 0, spec_cost_ = 0;
  int spec_samples_ = 0, plain_samples_ = 0, off_tokens_left_ = 0;
};

}  // namespace df
