// When to speculate: speculation turns itself off while its measured cost per committed token
// exceeds the measured cost of a plain decode step, and re-probes after `reprobe_tokens` plain
// tokens; each probe that fails again doubles that wait (up to 16x), a probe that pays resets it.
// Costs come from the step timings the decoder records, not from constants.
#pragma once

namespace df {

struct SpecOptions {
  bool adaptive = true;     // --draft-adaptive: off when slower than plain decoding
  int reprobe_tokens = 64;  // --draft-reprobe: plain tokens before speculation is tried again
  int max_drafts = 0;       // 0 = block_size - 1; else at most this many drafts per step
};

class SpecPolicy {
 public:
  explicit SpecPolicy(const SpecOptions& opt) : opt_(opt) {}
  void reset();
  // Drafts to verify in the next step (0 = a plain step), before budget and context limits.
  int drafts(int block_size) const;
  // A finished step: its wall time, tokens it committed, drafts it verified (0 for plain).
  void record(double seconds, int committed, int drafted);

 private:
  SpecOptions opt_;
  double plain_cost_ = 0, spec_cost_ = 0;  // moving averages of seconds per committed token
  int plain_samples_ = 0, spec_samples_ = 0, off_tokens_left_ = 0;
  int backoff_ = 1;  // multiplier of reprobe_tokens after consecutive failed probes
};

}  // namespace df
