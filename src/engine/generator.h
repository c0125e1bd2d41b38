// Single-sequence generation over the Batch API: chunked prefill, then one decode row per
// step, sampling, stop conditions and timing. The continuous-batching scheduler will drive the
// same model API with many sequences; this is its one-sequence case.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "model/target_model.h"

namespace df {

class Tokenizer;

struct GenerateOptions {
  int max_new_tokens = 128;
  int prefill_chunk = 512;    // rows per prefill forward (<= the model's max_batch_rows)
  bool stop_at_eog = true;    // stop on end-of-generation tokens
  // Sampling that reads only the top top_k logits downloads those (Engine's option of the name).
  bool device_top_k = true;
  SamplingParams sampling;
};

struct GenerateStats {
  int prompt_tokens = 0;
  int generated_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;  // from the first generated token's sampling to the last one
  std::string finish_reason;  // "stop" (eog), "length", "callback"
  // Speculative decoding (zero for plain generation).
  int draft_steps = 0;      // verify forwards that carried drafts
  int plain_steps = 0;      // one-row forwards while speculation was off (policy) or out of room
  int drafted_tokens = 0;   // drafts verified
  int accepted_tokens = 0;  // drafts kept
  // Every decode step in order (SpecDecoder): drafts verified (0: plain), tokens committed (the
  // anchor plus the drafts accepted), wall milliseconds with host work (draft, verify, commit):
  // what the speculation policy saw (run --stats-json prints it as "steps").
  struct Step {
    int drafts, committed;
    float ms;
  };
  std::vector<Step> steps;
  // Wall seconds of the steps that carried drafts (drafted) or of the plain ones.
  double step_seconds(bool drafted) const {
    double s = 0;
    for (const Step& x : steps)
      if ((x.drafts > 0) == drafted) s += x.ms * 1e-3;
    return s;
  }
  // tau: tokens committed per draft step, counting the target's own (bonus) token.
  double mean_accept_len() const { return draft_steps ? double(accepted_tokens + draft_steps) / draft_steps : 0; }
  double prefill_tok_s() const { return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0; }
  double decode_tok_s() const {
    return decode_seconds > 0 && generated_tokens > 1 ? (generated_tokens - 1) / decode_seconds : 0;
  }
};

class Generator {
 public:
  Generator(TargetModel& model, const Tokenizer* tok, int ctx);

  // on_token(id) is called for each generated token (including a final eog token);
  // returning false stops generation.
  GenerateStats generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                         const std::function<bool(int32_t)>& on_token);

  // Prefills the prompt and returns the logits of its last row (used by tests and bench).
  void prefill(const std::vector<int32_t>& prompt, int chunk, std::vector<float>& last_logits);
  // Feeds one token at the next position and returns its logits.
  void decode(int32_t token, std::vector<float>& logits);
  // The same step, greedy: the argmax id among ids < limit, computed on the backend.
  int32_t decode_greedy(int32_t token, int limit);
  // The same step returning the k largest logits among ids < limit and their ids, sorted
  // (ForwardOutput::top_k_only).
  void decode_top_k(int32_t token, int k, int limit, std::vector<int32_t>& ids, std::vector<float>& logits);
  void reset();

 private:
  TargetModel& model_;
  const Tokenizer* tok_;
  std::unique_ptr<SequenceStore> state_;
  int seq_ = -1;
  Batch batch_;
  ForwardOutput out_;
};

}  // namespace df
