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
}  // namespace

void SpecPolicy::reset() { *this = SpecPolicy(opt_); }

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
    if (step_samples_[size_t(c)] > 0) best = std::min(best, step_cost_[size_t(c)] / expected_tokens(c));
  return best;
}

int SpecPolicy::drafts(int block_size) const {
  const int n = widest(block_size);
  if (n <= 0) return 0;
  if (!opt_.adaptive) return n;
  if (plain_samples_ < kPlainWarmupSteps || off_tokens_left_ > 0) return 0;
  const std::vector<int> cand = candidates(n);
  // Measure every width first: the widest kMinSpecSamples times, the others kWidthProbes times.
  for (int c : cand)
    if (step_samples_[size_t(c)] < (c == n ? kMinSpecSamples : kWidthProbes)) return c;
  // Now and then re-measure the width measured longest ago (costs grow with the context).
  if (spec_steps_ % kRefreshEvery == kRefreshEvery - 1)
    return *std::min_element(cand.begin(), cand.end(),
                             [&](int a, int b) { return last_step_[size_t(a)] < last_step_[size_t(b)]; });
  int best = n;
  double best_cost = std::numeric_limits<double>::infinity();
  for (int c : cand) {
    const double cost = step_cost_[size_t(c)] / expected_tokens(c);
    if (cost < best_cost) best = c, best_cost = cost;
  }
  return best;
}

void SpecPolicy::record(double seconds, int committed, int drafted) {
  if (drafted <= 0) {
    const double per_token = seconds / std::max(committed, 1);
    if (plain_runs_++ >= kWarmupRuns)
      plain_cost_ = plain_samples_++ == 0 ? per_token : (1 - kEma) * plain_cost_ + kEma * per_token;
    if (off_tokens_left_ > 0 && (off_tokens_left_ -= committed) <= 0) {
      off_tokens_left_ = 0;
      step_samples_.fill(0);  // re-probe with fresh step costs (acceptance statistics stay)
      widest_seen_ = 0;
    }
    return;
  }
  const size_t n = size_t(std::min(drafted, kMaxDrafts));
  widest_seen_ = std::max(widest_seen_, int(n));
  if (runs_[n]++ >= kWarmupRuns)
    step_cost_[n] = step_samples_[n]++ == 0 ? seconds : (1 - kEma) * step_cost_[n] + kEma * seconds;
  last_step_[n] = spec_steps_++;
  // committed = anchor + accepted drafts: drafts 1..accepted were accepted, the next one (if any)
  // was judged and rejected (or the step stopped there: a stop token, the budget).
  const int acc = std::clamp(committed - 1, 0, int(n));
  for (int k = 1; k <= std::min(acc + 1, int(n)); ++k) {
    judged_[size_t(k)] += 1;
    if (k <= acc) accepted_[size_t(k)] += 1;
  }
  if (!opt_.adaptive) return;
  // Judge only once every width has its probe samples.
  for (int c : candidates(widest_seen_))
    if (step_samples_[size_t(c)] < (c == widest_seen_ ? kMinSpecSamples : kWidthProbes)) return;
  if (best_cost_per_token(widest_seen_) > plain_cost_) {
    off_tokens_left_ = opt_.reprobe_tokens * backoff_;
    backoff_ = std::min(backoff_ * 2, kMaxBackoff);
    probe_paid_ = false;
  } else if (!probe_paid_) {
    backoff_ = 1;  // this probe paid
    probe_paid_ = true;
  }
}

}  // namespace df
