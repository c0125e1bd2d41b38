// Sampler::sample_top from a row's top-K candidates (Backend::top_k_rows on the CPU) against
// Sampler::sample from the full row: the same token, draw after draw, from two samplers with
// the same seed, for top_k 1 / 20 / 40 / 256, K from top_k up to 256, top-p, min-p and
// temperature varied, logits full of ties, a vocabulary with padding ids. One of the two
// samplers alternates between the paths, so a path consuming random numbers differently
// would show up as diverging draws.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/sampler.h"
#include "util/error.h"

namespace df {
namespace {

// Logits on a coarse grid (many exact ties), some rows nearly flat (the filters keep many).
std::vector<float> tied_logits(int n, std::mt19937& rng, bool flat) {
  std::normal_distribution<float> g(0.0f, flat ? 0.3f : 2.5f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = std::round(g(rng) * 8.0f) / 8.0f;
  return v;
}

struct Case {
  float temperature, top_p, min_p;
};

TEST(SamplerTop, SameTokensAsTheFullRow) {
  auto be = make_cpu_backend(2);
  const int n_vocab = 3001, n_sampleable = 2990;  // ids >= 2990: padding with huge logits
  const Case cases[] = {{0.8f, 0.95f, 0.05f}, {1.0f, 1.0f, 0.0f}, {0.3f, 0.5f, 0.0f},
                        {1.5f, 1.0f, 0.2f},   {0.8f, 0.99f, 0.0f}, {2.0f, 0.9f, 0.01f}};
  int checked = 0, distinct_tokens = 0;
  for (int top_k : {1, 20, 40, 256}) {
    for (const Case& c : cases) {
      for (uint64_t seed = 1; seed <= 6; ++seed) {
        SamplingParams p;
        p.temperature = c.temperature;
        p.top_k = top_k;
        p.top_p = c.top_p;
        p.min_p = c.min_p;
        p.seed = seed * 7919 + uint64_t(top_k);
        Sampler full(p, n_sampleable), top(p, n_sampleable);
        std::mt19937 rng(uint32_t(seed * 31 + uint64_t(top_k)));
        const int K = std::min(kMaxDeviceTopK, top_k + int(seed % 3) * 50);  // K >= top_k, sometimes more
        ASSERT_TRUE(top.can_sample_from_top(K));
        std::vector<int32_t> ids(static_cast<size_t>(K));
        std::vector<float> vals(static_cast<size_t>(K));
        int32_t last = -1;
        for (int draw = 0; draw < 40; ++draw) {
          std::vector<float> row = tied_logits(n_vocab, rng, draw % 4 == 1);
          for (int i = n_sampleable; i < n_vocab; ++i) row[size_t(i)] = 1e6f;
          be->top_k_rows(row.data(), 1, n_sampleable, size_t(n_vocab), K, ids.data(), vals.data());
          const int32_t want = full.sample(row);
          const int32_t got = draw % 3 == 2 ? top.sample(row) : top.sample_top(ids, vals);
          ASSERT_EQ(got, want) << "top_k " << top_k << ", K " << K << ", T " << c.temperature << ", top_p "
                               << c.top_p << ", min_p " << c.min_p << ", seed " << seed << ", draw " << draw;
          distinct_tokens += got != last;
          last = got;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 4 * 6 * 6 * 40);
  EXPECT_GT(distinct_tokens, checked / 4) << "the draws hardly vary: the comparison proves little";
}

// Greedy: the first candidate, sample()'s argmax (ties to the lowest id).
TEST(SamplerTop, GreedyTakesTheFirstCandidate) {
  auto be = make_cpu_backend(1);
  SamplingParams p;
  p.temperature = 0;
  p.top_k = 0;
  Sampler s(p, 500);
  EXPECT_TRUE(s.can_sample_from_top(1));
  std::mt19937 rng(5);
  for (int t = 0; t < 20; ++t) {
    std::vector<float> row = tied_logits(500, rng, false);
    int32_t id;
    float v;
    be->top_k_rows(row.data(), 1, 500, 500, 1, &id, &v);
    EXPECT_EQ(s.sample_top(std::span<const int32_t>(&id, 1), std::span<const float>(&v, 1)), s.sample(row));
  }
}

TEST(SamplerTop, WhenTheTopIsNotEnough) {
  SamplingParams p;  // defaults: T 0.8, top_k 40, no penalties
  EXPECT_TRUE(Sampler(p, 1000).can_sample_from_top(40));
  EXPECT_FALSE(Sampler(p, 1000).can_sample_from_top(39));
  EXPECT_TRUE(Sampler(p, 30).can_sample_from_top(30));  // top_k past the vocabulary: all of it
  SamplingParams q = p;
  q.top_k = 0;  // every id can be drawn
  EXPECT_FALSE(Sampler(q, 1000).can_sample_from_top(kMaxDeviceTopK));
  q = p;
  q.repeat_penalty = 1.1f;
  EXPECT_FALSE(Sampler(q, 1000).can_sample_from_top(kMaxDeviceTopK));
  q = p;
  q.presence_penalty = 0.5f;
  EXPECT_FALSE(Sampler(q, 1000).can_sample_from_top(kMaxDeviceTopK));
  q = p;
  q.frequency_penalty = 0.5f;
  EXPECT_FALSE(Sampler(q, 1000).can_sample_from_top(kMaxDeviceTopK));
  q = p;
  q.logit_bias[3] = 1.0f;
  EXPECT_FALSE(Sampler(q, 1000).can_sample_from_top(kMaxDeviceTopK));
  // Too few candidates for top_k is an error, not a quiet change of distribution.
  Sampler s(p, 1000);
  std::vector<int32_t> ids(39, 0);
  std::vector<float> vals(39, 0.0f);
  for (int i = 0; i < 39; ++i) ids[size_t(i)] = i;
  EXPECT_THROW(s.sample_top(ids, vals), Error);
}

// top_candidates: how many top candidates the next draw needs (what a step downloads).
TEST(SamplerTop, TopCandidatesNeeded) {
  SamplingParams p;  // T 0.8, top_k 40
  EXPECT_EQ(Sampler(p, 1000).top_candidates(kMaxDeviceTopK), 40);
  EXPECT_EQ(Sampler(p, 30).top_candidates(kMaxDeviceTopK), 30);  // top_k past the vocabulary
  EXPECT_EQ(Sampler(p, 1000).top_candidates(39), 0);             // more than max_k
  SamplingParams g = p;
  g.temperature = 0;
  EXPECT_EQ(Sampler(g, 1000).top_candidates(kMaxDeviceTopK), 1);
  SamplingParams q = p;
  q.top_k = 0;
  EXPECT_EQ(Sampler(q, 1000).top_candidates(kMaxDeviceTopK), 0);
  q = p;
  q.repeat_penalty = 1.1f;
  EXPECT_EQ(Sampler(q, 1000).top_candidates(kMaxDeviceTopK), 0);
  q = p;
  q.top_k = 300;
  EXPECT_EQ(Sampler(q, 1000).top_candidates(kMaxDeviceTopK), 0);
}

}  // namespace
}  // namespace df
