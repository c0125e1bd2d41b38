// The serving engine with speculative decoding: the same requests through an engine with a
// DFlash draft source (random drafter, and the trained demo pair when present) and through a
// plain engine give identical tokens (greedy), finish reasons, logprobs of the chosen tokens, and
// honour max_tokens and stop decisions that land inside a verified block.
#include <gtest/gtest.h>

#include <future>

#include "engine/engine.h"
#include "gguf/gguf.h"
#include "model/draft_model.h"
#include "model/target_model.h"
#include "spec/draft_source.h"
#include "support/subprocess.h"
#include "tokenizer/tokenizer.h"

namespace df {
namespace {

using test::run_command;
using test::TempDir;

struct Outcome {
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
  FinishReason finish = FinishReason::Error;
  int draft_steps = 0, accepted = 0;
};

Outcome generate(Engine& e, const std::vector<int32_t>& prompt, int max_tokens, int stop_after = -1, int top_logprobs = -1) {
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.top_logprobs = top_logprobs;
  Outcome o;
  std::promise<void> done;
  r.on_token = [&](const TokenEvent& ev) {
    o.ids.push_back(ev.id);
    if (ev.logprobs) o.logprobs.push_back(ev.logprobs->logprob);
    TokenDecision d;
    d.stop = stop_after > 0 && int(o.ids.size()) >= stop_after;
    return d;
  };
  r.on_done = [&](const GenerationResult& res) {
    o.finish = res.finish;
    o.draft_steps = res.draft_steps;
    o.accepted = res.accepted_tokens;
    done.set_value();
  };
  auto t = e.submit(std::move(r));
  EXPECT_NE(t, nullptr);
  done.get_future().wait();
  return o;
}

void compare_engines(const std::string& target, const std::string& draft, int n_prompts, bool expect_acceptance) {
  auto tf = gguf::File::open(target);
  auto df_ = gguf::File::open(draft);
  auto be = make_cpu_backend(1);
  TargetModel tm(*tf, *be, ModelOptions{});
  Tokenizer tok(Vocab::from_gguf(*tf));
  DraftModel dm(*df_, tm);
  DFlashSource src(dm, tm, 512);
  EngineOptions eo;
  eo.ctx = 512;
  eo.spec.adaptive = false;  // speculate on every step: the point is exactness
  Engine plain(tm, tok, eo);
  Engine spec(tm, tok, eo, &src);
  int accepted = 0;
  for (int i = 0; i < n_prompts; ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    const std::string text = i % 2 ? "def parse_" + std::to_string(i) + "(path):\n    \"\"\"" : "class Item" + std::to_string(i) + ":\n";
    const std::vector<int32_t> prompt = tok.encode(text, true);
    const int max_tokens = 30 + 7 * i;
    const Outcome a = generate(plain, prompt, max_tokens, -1, 0), b = generate(spec, prompt, max_tokens, -1, 0);
    EXPECT_EQ(a.ids, b.ids);
    EXPECT_EQ(a.finish, b.finish);
    ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
    for (size_t k = 0; k < a.logprobs.size(); ++k) EXPECT_EQ(a.logprobs[k], b.logprobs[k]) << "token " << k;
    EXPECT_GT(b.draft_steps, 0);
    accepted += b.accepted;
    // Without logprobs, greedy steps return argmax ids from the backend instead of logits.
    EXPECT_EQ(generate(plain, prompt, max_tokens).ids, a.ids) << "plain engine, argmax ids vs logits";
    EXPECT_EQ(generate(spec, prompt, max_tokens).ids, a.ids) << "speculative engine, argmax ids vs logits";
    // A stop decision inside a block ends exactly there.
    const Outcome c = generate(spec, prompt, max_tokens, 5 + i);
    EXPECT_EQ(c.ids, std::vector<int32_t>(a.ids.begin(), a.ids.begin() + std::min<size_t>(a.ids.size(), 5 + i)));
  }
  if (expect_acceptance) {
    EXPECT_GT(accepted, 0) << "the trained drafter never got a draft accepted";
  }
}

TEST(EngineSpec, RandomDrafterMatchesPlainEngine) {
  TempDir dir;
  const std::string bin = DELTAFLASH_BIN;
  run_command(bin + " make-model --arch qwen35 --shape tiny --type q8_0 --seed 41 -q -o " + dir.file("t.gguf"));
  run_command(bin + " make-model --arch qwen35-dflash-draft --target " + dir.file("t.gguf") + " --block 8 -q -o " +
              dir.file("d.gguf"));
  compare_engines(dir.file("t.gguf"), dir.file("d.gguf"), 6, false);
}

TEST(EngineSpec, DemoPairMatchesPlainEngine) {
  const std::string dir = std::string(DELTAFLASH_SOURCE_DIR) + "/models/demo/";
  compare_engines(dir + "qwen35-demo-target-q8_0.gguf", dir + "qwen35-demo-drafter-q8_0.gguf", 6, true);
}

}  // namespace
}  // namespace df
