// Continuous batching in the serving engine (EngineOptions::parallel), against the same engine
// running one request at a time (the independent path): eight requests submitted at once --
// greedy with and without logprobs, seeded sampling at T=0.8, a penalty, different prompt
// lengths and token budgets, a stop decision -- must each produce exactly the tokens, logprobs
// and finish reason they produce alone, and must actually share steps (their tokens interleave).
// Cancelling one request mid-generation leaves the others untouched.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/draft_model.h"
#include "model/target_model.h"
#include "spec/draft_source.h"
#include "tokenizer/tokenizer.h"

namespace df {
namespace {

struct Outcome {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  FinishReason finish = FinishReason::Error;
  int draft_steps = 0, accepted = 0;
};

struct Demo {
  std::unique_ptr<gguf::File> file = gguf::File::open(std::string(DELTAFLASH_SOURCE_DIR) +
                                                      "/models/demo/qwen35-demo-target-q8_0.gguf");
  std::unique_ptr<Backend> be = make_cpu_backend(1);
  TargetModel tm{*file, *be, ModelOptions{}};
  Tokenizer tok{Vocab::from_gguf(*file)};
};

// The requests: prompt text, budget, sampling, logprobs, stop after N tokens (0: never).
struct Spec {
  std::string prompt;
  int max_tokens;
  float temperature;
  int top_logprobs;
  int stop_after;
  float repeat_penalty = 1.0f;
};

std::vector<Spec> specs() {
  return {{"def read_json(path):\n", 40, 0, -1, 0},
          {"import os\n\n\nclass Config:\n    \"\"\"", 33, 0, 2, 0},
          {"def add(a, b):", 25, 0.8f, -1, 0},
          {"# Utilities for parsing dates\nimport datetime\n\n\ndef parse_date(text):\n", 50, 0, -1, 0},
          {"for i in range(10):", 28, 0.8f, 1, 0},
          {"def fibonacci(n):", 45, 0, -1, 9},
          {"class Stack:\n    def __init__(self):\n", 30, 0, -1, 0, 1.3f},
          {"x", 20, 0, 0, 0}};
}

GenerationRequest request(const Demo& d, const Spec& s, Outcome& o, std::promise<void>& done, std::mutex& mu,
                          std::vector<int>& order, int index) {
  GenerationRequest r;
  r.prompt = d.tok.encode(s.prompt, true);
  r.max_tokens = s.max_tokens;
  r.sampling.temperature = s.temperature;
  r.sampling.seed = 1000 + uint64_t(index);
  r.sampling.repeat_penalty = s.repeat_penalty;
  r.top_logprobs = s.top_logprobs;
  r.on_token = [&o, &mu, &order, index, stop_after = s.stop_after](const TokenEvent& ev) {
    o.ids.push_back(ev.id);
    if (ev.logprobs) o.logprobs.push_back(ev.logprobs->logprob);
    {
      std::lock_guard<std::mutex> lk(mu);
      order.push_back(index);
    }
    TokenDecision dec;
    dec.stop = stop_after > 0 && int(o.ids.size()) >= stop_after;
    return dec;
  };
  r.on_done = [&o, &done](const GenerationResult& res) {
    o.finish = res.finish;
    o.draft_steps = res.draft_steps;
    o.accepted = res.accepted_tokens;
    done.set_value();
  };
  return r;
}

// Runs every request on an engine with `parallel` slots (or one per draft source), all
// submitted at once.
std::vector<Outcome> run_all(Demo& d, int parallel, std::vector<int>* order_out = nullptr,
                             std::vector<DraftSource*> drafts = {}, const std::vector<Spec>& sp = specs()) {
  EngineOptions eo;
  eo.ctx = 256;
  eo.parallel = parallel;
  eo.spec.adaptive = false;  // speculate whenever a request runs alone
  Engine e(d.tm, d.tok, eo, drafts);
  std::vector<Outcome> out(sp.size());
  std::vector<std::promise<void>> done(sp.size());
  std::mutex mu;
  std::vector<int> order;
  for (size_t i = 0; i < sp.size(); ++i)
    EXPECT_NE(e.submit(request(d, sp[i], out[i], done[i], mu, order, int(i))), nullptr);
  for (auto& p : done) p.get_future().wait();
  if (order_out) *order_out = order;
  return out;
}

TEST(EngineBatching, ConcurrentRequestsGiveWhatTheyGiveAlone) {
  Demo d;
  const std::vector<Outcome> alone = run_all(d, 1);
  std::vector<int> order;
  const std::vector<Outcome> batched = run_all(d, 4, &order);
  const auto sp = specs();
  for (size_t i = 0; i < sp.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i) + ": " + sp[i].prompt);
    EXPECT_FALSE(alone[i].ids.empty());
    EXPECT_EQ(batched[i].ids, alone[i].ids);
    EXPECT_EQ(batched[i].finish, alone[i].finish);
    ASSERT_EQ(batched[i].logprobs.size(), alone[i].logprobs.size());
    for (size_t k = 0; k < alone[i].logprobs.size(); ++k) EXPECT_EQ(batched[i].logprobs[k], alone[i].logprobs[k]) << k;
  }
  EXPECT_EQ(alone[5].finish, FinishReason::Stopped);
  EXPECT_EQ(alone[5].ids.size(), 9u);
  // The batched run interleaves requests: request 1's first token comes before request 0's last.
  size_t last0 = 0, first1 = order.size();
  for (size_t k = 0; k < order.size(); ++k) {
    if (order[k] == 0) last0 = k;
    if (order[k] == 1 && first1 == order.size()) first1 = k;
  }
  EXPECT_LT(first1, last0) << "the requests did not share steps";
}

