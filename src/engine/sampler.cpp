#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"

namespace df {

Sampler::Sampler(const SamplingParams& p, int n_sampleable) : p_(p), n_sampleable_(n_sampleable), rng_(p.seed) {
  if (n_sampleable <= 0) fail("sampler: empty vocabulary");
}

void Sampler::accept(int32_t token) {
  if (p_.penalty_last_n <= 0) return;
  recent_.push_back(token);
  while (int(recent_.size()) > p_.penalty_last_n) recent_.pop_front();
}

void Sampler::prepare(std::span<const float> logits) {
  const int n = std::min<int>(n_sampleable_, int(logits.size()));
  cand_.resize(size_t(n));
  for (int i = 0; i < n; ++i) cand_[size_t(i)] = {i, logits[size_t(i)]};
  for (const auto& [id, bias] : p_.logit_bias)
    if (id >= 0 && id < n) cand_[size_t(id)].logit += bias;
  const bool penalties = p_.repeat_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f;
  if (penalties && !recent_.empty()) {
    // Count occurrences by sorting a reused copy of the window (no allocation per token).
    window_.assign(recent_.begin(), recent_.end());
    std::sort(window_.begin(), window_.end());
    for (size_t i = 0; i < window_.size();) {
      size_t j = i;
      while (j < window_.size() && window_[j] == window_[i]) ++j;
      const int32_t id = window_[i];
      const int count = int(j - i);
      i = j;
      if (id < 0 || id >= n) continue;
      float& l = cand_[size_t(id)].logit;
      l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
      l -= float(count) * p_.frequency_penalty + p_.presence_penalty;
    }
  }
  if (p_.temperature <= 0) return;
  auto by_logit = [](const Cand& a, const Cand& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); };
  if (p_.top_k > 0 && p_.top_k < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
    cand_.resize(size_t(p_.top_k));
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  filter();
}

bool Sampler::can_sample_from_top(int k) const {
  const bool reads_others = p_.repeat_penalty != 1.0f || p_.presence_penalty != 0.0f ||
                            p_.frequency_penalty != 0.0f || !p_.logit_bias.empty();
  if (reads_others || k < 1) return false;
  return p_.temperature <= 0 || (p_.top_k > 0 && std::min(p_.top_k, n_sampleable_) <= k);
}

void Sampler::prepare_top(std::span<const int32_t> ids, std::span<const float> logits) {
  if (ids.empty() || ids.size() != logits.size()) fail("sampler: {} top ids for {} logits", ids.size(), logits.size());
  // prepare() keeps min(top_k, n) candidates sorted the same way (top_k off: all n).
  const size_t keep = p_.top_k > 0 ? size_t(std::min(p_.top_k, n_sampleable_)) : size_t(n_sampleable_);
  if (ids.size() < keep) fail("sampler: {} top candidates, top_k needs {}", ids.size(), keep);
  cand_.resize(keep);
  for (size_t i = 0; i < keep; ++i) {
    if (ids[i] < 0 || ids[i] >= n_sampleable_) fail("sampler: top candidate id {} is not sampleable", ids[i]);
    cand_[i] = {ids[i], logits[i]};
  }
  filter();
}

int Sampler::top_candidates(int max_k) const {
  if (!can_sample_from_top(max_k)) return 0;
  return p_.temperature <= 0 ? 1 : std::min(p_.top_k, n_sampleable_);
}

int32_t Sampler::sample_top(std::span<const int32_t> ids, std::span<const float> logits) {
  if (p_.temperature <= 0) {  // the largest, lowest id on ties: sample()'s greedy pick
    if (ids.empty()) fail("sampler: no top candidates");
    return ids[0];
  }
  prepare_top(ids, logits);
  return draw();
}

void Sampler::distribution_top(std::span<const int32_t> ids, std::span<const float> logits,
                               std::vector<int32_t>& out_ids, std::vector<float>& out_probs) {
  out_ids.clear();
  out_probs.clear();
  if (p_.temperature <= 0) {
    if (ids.empty()) fail("sampler: no top candidates");
    out_ids.push_back(ids[0]);
    out_probs.push_back(1.0f);
    return;
  }
  prepare_top(ids, logits);
  // distribution()'s arithmetic, in its order (the sum over cand_ as sorted by logit).
  const float max_l = cand_.front().logit;
  double sum = 0;
  for (const Cand& c : cand_) sum += std::exp(double(c.logit - max_l) / p_.temperature);
  std::sort(cand_.begin(), cand_.end(), [](const Cand& a, const Cand& b) { return a.id < b.id; });
  for (const Cand& c : cand_) {
    out_ids.push_back(c.id);
    out_probs.push_back(float(std::exp(double(c.logit - max_l) / p_.temperature) / sum));
  }
}

void Sampler::filter() {
  // Probabilities at temperature 1 decide top-p / min-p (llama.cpp's order: filters, then temperature).
  const float max_l = cand_.front().logit;
  probs_.resize(cand_.size());
  double sum = 0;
  for (size_t i = 0; i < cand_.size(); ++i) sum += probs_[i] = std::exp(cand_[i].logit - max_l);
  size_t keep = cand_.size();
  if (p_.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < cand_.size(); ++i) {
      cum += probs_[i] / sum;
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (p_.min_p > 0.0f) {
    const float floor = p_.min_p * probs_[0];  // probs_[0] is the max (relative to it)
    size_t k = 1;
    while (k < keep && probs_[k] >= floor) ++k;
    keep = k;
  }
  cand_.resize(keep);
}

std::vector<float> Sampler::distribution(std::span<const float> logits) {
  prepare(logits);
  std::vector<float> dist(logits.size(), 0.0f);
  if (p_.temperature <= 0) {
    const auto best = std::max_element(cand_.begin(), cand_.end(), [](const Cand& a, const Cand& b) {
      return a.logit < b.logit || (a.logit == b.logit && a.id > b.id);
    });
    dist[size_t(best->id)] = 1.0f;
    return dist;
  }
  const float max_l = cand_.front().logit;
  double sum = 0;
  for (const Cand& c : cand_) sum += std::exp(double(c.logit - max_l) / p_.temperature);
  for (const Cand& c : cand_) dist[size_t(c.id)] = float(std::exp(double(c.logit - max_l) / p_.temperature) / sum);
  return dist;
}

int32_t Sampler::sample(std::span<const float> logits) {
  prepare(logits);
  if (p_.temperature <= 0) {
    const auto best = std::max_element(cand_.begin(), cand_.end(), [](const Cand& a, const Cand& b) {
      return a.logit < b.logit || (a.logit == b.logit && a.id > b.id);
    });
    return best->id;
  }
  return draw();
}

int32_t Sampler::draw() {
  const float max_l = cand_.front().logit;
  probs_.resize(cand_.size());
  double sum = 0;
  for (size_t i = 0; i < cand_.size(); ++i) sum += probs_[i] = float(std::exp(double(cand_[i].logit - max_l) / p_.temperature));
  // Draw with a 53-bit uniform so the result depends only on the seed, not the library's
  // distribution implementation.
  const double u = double(rng_() >> 11) * (1.0 / 9007199254740992.0) * sum;
  double cum = 0;
  for (size_t i = 0; i < cand_.size(); ++i) {
    cum += probs_[i];
    if (u < cum) return cand_[i].id;
  }
  return cand_.back().id;
}

}  // namespace df
