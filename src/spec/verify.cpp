#include "spec/verify.h"

#include <algorithm>
#include <cstdint>
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

namespace {

// The walk both walk_block and walk_block_top run: row i judges draft i, by the target's pick
// (greedy) or by judge(i, d) (a rejection step); the first miss ends the block.
template <class Pick, class Judge>
BlockWalk walk_rows(std::span<const int32_t> drafts, bool greedy, Pick pick, Judge judge,
                    const std::function<bool(int32_t)>& on_accept) {
  BlockWalk w;
  for (size_t i = 0; i < drafts.size(); ++i) {
    w.next_row = int(i);
    const int32_t d = drafts[i];
    if (greedy) {
      const int32_t t = pick(i);
      if (t != d) {
        w.next = t;
        return w;
      }
    } else {
      const RejectionStep r = judge(i, d);
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

}  // namespace

BlockWalk walk_block(std::span<const float> logits, size_t n_vocab, std::span<const int32_t> drafts,
                     const std::vector<std::vector<float>>& qs, bool greedy, Sampler& sampler,
                     std::mt19937_64& rng, const std::function<bool(int32_t)>& on_accept) {
  auto row = [&](size_t i) { return logits.subspan(i * n_vocab, n_vocab); };
  return walk_rows(
      drafts, greedy, [&](size_t i) { return sampler.sample(row(i)); },
      [&](size_t i, int32_t d) {
        return qs.empty() ? rejection_step_point(sampler.distribution(row(i)), d, rng)
                          : rejection_step(sampler.distribution(row(i)), qs[i], d, rng);
      },
      on_accept);
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

float SparseDist::at(int32_t id) const {
  const auto it = std::lower_bound(ids.begin(), ids.end(), id);
  return it != ids.end() && *it == id ? w[size_t(it - ids.begin())] : 0.0f;
}

int32_t draw(const SparseDist& dist, std::mt19937_64& rng) {
  double total = 0;
  for (float w : dist.w) total += w;
  if (!(total > 0)) fail("draw: the distribution has no mass");
  const double u = std::uniform_real_distribution<double>(0.0, total)(rng);
  double cum = 0;
  int32_t last = -1;
  for (size_t i = 0; i < dist.ids.size(); ++i) {
    if (dist.w[i] <= 0) continue;
    cum += dist.w[i];
    last = dist.ids[i];
    if (u < cum) return last;
  }
  return last;
}

RejectionStep rejection_step(const SparseDist& p, const SparseDist& q, int32_t x, std::mt19937_64& rng) {
  const double px = p.at(x), qx = q.at(x);
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  if (u * qx < px) return {true, x};
  // max(0, p - q) over the union of the supports, ids ascending (elsewhere both are 0).
  SparseDist residual;
  double mass = 0;
  size_t a = 0, b = 0;
  while (a < p.ids.size() || b < q.ids.size()) {
    const int32_t ia = a < p.ids.size() ? p.ids[a] : INT32_MAX, ib = b < q.ids.size() ? q.ids[b] : INT32_MAX;
    const int32_t id = std::min(ia, ib);
    const float pv = ia == id ? p.w[a++] : 0.0f, qv = ib == id ? q.w[b++] : 0.0f;
    const float r = std::max(0.0f, pv - qv);
    mass += r;
    if (r > 0) residual.ids.push_back(id), residual.w.push_back(r);
  }
  return {false, mass > 0 ? draw(residual, rng) : draw(p, rng)};
}

RejectionStep rejection_step_point(const SparseDist& p, int32_t x, std::mt19937_64& rng) {
  double total = 0;
  for (float w : p.w) total += w;
  const double u = std::uniform_real_distribution<double>(0.0, total)(rng);
  if (u < p.at(x)) return {true, x};
  SparseDist rest = p;
  const auto it = std::lower_bound(rest.ids.begin(), rest.ids.end(), x);
  if (it != rest.ids.end() && *it == x) rest.w[size_t(it - rest.ids.begin())] = 0.0f;
  return {false, draw(rest, rng)};
}

void choose_drafts_top(const TopRows& draft_top, bool greedy, Sampler& draft_sampler, std::mt19937_64& rng,
                       std::vector<int32_t>& drafts, std::vector<SparseDist>& qs) {
  qs.clear();
  for (size_t i = 0; i < drafts.size(); ++i) {
    if (greedy) {
      drafts[i] = draft_top.ids_of(i)[0];  // the largest, lowest id on ties
    } else {
      qs.emplace_back();
      draft_sampler.distribution_top(draft_top.ids_of(i), draft_top.logits_of(i), qs.back().ids, qs.back().w);
      drafts[i] = draw(qs.back(), rng);
    }
  }
}

BlockWalk walk_block_top(const TopRows& target_top, std::span<const int32_t> drafts, const std::vector<SparseDist>& qs,
                         bool greedy, Sampler& sampler, std::mt19937_64& rng,
                         const std::function<bool(int32_t)>& on_accept) {
  SparseDist p;
  return walk_rows(
      drafts, greedy, [&](size_t i) { return sampler.sample_top(target_top.ids_of(i), target_top.logits_of(i)); },
      [&](size_t i, int32_t d) {
        sampler.distribution_top(target_top.ids_of(i), target_top.logits_of(i), p.ids, p.w);
        return qs.empty() ? rejection_step_point(p, d, rng) : rejection_step(p, qs[i], d, rng);
      },
      on_accept);
}

}  // namespace df::spec