// With a drafter per slot: every decoding request speculates, each verifying its own block in
// the step it shares with the others (plain rows, prompt chunks, other blocks), and the drafter
// of each keeps ingesting its rows. Greedy outputs (with and without logprobs, with a repeat
// penalty) are exactly what the request gives alone without speculation; sampled ones follow
// the same distribution (tested in test_spec), so here they only have to finish normally.
TEST(EngineBatching, WithDraftersEveryRequestSpeculatesAndGreedyOutputsStayExact) {
  Demo d;
  std::vector<Spec> sp = specs();
  sp[0].max_tokens = 160;  // outlives the others: its last ~100 tokens run alone
  const std::vector<Outcome> alone = run_all(d, 1, nullptr, {}, sp);
  auto dfile = gguf::File::open(std::string(DELTAFLASH_SOURCE_DIR) + "/models/demo/qwen35-demo-drafter-q8_0.gguf");
  DraftModel dm(*dfile, d.tm);
  std::vector<std::unique_ptr<DFlashSource>> own;
  std::vector<DraftSource*> drafts;
  for (int i = 0; i < 3; ++i) {
    own.push_back(std::make_unique<DFlashSource>(dm, d.tm, 256));
    drafts.push_back(own.back().get());
  }
  const std::vector<Outcome> spec = run_all(d, 3, nullptr, drafts, sp);
  int steps = 0, accepted = 0, shared_steps = 0;
  for (size_t i = 0; i < alone.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    if (sp[i].temperature > 0) {
      EXPECT_FALSE(spec[i].ids.empty());
      EXPECT_TRUE(spec[i].finish == FinishReason::Length || spec[i].finish == FinishReason::Eog);
    } else {
      EXPECT_EQ(spec[i].ids, alone[i].ids);
      EXPECT_EQ(spec[i].finish, alone[i].finish);
      ASSERT_EQ(spec[i].logprobs.size(), alone[i].logprobs.size());
      for (size_t k = 0; k < alone[i].logprobs.size(); ++k) EXPECT_EQ(spec[i].logprobs[k], alone[i].logprobs[k]) << k;
    }
    steps += spec[i].draft_steps;
    accepted += spec[i].accepted;
    if (i > 0) shared_steps += spec[i].draft_steps;  // request 0 outlives the others; these never ran alone for long
  }
  EXPECT_GT(shared_steps, 0) << "no request speculated while sharing steps";
  EXPECT_GT(accepted, 0) << "no draft was accepted: the drafters lost their context while batched?";
  std::printf("[engine-batching] with drafters: %d draft steps (%d by requests 1-7), %d drafts accepted\n", steps,
              shared_steps, accepted);
}

TEST(EngineBatching, CancellingOneLeavesTheOthers) {
  Demo d;
  const std::vector<Outcome> alone = run_all(d, 1);
  EngineOptions eo;
  eo.ctx = 256;
  eo.parallel = 4;
  Engine e(d.tm, d.tok, eo);
  const auto sp = specs();
  std::vector<Outcome> out(4);
  std::vector<std::promise<void>> done(4);
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::shared_ptr<Engine::Ticket>> tickets;
  std::atomic<bool> cancel_now{false};
  for (int i = 0; i < 4; ++i) {
    GenerationRequest r = request(d, sp[size_t(i)], out[size_t(i)], done[size_t(i)], mu, order, i);
    if (i == 1) {  // request 1 asks to be cancelled after its 5th token
      auto inner = r.on_token;
      r.on_token = [inner, &out, &cancel_now](const TokenEvent& ev) {
        TokenDecision dec = inner(ev);
        if (out[1].ids.size() == 5) cancel_now = true;
        return dec;
      };
    }
    tickets.push_back(e.submit(std::move(r)));
  }
  while (!cancel_now) std::this_thread::yield();
  e.cancel(tickets[1]);
  for (auto& p : done) p.get_future().wait();
  EXPECT_EQ(out[1].finish, FinishReason::Cancelled);
  EXPECT_GE(out[1].ids.size(), 5u);
  for (int i : {0, 2, 3}) {
    EXPECT_EQ(out[size_t(i)].ids, alone[size_t(i)].ids) << "request " << i;
    EXPECT_EQ(out[size_t(i)].finish, alone[size_t(i)].finish) << "request " << i;
  }
}

}  // namespace
}  // namespace df
