// When and how wide to speculate, from measured step times (never from constants):
// - off: speculation turns itself off while its best expected cost per committed token exceeds
//   the measured cost of a plain decode step by 20% (a wrong "off" costs more than a wrong
//   "on"), and re-probes after `reprobe_tokens` plain tokens; each probe that fails again
//   doubles that wait (up to 16x), a probe that pays resets it;
// - width: among n, n/2 and n/4 drafts per step (n = the block's drafts, or --draft-max), it
//   verifies the width with the lowest expected cost per committed token: the measured step
//   time at that width over 1 + sum_k P(the first k drafts are accepted), with P from the
//   acceptances seen so far (a new request starts from the drafter's recent profile). Narrower blocks win where wide verify steps cost more than their
//   extra acceptances bring (long contexts, weak drafts). Every width is measured first and
//   re-measured every 16 speculative steps, as step costs change with the context length.
#pragma once
#include <array>
#include <memory>
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

// The measured side of the policy: step costs, a property of the model, the device and the
// batch rather than of a request, so the requests of one decoder share them (a new request
// then speculates from its first tokens instead of re-measuring every width, and the CUDA
// graph warm-up runs, which happen once per process, are skipped once).
struct SpecCosts {
  static constexpr int kMaxDrafts = 64;
  double plain_cost = 0;  // moving average of seconds per committed token of plain steps
  int plain_samples = 0;
  int plain_runs = 0;  // plain steps seen, warm-up runs included (spec/warmup.h)
  // Per width n (drafts per step): moving average of the step's seconds, samples, last step.
  std::array<double, kMaxDrafts + 1> step_cost{};
  std::array<int, kMaxDrafts + 1> step_samples{};
  std::array<int, kMaxDrafts + 1> runs{};  // steps seen per width, warm-up runs included
  std::array<long, kMaxDrafts + 1> last_step{};
  long spec_steps = 0;
  // The drafter's recent acceptance profile over every request: per draft position k, steps
  // that judged the k-th draft and accepted it, decayed per step. A new request starts from it
  // (weighted as a few steps) instead of a uniform prior, whose product over positions expects
  // ~2 tokens from 15 drafts and turned speculation off in the first steps of requests where
  // it pays (docs/performance.md, session 8).
  std::array<double, kMaxDrafts + 1> judged{}, accepted{};
};

class SpecPolicy {
 public:
  static constexpr int kMaxDrafts = SpecCosts::kMaxDrafts;

  // With its own costs (kept across reset()), or with costs shared by several policies.
  explicit SpecPolicy(const SpecOptions& opt) : opt_(opt), own_(std::make_unique<SpecCosts>()), c_(own_.get()) {}
  SpecPolicy(const SpecOptions& opt, SpecCosts& shared) : opt_(opt), c_(&shared) {}
  SpecPolicy(SpecPolicy&&) = default;
  SpecPolicy& operator=(SpecPolicy&&) = default;

  // A new request: forgets the off/backoff state and the last request's own acceptances
  // (starting again from the shared profile); the step costs stay.
  void reset();
  // Drafts to verify in the next step (0 = a plain step), before budget and context limits.
  int drafts(int block_size) const;
  // A finished step: its wall time, tokens it committed (the anchor plus the accepted drafts),
  // drafts it verified (0 for plain). timed = false: the step's time is not its kind's (it
  // captured a CUDA graph or ran op by op, spec/warmup.h), so only its acceptances count.
  void record(double seconds, int committed, int drafted, bool timed = true);

  // The widths drafts() chooses among for a block (widest first).
  std::vector<int> widths(int block_size) const;
  // Expected tokens committed by a step verifying n drafts, from the acceptances seen so far.
  double expected_tokens(int n) const;

 private:
  int widest(int block_size) const;
  static std::vector<int> candidates(int widest_n);  // n, n/2, n/4 (distinct, positive)
  double best_cost_per_token(int widest) const;  // over the measured widths
  bool measured(int widest) const;  // every width has its samples

  SpecOptions opt_;
  std::unique_ptr<SpecCosts> own_;
  SpecCosts* c_;
  // The request's own state.
  int off_tokens_left_ = 0;
  int backoff_ = 1;  // multiplier of reprobe_tokens after consecutive failed probes
  int widest_seen_ = 0;  // the widest width verified since the last probe began
  int probe_steps_ = 0;  // speculative steps since the last probe began
  bool probe_paid_ = false;
  // Per draft position k (1-based): steps that judged the k-th draft, and accepted it (the
  // shared profile's share, then this request's steps, decayed per step).
  std::array<double, kMaxDrafts + 1> judged_{}, accepted_{};
};

}  // namespace df
