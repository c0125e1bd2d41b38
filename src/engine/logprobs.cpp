#include "engine/logprobs.h"

#include <algorithm>
#include <cmath>

namespace df {

TokenLogprobs compute_logprobs(std::span<const float> logits, int n_sampleable, int32_t chosen, int top_n) {
  const int n = std::min<int>(n_sampleable, int(logits.size()));
  TokenLogprobs r;
  if (n <= 0) return r;
  float max_l = logits[0];
  for (int i = 1; i < n; ++i) max_l = std::max(max_l, logits[size_t(i)]);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(double(logits[size_t(i)]) - max_l);
  const double log_z = double(max_l) + std::log(sum);
  auto lp = [&](int32_t id) { return float(double(logits[size_t(id)]) - log_z); };
  r.logprob = chosen >= 0 && chosen < n ? lp(chosen) : -INFINITY;
  top_n = std::clamp(top_n, 0, n);
  if (top_n == 0) return r;
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[size_t(i)] = i;
  auto better = [&](int32_t a, int32_t b) {
    return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
  };
  std::partial_sort(ids.begin(), ids.begin() + top_n, ids.end(), better);
  r.top.reserve(size_t(top_n));
  for (int i = 0; i < top_n; ++i) r.top.push_back({ids[size_t(i)], lp(ids[size_t(i)])});
  return r;
}

}  // namespace df
