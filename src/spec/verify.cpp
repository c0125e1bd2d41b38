#include "spec/verify.h"

#include <algorithm>
#include <vector>

#include "util/error.h"

namespace df::spec {

int accept_greedy(std::span<const int32_t> drafts, std::span<const int32_t> target_argmax) {
  if (target_argmax.size() < drafts.size()) fail("accept_greedy: {} drafts but {} target rows", drafts.size(), target_argmax.size());
  int a = 0;
  while (size_t(a) < drafts.size() && drafts[size_t(a)] == target_argmax[size_t(a)]) ++a;
  return a;
}

int32_t draw(std::span<const float> dist, std::mt19937_64& rng) {
  double total = 0;
  for (float w : dist) total += w;
  if (!(total > 0)) fail("draw: the distribution has no mass");
  const double u = std::uniform_real_distribution<double>(0.0, total)(rng);
  double cum = 0;
  int32_t last = -1;
  for (size_t i = 0; i < dist.size(); ++i) {
    if (dist[i] <= 0) continue;
    cum += dist[i];
    last = int32_t(i);
    if (u < cum) return last;
  }
  return last;  // u landed on the rounding gap at the end
}

RejectionStep rejection_step(std::span<const float> p, std::span<const float> q, int32_t x, std::mt19937_64& rng) {
  if (p.size() != q.size()) fail("rejection_step: p has {} ids, q {}", p.size(), q.size());
  if (x < 0 || size_t(x) >= p.size()) fail("rejection_step: draft token {} outside the vocabulary", x);
  const double px = p[size_t(x)], qx = q[size_t(x)];
  // u * q(x) < p(x) accepts with probability min(1, p/q); q(x) = 0 (a draft q could not have
  // produced) is accepted iff p(x) > 0, the limit of the same rule.
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  if (u * qx < px) return {true, x};
  std::vector<float> residual(p.size());
  double mass = 0;
  for (size_t i = 0; i < p.size(); ++i) mass += residual[i] = std::max(0.0f, p[i] - q[i]);
  return {false, mass > 0 ? draw(residual, rng) : draw(p, rng)};
}

RejectionStep rejection_step_point(std::span<const float> p, int32_t x, std::mt19937_64& rng) {
  if (x < 0 || size_t(x) >= p.size()) fail("rejection_step_point: draft token {} outside the vocabulary", x);
  double total = 0;
  for (float w : p) total += w;
  const double u = std::uniform_real_distribution<double>(0.0, total)(rng);
  if (u < p[size_t(x)]) return {true, x};
  std::vector<float> rest(p.begin(), p.end());
  rest[size_t(x)] = 0.0f;
  return {false, draw(rest, rng)};  // u >= p(x) > ... leaves mass elsewhere unless p(x) is all of it
}

void choose_drafts(std::span<const float> draft_logits, size_t n_vocab, int n_sampleable, bool greedy,
                   Sampler& draft_sampler, std::mt19937_64& rng, std::vector<int32_t>& drafts,
                   std::vector<std::vector<float>>& qs) {
  qs.clear();
  for (size_t i = 0; i < drafts.size(); ++i) {
    std::span<const float> row = draft_logits.subspan(i * n_vocab, n_vocab);
    if (greedy) {
      drafts[i] = int32_t(std::max_element(row.begin(), row.begin() + n_sampleable) - row.begin());
    } else {
      qs.push_back(draft_sampler.distribution(row));
      drafts[i] = draw(qs.back(), rng);
    }
  }
}

BlockWalk walk_block(std::span<const float> logits, size_t n_vocab, std::span<const int32_t> drafts,
                     const std::vector<std::vector<float>>& qs, bool greedy, Sampler& sampler,
                     std::mt19937_64& rng, const std::function<bool(int32_t)>& on_accept) {
  BlockWalk w;
  for (size_t i = 0; i < drafts.size(); ++i) {
    w.next_row = int(i);
    std::span<const float> row = logits.subspan(i * n_vocab, n_vocab);
    const int32_t d = drafts[i];
    if (greedy) {
      const int32_t t = sampler.sample(row);
      if (t != d) {
        w.next = t;
        return w;
      }
    } else {
      const RejectionStep r = qs.empty() ? rejection_step_point(sampler.distribution(row), d, rng)
                                         : rejection_step(sampler.distribution(row), qs[i], d, rng);
      if (!r.accepted) {
        w.next = r.token;
        return w;
      }
    }
    ++w.kept;
    w.next_row = int(i) + 1;
    if (!on_accept(d)) return w;
  }
  w.next_row = int(drafts.size());  // every draft accepted: the bonus comes from the last row
  return w;
}

BlockWalk walk_block_greedy(std::span<const int32_t> target, std::span<const int32_t> drafts,
                            const std::function<bool(int32_t)>& on_accept) {
  if (target.size() < drafts.size() + 1)
    fail("walk_block_greedy: {} drafts but {} target rows", drafts.size(), target.size());
  BlockWalk w;
  for (size_t i = 0; i < drafts.size(); ++i) {
    w.next_row = int(i);
    if (target[i] != drafts[i]) {
      w.next = target[i];
      return w;
    }
    ++w.kept;
    w.next_row = int(i) + 1;
    if (!on_accept(drafts[i])) return w;
  }
  w.next_row = int(drafts.size());
  w.next = target[drafts.size()];  // every draft accepted: the bonus
  return w;
}

SamplingParams draft_sampling(const SamplingParams& p) {
  SamplingParams q = p;
  q.repeat_penalty = 1.0f;
  q.presence_penalty = 0.0f;
  q.frequency_penalty = 0.0f;
  return q;
}

}  // namespace df::spec
