// SpecPolicy against synthetic step costs and acceptances: the plain warm-up, measuring every
// width, choosing the width with the lowest cost per committed token (checked against a brute-
// force optimum computed here from the true acceptance rate and cost model), switching off when
// speculation costs more per token than plain steps, and re-probing with a doubling wait.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/forwarding_backend.h"
#include "spec/spec_policy.h"
#include "spec/warmup.h"

namespace df {
namespace {

// Runs a decoder loop against the policy: plain steps cost `plain` seconds; a step verifying n
// drafts costs fixed + per_draft * n seconds and accepts each draft with probability r (the
// first rejection ends the walk). Returns how often each width was chosen in the last steps.
struct Sim {
  double plain = 1.0, fixed = 1.0, per_draft = 0.0, r = 0.8;
  std::mt19937_64 rng{7};
  std::vector<int> run(SpecPolicy& p, int block, int steps, int tail) {
    std::vector<int> chosen(size_t(block), 0);
    for (int s = 0; s < steps; ++s) {
      const int n = p.drafts(block);
      if (n == 0) {
        p.record(plain, 1, 0);
      } else {
        int acc = 0;
        while (acc < n && std::uniform_real_distribution<double>(0, 1)(rng) < r) ++acc;
        p.record(fixed + per_draft * n, 1 + acc, n);
      }
      if (s >= steps - tail) chosen[size_t(n)]++;
    }
    return chosen;
  }
};

// The width (among the policy's candidates) with the lowest true cost per committed token, or 0
// when a plain step costs less per token than every width.
int true_best(const SpecPolicy& p, int block, const Sim& sim) {
  int best = 0;
  double best_cost = sim.plain;
  for (int n : p.widths(block)) {
    double e = 0;
    for (int k = 0; k <= n; ++k) e += std::pow(sim.r, k);  // 1 + r + ... + r^n
    const double cost = (sim.fixed + sim.per_draft * n) / e;
    if (cost < best_cost) best = n, best_cost = cost;
  }
  return best;
}

TEST(SpecPolicy, NotAdaptiveAlwaysDraftsTheWholeBlock) {
  SpecPolicy p(SpecOptions{false, 64, 0});
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(p.drafts(16), 15);
    p.record(100.0, 1, 15);  // however slow
  }
  EXPECT_EQ(SpecPolicy(SpecOptions{false, 64, 6}).drafts(16), 6);  // --draft-max caps it
}

TEST(SpecPolicy, WidthsAreNHalfAndQuarter) {
  SpecPolicy p(SpecOptions{});
  EXPECT_EQ(p.widths(16), (std::vector<int>{15, 8, 4}));
  EXPECT_EQ(p.widths(8), (std::vector<int>{7, 4, 2}));
  EXPECT_EQ(p.widths(3), (std::vector<int>{2, 1}));
  EXPECT_EQ(p.widths(2), (std::vector<int>{1}));
}

// Each step kind's first two runs (CUDA graphs: op by op, then the capture) are not samples:
// 2 + 2 plain steps, then the widest width 2 + 4 times, the others 2 + 2.
TEST(SpecPolicy, WarmsUpPlainThenMeasuresEveryWidth) {
  SpecPolicy p(SpecOptions{});
  std::vector<int> seq;
  for (int i = 0; i < 18; ++i) {
    const int n = p.drafts(16);
    seq.push_back(n);
    p.record(n == 0 ? 1.0 : 1.1, n == 0 ? 1 : 4, n);  // speculation pays: 1.1 s for 4 tokens
  }
  EXPECT_EQ(seq, (std::vector<int>{0, 0, 0, 0, 15, 15, 15, 15, 15, 15, 8, 8, 8, 8, 4, 4, 4, 4}));
}

// Warm-up runs far slower than the rest (a graph's first sight and capture) must not become the
// baseline: plain steps that cost 10 s twice, then 1 s; speculation at 1.5 s a token is slower
// and is turned off (with the warm-up counted it would look 3x cheaper than plain).
TEST(SpecPolicy, SlowWarmupRunsAreNotTheBaseline) {
  SpecPolicy p(SpecOptions{true, 1000, 0});
  int plain_runs = 0, off_after = -1;
  for (int i = 0; i < 40 && off_after < 0; ++i) {
    const int n = p.drafts(8);
    if (n == 0) {
      p.record(plain_runs++ < 2 ? 10.0 : 1.0, 1, 0);
      if (plain_runs > 4) off_after = i;  // plain again after the probes: turned off
    } else {
      p.record(3.0, 2, n);  // 2 tokens for 3 s, every width
    }
  }
  EXPECT_GT(off_after, 0) << "speculation slower than plain decoding was never turned off";
}

// Steps whose time is not their kind's (a CUDA graph capture, an op-by-op run: timed = false)
// do not move the measured costs: speculation that pays (8 tokens for 3 s against 1 s a plain
// token) stays on through 100 s outliers every fifth speculative step. Counted as timed, the
// same outliers turn it off: the flag is what keeps it on.
TEST(SpecPolicy, UntimedStepsDoNotMoveTheCosts) {
  for (const bool flag_outliers : {true, false}) {
    SCOPED_TRACE(flag_outliers ? "outliers untimed" : "outliers timed");
    SpecCosts costs;
    SpecPolicy p(SpecOptions{true, 1000, 0}, costs);
    int plain_after_probe = 0, spec_steps = 0;
    for (int i = 0; i < 200; ++i) {
      const int n = p.drafts(8);
      if (n == 0) {
        p.record(1.0, 1, 0);
        if (spec_steps > 0) ++plain_after_probe;
        continue;
      }
      const bool outlier = ++spec_steps % 5 == 0;
      p.record(outlier ? 100.0 : 3.0, std::min(n + 1, 8), n, !(outlier && flag_outliers));
    }
    if (flag_outliers) {
      EXPECT_EQ(plain_after_probe, 0) << "turned off by steps it should not have timed";
      for (int n : p.widths(8)) EXPECT_NEAR(costs.step_cost[size_t(n)], 3.0, 1e-9) << "width " << n;
    } else {
      EXPECT_GT(plain_after_probe, 0);
    }
  }
}

// StepTimer: representative while the backend only replays (or does not replay at all).
TEST(StepTimer, ACaptureOrAnOpByOpRunMakesTheStepUntimed) {
  struct Counting final : ForwardingBackend {
    using ForwardingBackend::ForwardingBackend;
    StepReplayCounts counts;
    StepReplayCounts step_replay_counts() const override { return counts; }
  };
  auto cpu = make_cpu_backend(1);
  Counting be(*cpu);
  StepTimer t(be);
  EXPECT_TRUE(t.representative());
  be.counts.replayed += 3;
  EXPECT_TRUE(t.representative());
  be.counts.captured += 1;
  EXPECT_FALSE(t.representative());
  t.restart();
  EXPECT_TRUE(t.representative());
  be.counts.direct += 1;
  EXPECT_FALSE(t.representative());
  EXPECT_TRUE(StepTimer(*cpu).representative());
}

TEST(SpecPolicy, ChoosesTheWidthWithTheLowestCostPerToken) {
  struct Case {
    double per_draft, r;
  };
  // Flat costs and good drafts: the whole block. Steep costs or weak drafts: narrower, or off.
  for (const Case c : {Case{0.0, 0.9}, Case{0.02, 0.9}, Case{0.15, 0.6}, Case{0.3, 0.5}, Case{0.05, 0.75}}) {
    SCOPED_TRACE("per_draft " + std::to_string(c.per_draft) + " r " + std::to_string(c.r));
    SpecPolicy p(SpecOptions{true, 64, 0});
    Sim sim;
    sim.plain = 1.0, sim.fixed = 1.0, sim.per_draft = c.per_draft, sim.r = c.r;
    const std::vector<int> chosen = sim.run(p, 16, 3000, 500);
    const int want = true_best(p, 16, sim);
    // Most of the last 500 steps use the optimum (the rest are periodic re-measurements).
    EXPECT_GE(chosen[size_t(want)], 400) << "optimum " << want << ": chose it " << chosen[size_t(want)] << " times";
  }
}

TEST(SpecPolicy, TurnsOffWhenSlowerThanPlainAndReprobesWithBackoff) {
  SpecPolicy p(SpecOptions{true, 10, 0});
  auto step = [&](double spec_seconds) {
    const int n = p.drafts(8);
    p.record(n == 0 ? 1.0 : spec_seconds, 1, n);  // nothing ever accepted
    return n;
  };
  int spec = 0, plain = 0;
  // Warm-up (2 + 2 plain), probes ((2 + 4) + (2 + 2) + (2 + 2) speculative), then off for 10 tokens.
  for (int i = 0; i < 4 + 14; ++i) (step(3.0) ? spec : plain)++;
  EXPECT_EQ(spec, 14);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(step(3.0), 0) << "off for --draft-reprobe tokens";
  // The re-probe (its two steps: the costs are known already) fails too: off for twice as long.
  for (int i = 0; i < 2; ++i) EXPECT_GT(step(3.0), 0) << "re-probe " << i;
  for (int i = 0; i < 20; ++i) EXPECT_EQ(step(3.0), 0) << "doubled wait, token " << i;
  EXPECT_GT(step(3.0), 0);
}

// reset() starts a new request: its acceptances and off state go, the measured step costs stay
// (they belong to the model and device, and the graph warm-up happens once per process).
TEST(SpecPolicy, ResetForgetsTheRequestButNotTheCosts) {
  SpecPolicy p(SpecOptions{true, 1000, 0});
  int spec_steps = 0;
  for (int i = 0; i < 40; ++i) {
    const int n = p.drafts(16);
    spec_steps += n > 0;
    p.record(n == 0 ? 1.0 : 5.0, 1, n);  // nothing accepted, speculation 5x dearer: turned off
  }
  ASSERT_GT(spec_steps, 0);
  ASSERT_EQ(p.drafts(16), 0) << "off after the failed probes";
  p.reset();
  // The new request starts from the decoder's profile (nothing accepted), weighted as a few
  // steps, not as the whole history: below the uniform prior, above nothing at all.
  EXPECT_LT(p.expected_tokens(3), 1 + 0.5 + 0.25 + 0.125);
  EXPECT_GT(p.expected_tokens(3), 1 + 1.0 / 12);
  // No plain warm-up and no re-measurement: the new request probes at once (its own acceptance
  // is unknown), at the width the known costs favour: every width cost 5 s, and the widest
  // expects the most tokens per step.
  EXPECT_EQ(p.drafts(16), 15);
}

// Policies sharing one SpecCosts (an engine's requests) measure once: the second request
// speculates from its first step, without plain warm-up steps or width probes of its own.
TEST(SpecPolicy, SharedCostsAreMeasuredOnce) {
  SpecCosts costs;
  SpecPolicy first(SpecOptions{}, costs);
  std::vector<int> seq;
  for (int i = 0; i < 18; ++i) {
    const int n = first.drafts(16);
    seq.push_back(n);
    first.record(n == 0 ? 1.0 : 1.1, n == 0 ? 1 : 4, n);
  }
  EXPECT_EQ(seq, (std::vector<int>{0, 0, 0, 0, 15, 15, 15, 15, 15, 15, 8, 8, 8, 8, 4, 4, 4, 4}));
  SpecPolicy second(SpecOptions{}, costs);
  EXPECT_GT(second.drafts(16), 0) << "the second request re-measured what the first measured";
  // A policy with its own costs starts from nothing.
  SpecPolicy alone(SpecOptions{});
  EXPECT_EQ(alone.drafts(16), 0);
}

// With shared costs a new request's probe may start at a narrow width (the cheapest per token
// under the prior); it must still be judged over every width and turned off when speculation
// does not pay, not left speculating because the narrow width's own narrower halves were never
// measured.
TEST(SpecPolicy, NarrowProbeOfANewRequestIsJudged) {
  SpecCosts costs;
  Sim sim;
  sim.plain = 1.0, sim.fixed = 10.0, sim.per_draft = 0.5, sim.r = 0.5;  // a CPU: verify costs ~16 plain steps
  {
    SpecPolicy first(SpecOptions{true, 64, 0}, costs);
    sim.run(first, 16, 200, 0);
  }
  SpecPolicy second(SpecOptions{true, 64, 0}, costs);
  const std::vector<int> chosen = sim.run(second, 16, 128, 128);
  EXPECT_GE(chosen[0], 118) << "a request where speculation never pays kept speculating";
}

// Where no width could pay even if every draft were accepted (a step of n drafts costs at least
// n + 1 plain steps), the policy stops speculating once the widths are measured.
TEST(SpecPolicy, HopelessWidthsAreNotProbed) {
  SpecPolicy p(SpecOptions{true, 8, 0});
  Sim sim;
  sim.plain = 1.0, sim.fixed = 1.5, sim.per_draft = 1.0, sim.r = 1.0;  // n drafts: n + 1.5 plain steps
  const std::vector<int> chosen = sim.run(p, 16, 200, 150);
  EXPECT_EQ(chosen[0], 150) << "speculated where no acceptance could pay";
}

// The demo pair on an H200 (session 8): a plain step 0.39 ms, a verify step of any width about
// 1.3 ms (launch-bound: flat in width), drafts accepted at 0.9 (tau ~7 at 15 drafts, 2.8x the
// plain step's tokens per second). Requests of 256 tokens one after another, as `run
// --prompt-file` and a server see them. Speculation must stay on for nearly all of their
// tokens: with each request's acceptance starting from the uniform prior, a request's first
// two steps were judged at ~3.6 expected tokens (1.3 / 3.6 > 0.39 was a coin toss), turned off
// for 64 tokens and backed off, and the run speculated for 38% of its tokens (1.09x instead of
// 2.18x at a fixed width).
TEST(SpecPolicy, NewRequestsKeepSpeculatingWhereItPays) {
  for (const bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "costs shared by the requests' policies (Engine)" : "one policy reset per request");
    SpecCosts costs;
    SpecPolicy decoder(SpecOptions{});  // SpecDecoder: its own costs
    Sim sim;
    sim.plain = 0.39, sim.fixed = 1.3, sim.per_draft = 0.0, sim.r = 0.9;
    int spec_tokens = 0, tokens = 0;
    for (int req = 0; req < 8; ++req) {
      SpecPolicy fresh(SpecOptions{}, costs);
      SpecPolicy& p = shared ? fresh : decoder;
      p.reset();
      for (int t = 0; t < 256;) {
        const int n = p.drafts(16);
        int committed = 1;
        if (n == 0) {
          p.record(sim.plain, 1, 0);
        } else {
          while (committed <= n && std::uniform_real_distribution<double>(0, 1)(sim.rng) < sim.r) ++committed;
          p.record(sim.fixed, committed, n);
          if (req > 0) spec_tokens += committed;
        }
        t += committed;
        if (req > 0) tokens += committed;
      }
    }
    EXPECT_GT(spec_tokens, 0.9 * tokens) << "speculated for " << spec_tokens << " of " << tokens << " tokens";
  }
}

}  // namespace
}  // namespace df
