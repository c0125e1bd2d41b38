// BatchSpecGate against simulated shared steps with known costs: it must measure both modes,
// then run the faster one nearly all the time, keep re-measuring the other, and follow a change.
#include <gtest/gtest.h>

#include "spec/batch_gate.h"

namespace df {
namespace {

struct Costs {
  double plain_s, spec_s;  // seconds of a shared step without / with speculation
  int plain_tokens, spec_tokens;
};

// Runs `steps` simulated steps; returns how many were allowed to speculate.
int simulate(BatchSpecGate& g, const Costs& c, int steps) {
  int allowed = 0;
  for (int i = 0; i < steps; ++i) {
    const bool a = g.allow();
    allowed += a;
    g.record(a, a ? c.spec_s : c.plain_s, a ? c.spec_tokens : c.plain_tokens);
  }
  return allowed;
}

TEST(BatchSpecGate, MeasuresBothModesFirst) {
  BatchSpecGate g(64);
  for (int i = 0; i < 2 + 4; ++i) {  // two untimed warm-up runs (spec/warmup.h), then 4 samples
    EXPECT_TRUE(g.allow()) << i;
    g.record(true, i < 2 ? 0.1 : 1.0, 1);  // speculation looks bad (its warm-up is not counted)...
  }
  for (int i = 0; i < 2 + 4; ++i) {
    EXPECT_FALSE(g.allow()) << i;  // ...but plain steps are measured before judging
    g.record(false, i < 2 ? 100.0 : 1.0, 4);
  }
  EXPECT_FALSE(g.allow());  // now judged: plain commits 4 tokens a second, speculation 1
  EXPECT_DOUBLE_EQ(g.rate(false), 4.0);
  EXPECT_DOUBLE_EQ(g.rate(true), 1.0);
}

// GPU-like: a step of 4 requests speculating costs 1.6x a plain one and commits 4 x 3 tokens.
TEST(BatchSpecGate, SpeculatesWhenItPays) {
  BatchSpecGate g(64);
  const int allowed = simulate(g, {0.010, 0.016, 4, 12}, 640);
  EXPECT_GT(allowed, 640 * 85 / 100);
  EXPECT_LT(allowed, 640);  // the plain mode is re-measured now and then
}

// CPU-like: speculating costs 3x and commits 1.5x: plain steps win.
TEST(BatchSpecGate, StopsWhenItDoesNotPay) {
  BatchSpecGate g(64);
  const int allowed = simulate(g, {0.010, 0.030, 4, 6}, 640);
  EXPECT_LT(allowed, 640 * 15 / 100);
  EXPECT_GT(allowed, 4);  // measured first, and re-probed
}

// The balance moves (longer contexts make verify steps dearer): the gate follows within a few
// re-measurements.
TEST(BatchSpecGate, FollowsAChange) {
  BatchSpecGate g(32);
  EXPECT_GT(simulate(g, {0.010, 0.016, 4, 12}, 320), 320 * 80 / 100);
  simulate(g, {0.010, 0.050, 4, 12}, 64);  // speculation is now a loss
  EXPECT_LT(simulate(g, {0.010, 0.050, 4, 12}, 320), 320 * 20 / 100);
}

}  // namespace
}  // namespace df
