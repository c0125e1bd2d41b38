// The structure of a speculative (DFlash) step against a plain decode step, counted on the CPU
// as a CUDA graph backend would see it (support/step_census.h): steps, graph launches, ops inside
// them, ops launched outside any step, host synchronisations, allocations. On a GPU a small
// model's step is launch-bound, so these counts are its cost; the test pins them so a change
// that adds a direct launch, a round trip or a per-step allocation fails here, not in a bench.
// The demo pair (models/demo) runs greedy; the speculative output must equal plain decoding.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <new>

#include "engine/engine.h"
#include "engine/generator.h"
#include "spec/draft_source.h"
#include "spec/spec_decoder.h"
#include "support/demo_pair.h"
#include "support/step_census.h"

// Host heap allocations are counted (outside the wrapped backend) to catch per-step ones.
void* operator new(std::size_t n) {
  df::test::count_host_new();
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace df {
namespace {

using test::StepCensusBackend;
using test::StepCounts;

// The demo pair on the CPU backend, counted by the census.
struct CountedDemoPair {
  std::unique_ptr<Backend> cpu = make_cpu_backend(1);
  std::unique_ptr<StepCensusBackend> be = std::make_unique<StepCensusBackend>(*cpu);
  test::DemoPair demo{*be};
};

constexpr int kCtx = 512;
constexpr int kTokens = 96;  // generated per run: the callback stops there (no budget-forced plain steps)

GenerateOptions greedy_options() {
  GenerateOptions o;
  o.max_new_tokens = kCtx;  // the callback ends the run
  o.sampling.temperature = 0;
  o.stop_at_eog = false;
  return o;
}

const char* kCodePrompt = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n";

// Counts per step (the whole decode loop after the first token, over `steps` steps).
struct PerStep {
  double steps, graphs, ops_in_steps, ops_outside, syncs, allocs, host_news;
};

PerStep per_step(const StepCounts& d, int steps) {
  const double n = steps;
  return {double(d.steps) / n,       double(d.graphs) / n, double(d.ops_in_steps) / n, double(d.ops_outside) / n,
          double(d.syncs) / n,       double(d.allocs) / n, double(d.host_news) / n};
}

void print(const char* what, const PerStep& p) {
  std::printf("[step-census] %-18s steps %.2f  graphs %.2f  ops in steps %.1f  ops outside %.2f  syncs %.2f  "
              "allocs %.2f  host news %.2f\n",
              what, p.steps, p.graphs, p.ops_in_steps, p.ops_outside, p.syncs, p.allocs, p.host_news);
}

// Runs `gen` and returns the tokens, with the counts from the first token to the end.
template <class G>
std::vector<int32_t> run_counted(G& gen, StepCensusBackend& be, const std::vector<int32_t>& prompt,
                                 GenerateStats& st, StepCounts& decode) {
  std::vector<int32_t> out;
  out.reserve(kTokens);
  StepCounts at_first;
  st = gen.generate(prompt, greedy_options(), [&](int32_t t) {
    if (out.empty()) at_first = be.counts();
    out.push_back(t);
    return int(out.size()) < kTokens;
  });
  decode = be.counts() - at_first;
  return out;
}

TEST(SpecStepCensus, SpeculativeStepIsOneRoundTripAndNoDirectLaunches) {
  CountedDemoPair p;
  const std::vector<int32_t> prompt = p.demo.tok.encode(kCodePrompt, false);
  ASSERT_GT(prompt.size(), 4u);

  Generator plain(p.demo.target, &p.demo.tok, kCtx);
  GenerateStats pst;
  StepCounts pd;
  const std::vector<int32_t> ref = run_counted(plain, *p.be, prompt, pst, pd);
  ASSERT_EQ(int(ref.size()), kTokens);
  const PerStep plain_step = per_step(pd, kTokens - 1);  // every token after the first is one forward
  print("plain step", plain_step);

  DFlashSource drafts(p.demo.draft, p.demo.target, kCtx);
  SpecDecoder spec(p.demo.target, drafts, &p.demo.tok, kCtx, SpecOptions{false, 64, 0});  // always full width
  GenerateStats sst;
  StepCounts sd;
  const std::vector<int32_t> got = run_counted(spec, *p.be, prompt, sst, sd);
  EXPECT_EQ(got, ref) << "speculation must not change greedy output";
  ASSERT_EQ(sst.plain_steps, 0);
  ASSERT_GT(sst.draft_steps, 0);
  const PerStep spec_step = per_step(sd, sst.draft_steps);
  print("speculative step", spec_step);
  std::printf("[step-census] %d speculative steps, tau %.2f (tokens committed a step)\n", sst.draft_steps,
              double(kTokens - 1) / sst.draft_steps);
  std::printf("[step-census] ops in the last graphs:");
  for (int64_t n : p.be->recent_graph_ops()) std::printf(" %lld", static_cast<long long>(n));
  std::printf("\n");
  EXPECT_EQ(p.be->depth(), 0) << "a step left open";

  // A plain step: one graph, one round trip (its argmax id), nothing else.
  EXPECT_EQ(pd.steps, kTokens - 1);
  EXPECT_EQ(pd.graphs, kTokens - 1);
  EXPECT_EQ(pd.syncs, kTokens - 1);
  EXPECT_EQ(pd.ops_outside, 0);
  EXPECT_EQ(pd.allocs, 0);
  // A speculative step: one round trip. The drafts stay on the device, where the verify step
  // copies them into its tokens, so the host queues the draft and the verify without waiting
  // and downloads the drafts with the verify's ids after it. No op runs outside a step: the
  // rollback copies and the drafter's ingest of the kept rows are graphs too.
  EXPECT_EQ(sd.syncs, sst.draft_steps);
  EXPECT_EQ(sd.ops_outside, 0);
  EXPECT_EQ(sd.allocs, 0);
  EXPECT_LE(sd.graphs, 3 * sst.draft_steps);
}

// The serving engine's speculative steps (one request): one round trip each too. The drafts
// stay in the slot's part of the engine's device buffer, and one download after the verify
// brings them with the step's argmax ids.
TEST(SpecStepCensus, EngineSpeculativeStepIsOneRoundTrip) {
  CountedDemoPair p;
  DFlashSource drafts(p.demo.draft, p.demo.target, kCtx);
  EngineOptions eo;
  eo.ctx = kCtx;
  eo.spec.adaptive = false;  // always the full width
  Engine engine(p.demo.target, p.demo.tok, eo, &drafts);
  GenerationRequest r;
  r.prompt = p.demo.tok.encode(kCodePrompt, false);
  r.max_tokens = kCtx - int(r.prompt.size()) - 1;  // the stop decision ends the run
  r.sampling.temperature = 0;
  std::vector<int32_t> out;
  StepCounts at_first, at_end;
  GenerationResult res;
  std::promise<void> done;
  r.on_token = [&](const TokenEvent& ev) {  // the worker thread, as the census's counts
    if (out.empty()) at_first = p.be->counts();
    out.push_back(ev.id);
    TokenDecision d;
    d.stop = int(out.size()) >= kTokens;
    if (d.stop) at_end = p.be->counts();  // before the request's state is freed (not a step's work)
    return d;
  };
  r.on_done = [&](const GenerationResult& g) {
    res = g;
    done.set_value();
  };
  ASSERT_NE(engine.submit(std::move(r)), nullptr);
  done.get_future().wait();
  ASSERT_EQ(int(out.size()), kTokens);
  ASSERT_GT(res.draft_steps, 0);
  const StepCounts d = at_end - at_first;
  print("engine spec step", per_step(d, res.draft_steps));
  EXPECT_EQ(d.syncs, res.draft_steps);
  EXPECT_EQ(d.ops_outside, 0);
  EXPECT_EQ(d.allocs, 0);
}

}  // namespace
}  // namespace df
