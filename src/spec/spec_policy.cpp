#include "spec/spec_policy.h"

#include <algorithm>
#include <limits>

#include "spec/warmup.h"

namespace df {

namespace {
constexpr double kEma = 0.25;         // weight of the newest step cost
constexpr int kMinSpecSamples = 4;    // steps measured at the widest width before judging
constexpr int kPlainWarmupSteps = 2;  // plain steps measured first, as the baseline
constexpr int kMaxBackoff = 16;
constexpr int kWidthProbes = 2;       // steps measured at each narrower width before choosing
constexpr int kRefreshEvery = 16;     // speculative steps between re-measurements
constexpr int kProbeSteps = 2;        // speculative steps of a re-probe before it is judged
// Acceptance statistics: the weight (in steps) a new request gives the shared profile, and the
// decay per observation of a request's own counts (a window of ~50: acceptance moves with the
// text) and of the shared profile (~100).
constexpr double kPriorSteps = 8;
// Speculation turns off only when its best expected cost per token exceeds a plain step's by
// this factor: a wrong "off" costs reprobe_tokens plain tokens, a wrong "on" at most this much
// on the steps until the next judgement (every step). On the demo pair's H200 step trace
// (tests/test_spec_policy_trace.cpp) requests opened with a few poorly accepted steps and
// were turned off for 64 tokens where speculation then paid 3x.
constexpr double kOffMargin = 1.2;
constexpr double kOwnDecay = 0.98;
constexpr double kSharedDecay = 0.99;
}  // namespace

void SpecPolicy::reset() {
  off_tokens_left_ = 0;
  backoff_ = 1;
  widest_seen_ = 0;
  probe_steps_ = 0;
  probe_paid_ = false;
  const double w = c_->judged[1] > kPriorSteps ? kPriorSteps / c_->judged[1] : 1.0;
  for (size_t k = 0; k < judged_.size(); ++k) judged_[k] = w * c_->judged[k], accepted_[k] = w * c_->accepted[k];
}

int SpecPolicy::widest(int block_size) const {
  int n = block_size - 1;
  if (opt_.max_drafts > 0) n = std::min(n, opt_.max_drafts);
  return std::clamp(n, 0, kMaxDrafts);
}

std::vector<int> SpecPolicy::widths(int block_size) const { return candidates(widest(block_size)); }

std::vector<int> SpecPolicy::candidates(int n) {
  std::vector<int> w;
  for (int c : {n, (n + 1) / 2, (n + 3) / 4})
    if (c > 0 && (w.empty() || c < w.back())) w.push_back(c);
  return w;
}

double SpecPolicy::expected_tokens(int n) const {
  double e = 1, survive = 1;
  for (int k = 1; k <= std::min(n, kMaxDrafts); ++k) {
    survive *= (accepted_[size_t(k)] + 1) / (judged_[size_t(k)] + 2);  // uniform prior on each rate
    e += survive;
  }
  return e;
}

double SpecPolicy::best_cost_per_token(int widest_n) const {
  double best = std::numeric_limits<double>::infinity();
  for (int c : candidates(widest_n))
    if (c_->step_samples[size_t(c)] > 0) best = std::min(best, c_->step_cost[size_t(c)] / expected_tokens(c));
  return best;
}

// Measure every width first: the widest kMinSpecSamples times, the others kWidthProbes times.
bool SpecPolicy::measured(int widest_n) const {
  for (int c : candidates(widest_n))
    if (c_->step_samples[size_t(c)] < (c == widest_n ? kMinSpecSamples : kWidthProbes)) return false;
  return true;
}

int SpecPolicy::drafts(int block_size) const {
  const int n = widest(block_size);
  if (n <= 0) return 0;
  if (!opt_.adaptive) return n;
  if (c_->plain_samples < kPlainWarmupSteps || off_tokens_left_ > 0) return 0;
  const std::vector<int> cand = candidates(n);
  for (int c : cand)
    if (c_->step_samples[size_t(c)] < (c == n ? kMinSpecSamples : kWidthProbes)) return c;
  // Only widths that could pay at all: a step of c drafts commits at most c + 1 tokens. Where
  // none can (a CPU, whose verify of B rows costs about B plain steps), speculation stays off.
  auto hopeful = [&](int c) { return c_->step_cost[size_t(c)] < c_->plain_cost * (c + 1); };
  // Now and then re-measure the width measured longest ago (costs grow with the context);
  // otherwise the width with the lowest expected cost per token.
  const bool refresh = c_->spec_steps % kRefreshEvery == kRefreshEvery - 1;
  int best = 0;
  double best_key = std::numeric_limits<double>::infinity();
  for (int c : cand) {
    if (!hopeful(c)) continue;
    const double key = refresh ? double(c_->last_step[size_t(c)]) : c_->step_cost[size_t(c)] / expected_tokens(c);
    if (key < best_key) best = c, best_key = key;
  }
  return best;
}

void SpecPolicy::record(double seconds, int committed, int drafted, bool timed) {
  if (drafted <= 0) {
    const double per_token = seconds / std::max(committed, 1);
    if (c_->plain_runs++ >= kWarmupRuns && timed)
      c_->plain_cost = c_->plain_samples++ == 0 ? per_token : (1 - kEma) * c_->plain_cost + kEma * per_token;
    if (off_tokens_left_ > 0 && (off_tokens_left_ -= committed) <= 0) {
      off_tokens_left_ = 0;  // re-probe: the costs are known, the acceptance statistics stay
      widest_seen_ = 0;
      probe_steps_ = 0;
    }
    return;
  }
  const size_t n = size_t(std::min(drafted, kMaxDrafts));
  widest_seen_ = std::max(widest_seen_, int(n));
  ++probe_steps_;
  if (c_->runs[n]++ >= kWarmupRuns && timed)
    c_->step_cost[n] = c_->step_samples[n]++ == 0 ? seconds : (1 - kEma) * c_->step_cost[n] + kEma * seconds;
  c_->last_step[n] = c_->spec_steps++;
  // committed = anchor + accepted drafts: drafts 1..accepted were accepted, the next one (if any)
  // was judged and rejected (or the step stopped there: a stop token, the budget).
  const int acc = std::clamp(committed - 1, 0, int(n));
  // Only the positions this step judged decay: each rate is over its last observations (a
  // position a narrow width never reaches keeps what wider steps saw).
  for (size_t k = 1; k <= size_t(std::min(acc + 1, int(n))); ++k) {
    const double hit = int(k) <= acc ? 1 : 0;
    judged_[k] = kOwnDecay * judged_[k] + 1, accepted_[k] = kOwnDecay * accepted_[k] + hit;
    c_->judged[k] = kSharedDecay * c_->judged[k] + 1, c_->accepted[k] = kSharedDecay * c_->accepted[k] + hit;
  }
  if (!opt_.adaptive) return;
  // Judge only once every width has its samples, and a probe has had its steps.
  // The widths judged: those of the widest one this request or, with shared costs, an earlier
  // one verified (a probe that starts at a narrow width still weighs every width).
  int widest_n = widest_seen_;
  for (int w = kMaxDrafts; w > widest_n; --w)
    if (c_->step_samples[size_t(w)] > 0) {
      widest_n = w;
      break;
    }
  if (!measured(widest_n) || probe_steps_ < kProbeSteps) return;
  if (best_cost_per_token(widest_n) > kOffMargin * c_->plain_cost) {
    off_tokens_left_ = opt_.reprobe_tokens * backoff_;
    backoff_ = std::min(backoff_ * 2, kMaxBackoff);
    probe_paid_ = false;
  } else if (!probe_paid_) {
    backoff_ = 1;  // this probe paid
    probe_paid_ = true;
  }
}

}  // namespace df
