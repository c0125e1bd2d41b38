// Sampled decode steps that download top-k candidates instead of logits (EngineOptions::
// device_top_k, GenerateOptions::device_top_k): on the demo model, requests sampled at T=0.8
// with top_k 40 (and variations: top-p, min-p, a larger top_k, greedy and logprob requests
// sharing the steps) give exactly the tokens of the full-logits path, alone and batched, and
// the candidates path really runs (counted top_k_rows calls) while the full one never does.
#include <gtest/gtest.h>

#include <future>
#include <string>
#include <vector>

#include "backend/profiling_backend.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "gguf/gguf.h"
#include "model/draft_model.h"
#include "model/target_model.h"
#include "spec/draft_source.h"
#include "tokenizer/tokenizer.h"

namespace df {
namespace {

struct Demo {
  std::unique_ptr<gguf::File> file = gguf::File::open(std::string(DELTAFLASH_SOURCE_DIR) +
                                                      "/models/demo/qwen35-demo-target-q8_0.gguf");
  ProfilingBackend be{make_cpu_backend(2)};
  TargetModel tm{*file, be, ModelOptions{}};
  Tokenizer tok{Vocab::from_gguf(*file)};
  Demo() { be.set_mode(ProfilingBackend::Mode::kCount); }
  int64_t calls(const std::string& op) {
    for (const auto& e : be.entries())
      if (e.op == op) return e.calls;
    return 0;
  }
};

struct Req {
  std::string prompt;
  float temperature;
  int top_k;
  float top_p, min_p;
  int top_logprobs = -1;
};

std::vector<Req> requests() {
  return {{"def add(a, b):", 0.8f, 40, 0.95f, 0.05f},
          {"for i in range(10):", 0.8f, 40, 1.0f, 0.0f},
          {"class Stack:\n", 1.2f, 256, 0.9f, 0.0f},
          {"import os\n", 0.0f, 40, 0.95f, 0.05f},  // greedy: its argmax from the candidates
          {"# parse dates\n", 0.8f, 40, 0.95f, 0.05f, 2}};  // logprobs: full logits for its steps
}

std::vector<std::vector<int32_t>> run_engine(Demo& d, bool device_top_k, int parallel, const std::vector<Req>& rs,
                                             std::vector<DraftSource*> drafts = {}) {
  EngineOptions eo;
  eo.ctx = 256;
  eo.parallel = parallel;
  eo.device_top_k = device_top_k;
  eo.spec.adaptive = false;  // with drafts: speculate on every step
  Engine e(d.tm, d.tok, eo, drafts);
  std::vector<std::vector<int32_t>> out(rs.size());
  std::vector<std::promise<void>> done(rs.size());
  for (size_t i = 0; i < rs.size(); ++i) {
    GenerationRequest r;
    r.prompt = d.tok.encode(rs[i].prompt, true);
    r.max_tokens = 24;
    r.sampling.temperature = rs[i].temperature;
    r.sampling.top_k = rs[i].top_k;
    r.sampling.top_p = rs[i].top_p;
    r.sampling.min_p = rs[i].min_p;
    r.sampling.seed = 500 + i;
    r.top_logprobs = rs[i].top_logprobs;
    r.on_token = [&out, i](const TokenEvent& ev) {
      out[i].push_back(ev.id);
      return TokenDecision{};
    };
    r.on_done = [&done, i](const GenerationResult&) { done[i].set_value(); };
    EXPECT_NE(e.submit(std::move(r)), nullptr);
  }
  for (auto& p : done) p.get_future().wait();
  return out;
}

TEST(EngineTopK, SampledTokensAreThoseOfTheFullLogits) {
  Demo d;
  const std::vector<Req> rs = requests();
  for (int parallel : {1, 3}) {
    SCOPED_TRACE("parallel " + std::to_string(parallel));
    d.be.reset();
    const auto full = run_engine(d, false, parallel, rs);
    EXPECT_EQ(d.calls("top_k_rows"), 0) << "device_top_k off still used the candidates";
    d.be.reset();
    const auto top = run_engine(d, true, parallel, rs);
    EXPECT_GT(d.calls("top_k_rows"), 10) << "device_top_k on never used the candidates";
    for (size_t i = 0; i < rs.size(); ++i) {
      EXPECT_FALSE(full[i].empty());
      EXPECT_EQ(top[i], full[i]) << "request " << i << ": " << rs[i].prompt;
    }
  }
}

TEST(EngineTopK, GeneratorGivesTheSameTokens) {
  Demo d;
  const std::vector<int32_t> prompt = d.tok.encode("def fibonacci(n):", true);
  for (int top_k : {40, 256}) {
    std::vector<int32_t> got[2];
    int64_t top_calls[2] = {0, 0};
    for (int on = 0; on < 2; ++on) {
      GenerateOptions o;
      o.max_new_tokens = 24;
      o.stop_at_eog = false;
      o.device_top_k = on == 1;
      o.sampling.temperature = 0.8f;
      o.sampling.top_k = top_k;
      o.sampling.seed = 99;
      d.be.reset();
      Generator g(d.tm, &d.tok, 256);
      g.generate(prompt, o, [&](int32_t t) {
        got[on].push_back(t);
        return true;
      });
      top_calls[on] = d.calls("top_k_rows");
    }
    EXPECT_EQ(got[1], got[0]) << "top_k " << top_k;
    EXPECT_EQ(top_calls[0], 0);
    EXPECT_EQ(top_calls[1], 23);  // every decode step after the prefill
  }
}

// With the demo drafter: verify blocks of sampled requests run on top candidates too (drafts
// from the drafter's top candidates, spec/verify.h's sparse rules), batched with greedy and
// logprob requests (whose steps fall back to full logits, the top-candidate drafts then
// verified on them): every request's tokens equal those of the full-logits path.
TEST(EngineTopK, SpeculativeSampledTokensAreThoseOfTheFullLogits) {
  Demo d;
  auto dfile = gguf::File::open(std::string(DELTAFLASH_SOURCE_DIR) + "/models/demo/qwen35-demo-drafter-q8_0.gguf");
  DraftModel dm(*dfile, d.tm);
  std::vector<std::unique_ptr<DFlashSource>> sources;
  std::vector<DraftSource*> drafts;
  for (int i = 0; i < 3; ++i) {
    sources.push_back(std::make_unique<DFlashSource>(dm, d.tm, 256));
    drafts.push_back(sources.back().get());
  }
  const std::vector<Req> rs = requests();
  for (int parallel : {1, 3}) {
    SCOPED_TRACE("parallel " + std::to_string(parallel));
    const std::vector<DraftSource*> use(drafts.begin(), drafts.begin() + parallel);
    d.be.reset();
    const auto full = run_engine(d, false, parallel, rs, use);
    d.be.reset();
    const auto top = run_engine(d, true, parallel, rs, use);
    EXPECT_GT(d.calls("top_k_rows"), 10);
    for (size_t i = 0; i < rs.size(); ++i) EXPECT_EQ(top[i], full[i]) << "request " << i << ": " << rs[i].prompt;
  }
}

}  // namespace
}  // namespace df
