#include "spec/spec_policy.h"

#include <algorithm>

namespace df {

namespace {
constexpr double kEma = 0.25;         // weight of the newest step cost
constexpr int kMinSpecSamples = 4;    // speculative steps measured before it may turn off
constexpr int kPlainWarmupSteps = 2;  // plain steps measured first, as the baseline
constexpr int kMaxBackoff = 16;
}  // namespace

void SpecPolicy::reset() {
  plain_cost_ = spec_cost_ = 0;
  plain_samples_ = spec_samples_ = off_tokens_left_ = 0;
  backoff_ = 1;
}

int SpecPolicy::drafts(int block_size) const {
  int n = block_size - 1;
  if (opt_.max_drafts > 0) n = std::min(n, opt_.max_drafts);
  if (opt_.adaptive && (plain_samples_ < kPlainWarmupSteps || off_tokens_left_ > 0)) return 0;
  return std::max(n, 0);
}

void SpecPolicy::record(double seconds, int committed, int drafted) {
  const double per_token = seconds / std::max(committed, 1);
  if (drafted == 0) {
    plain_cost_ = plain_samples_++ == 0 ? per_token : (1 - kEma) * plain_cost_ + kEma * per_token;
    if (off_tokens_left_ > 0 && (off_tokens_left_ -= committed) <= 0) {
      off_tokens_left_ = 0;
      spec_samples_ = 0;  // re-probe with a fresh estimate
    }
    return;
  }
  spec_cost_ = spec_samples_++ == 0 ? per_token : (1 - kEma) * spec_cost_ + kEma * per_token;
  if (!opt_.adaptive || spec_samples_ < kMinSpecSamples) return;
  if (spec_cost_ > plain_cost_) {
    off_tokens_left_ = opt_.reprobe_tokens * backoff_;
    backoff_ = std::min(backoff_ * 2, kMaxBackoff);
  } else if (spec_samples_ == kMinSpecSamples) {
    backoff_ = 1;  // this probe paid
  }
}

}  // namespace df
