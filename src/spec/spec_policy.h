// When and how wide to speculate, from measured step times (never from constants):
// - off: speculation turns itself off while its best expected cost per committed token exceeds
//   the measured cost of a plain decode step, and re-probes after `reprobe_tokens` plain
//   tokens; each probe that fails again doubles that wait (up to 16x), a probe that pays resets it;
// - width: among n, n/2 and n/4 drafts per step (n = the block's drafts, or --draft-max), it
//   verifies the width with the lowest expected cost per committed token: the measured step
//   time at that width over 1 + sum_k P(the first k drafts are accepted), with P from the
//   acceptances seen so far. Narrower blocks win where wide verify steps cost more than their
//   extra acceptances bring (long contexts, weak drafts). Every width is measured first and
//   re-measured every 16 speculative steps, as step costs change with the context length.
#pragma once
#include <array>
#include <vector>

namespace df {

struct SpecOptions {
  bool adaptive = true;     // --draft-adaptive: off when slower than plain decoding, width by cost
  int reprobe_tokens = 64;  // --draft-reprobe: plain tokens before speculation is tried again
  int max_drafts = 0;       // 0 = block_size - 1; else at most this many drafts per step
  // --draft-argmax: sampled requests take the drafter's argmax as their drafts (computed on the
  // device, no drafter logits downloaded), verified with the point-proposal rule, instead of
  // drawing them from the drafter's distribution. Both keep the output distribution exact; on
  // the demo pair the draws accept more (docs/performance.md), so they are the default.
  bool argmax_drafts = false;
};

class SpecPolicy {
 public:
  static constexpr int kMaxDrafts = 64;

  explicit SpecPolicy(const SpecOptions& opt) : opt_(opt) {}
  void reset();
  // Drafts to verify in the next step (0 = a plain step), before budget and context limits.
  int drafts(int block_size) const;
  // A finished step: its wall time, tokens it committed (the anchor plus the accepted drafts),
  // drafts it verified (0 for plain).
  void record(double seconds, int committed, int drafted);

  // The widths drafts() chooses among for a block (widest first).
  std::vector<int> widths(int block_size) const;
  // Expected tokens committed by a step verifying n drafts, from the acceptances seen so far.
  double expected_tokens(int n) const;

 private:
  int widest(int block_size) const;
  static std::vector<int> candidates(int widest_n);  // n, n/2, n/4 (distinct, positive)
  double best_cost_per_token(int widest) const;  // over the measured widths

  SpecOptions opt_;
  double plain_cost_ = 0;  // moving average of seconds per committed token of plain steps
  int plain_samples_ = 0, off_tokens_left_ = 0;
  int plain_runs_ = 0;  // plain steps seen, warm-up runs included (spec/warmup.h)
  int backoff_ = 1;  // multiplier of reprobe_tokens after consecutive failed probes
  int widest_seen_ = 0;  // the widest width verified since the last probe began
  bool probe_paid_ = false;
  // Per width n (drafts per step): moving average of the step's seconds, samples, last step.
  std::array<double, kMaxDrafts + 1> step_cost_{};
  std::array<int, kMaxDrafts + 1> step_samples_{};
  std::array<int, kMaxDrafts + 1> runs_{};  // steps seen per width, warm-up runs included
  std::array<long, kMaxDrafts + 1> last_step_{};
  long spec_steps_ = 0;
  // Per draft position k (1-based): steps that judged the k-th draft, and accepted it.
  std::array<double, kMaxDrafts + 1> judged_{}, accepted_{};
};

}  // namespace df
