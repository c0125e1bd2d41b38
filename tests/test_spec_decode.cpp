// Speculative decoding end to end on the CPU, against plain decoding (the independent path):
// - greedy: token-identical output for 50 prompts × blocks {4, 8, 16} with a random DFlash
//   drafter (mostly rejections) and with scripted drafters that propose the plain continuation
//   with planted mistakes (long acceptances, all-accepted blocks), including EOS, max_tokens
//   and a stop callback landing inside a block;
// - sampling: the rejection rule on adversarial draft/target pairs, and the distribution of the
//   first three generated tokens over 1,000 seeds per drafter against the exact plain-sampling distribution;
// - drafter validation against the target.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <tuple>

#include "engine/generator.h"
#include "gguf/gguf.h"
#include "model/draft_model.h"
#include "model/target_model.h"
#include "spec/spec_decoder.h"
#include "spec/verify.h"
#include "support/subprocess.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace df {
namespace {

using test::run_command;
using test::TempDir;

// A target (tiny qwen35 shape, Q8_0) with a random drafter made for it.
struct Pair {
  TempDir dir;
  std::unique_ptr<gguf::File> target_file, draft_file;
  std::unique_ptr<Backend> be;
  std::unique_ptr<TargetModel> target;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<Generator> gen;  // the plain-decoding reference, reused across prompts
  explicit Pair(const std::string& arch = "qwen35", GgmlType kv_type = ModelOptions{}.kv_type) {
    const std::string bin = DELTAFLASH_BIN;
    run_command(bin + " make-model --arch " + arch + " --shape tiny --type q8_0 --seed 31 -o " + dir.file("t.gguf"));
    run_command(bin + " make-model --arch qwen35-dflash-draft --target " + dir.file("t.gguf") +
                " --type q8_0 --seed 32 -q -o " + dir.file("d.gguf"));
    target_file = gguf::File::open(dir.file("t.gguf"));
    draft_file = gguf::File::open(dir.file("d.gguf"));
    be = make_cpu_backend(1);  // ctest runs tests side by side on small machines
    ModelOptions mo;
    mo.kv_type = kv_type;  // the drafter's cache takes the target's type too
    target = std::make_unique<TargetModel>(*target_file, *be, mo);
    tok = std::make_unique<Tokenizer>(Vocab::from_gguf(*target_file));
    gen = std::make_unique<Generator>(*target, tok.get(), 256);
  }
};

std::vector<int32_t> prompt_of(int i) {
  std::vector<int32_t> p;
  const int len = 1 + (i * 7) % 23;  // 1..23 tokens, including very short prompts
  for (int j = 0; j < len; ++j) p.push_back(int32_t((i * 131 + j * 17) % 240 + 5));
  return p;
}

GenerateOptions greedy(int n) {
  GenerateOptions o;
  o.max_new_tokens = n;
  o.sampling.temperature = 0;
  o.sampling.seed = 1;
  return o;
}

std::vector<int32_t> plain(Pair& p, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                           GenerateStats* stats = nullptr, int stop_after = -1) {
  Generator* g = p.gen.get();
  g->reset();
  std::vector<int32_t> out;
  GenerateStats s = g->generate(prompt, o, [&](int32_t t) {
    out.push_back(t);
    return stop_after < 0 || int(out.size()) < stop_after;
  });
  if (stats) *stats = s;
  return out;
}

std::vector<int32_t> speculative(SpecDecoder& d, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                                 GenerateStats* stats = nullptr, int stop_after = -1) {
  std::vector<int32_t> out;
  GenerateStats s = d.generate(prompt, o, [&](int32_t t) {
    out.push_back(t);
    return stop_after < 0 || int(out.size()) < stop_after;
  });
  if (stats) *stats = s;
  return out;
}

std::vector<int32_t> speculative(Pair& p, DraftSource& src, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                                 GenerateStats* stats = nullptr, int stop_after = -1, SpecOptions so = {false, 64, 0}) {
  SpecDecoder d(*p.target, src, p.tok.get(), 256, so);
  return speculative(d, prompt, o, stats, stop_after);
}

// Proposes the plain greedy continuation of one prompt, wrong at every `period`-th draft.
class ScriptedSource final : public DraftSource {
 public:
  ScriptedSource(int block, int64_t n_vocab, std::vector<int32_t> prompt, std::vector<int32_t> continuation, int period)
      : block_(block), V_(size_t(n_vocab)), prompt_len_(int(prompt.size())), cont_(std::move(continuation)),
        period_(period) {}
  int block_size() const override { return block_; }
  void on_target_rows(int kept) override { n_past_ += kept; }
  void propose(int32_t, int n, std::vector<float>& logits) override {
    logits.assign(size_t(n) * V_, 0.0f);
    for (int i = 0; i < n; ++i) {
      // The draft at position n_past + 1 + i is generated token index n_past + 1 + i - prompt_len.
      const int g = n_past_ + 1 + i - prompt_len_;
      int32_t t = g < int(cont_.size()) ? cont_[size_t(g)] : 7;
      if (period_ > 0 && ++count_ % period_ == 0) t = int32_t((t + 1) % int(V_));
      logits[size_t(i) * V_ + size_t(t)] = 10.0f;
    }
  }
  void reset() override { n_past_ = 0; }

 private:
  int block_;
  size_t V_;
  int prompt_len_;
  std::vector<int32_t> cont_;
  int period_;
  int n_past_ = 0, count_ = 0;
};

TEST(SpecDecode, GreedyRandomDrafterEqualsPlain) {
  Pair p;
  for (int block : {4, 8, 16}) {
    DraftModel draft(*p.draft_file, *p.target, block);
    DFlashSource src(draft, *p.target, 256);
    SpecDecoder dec(*p.target, src, p.tok.get(), 256, SpecOptions{false, 64, 0});
    for (int i = 0; i < 50; ++i) {
      SCOPED_TRACE("block " + std::to_string(block) + " prompt " + std::to_string(i));
      const auto prompt = prompt_of(i);
      const GenerateOptions o = greedy(20 + i % 7);
      GenerateStats ss;
      const auto ref = plain(p, prompt, o);
      ASSERT_EQ(speculative(dec, prompt, o, &ss), ref);
      EXPECT_GT(ss.draft_steps, 0);
    }
  }
}

// Plain greedy decoding returns argmax ids from the backend (ForwardOutput::greedy_only); a zero
// logit bias keeps the same choice but sends the logits to the host sampler instead. The two
// paths must agree token for token, and speculation must match both, with drafts and verify
// rows going either way.
TEST(SpecDecode, ArgmaxPathEqualsLogitsPath) {
  Pair p;
  DraftModel draft(*p.draft_file, *p.target, 8);
  DFlashSource src(draft, *p.target, 256);
  SpecDecoder dec(*p.target, src, p.tok.get(), 256, SpecOptions{false, 64, 0});
  for (int i = 0; i < 20; ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    const auto prompt = prompt_of(i);
    GenerateOptions ids = greedy(24), logits = greedy(24);
    logits.sampling.logit_bias[3] = 0.0f;  // changes nothing but the path
    const auto ref = plain(p, prompt, logits);
    ASSERT_EQ(plain(p, prompt, ids), ref);
    ASSERT_EQ(speculative(dec, prompt, ids), ref);
    ASSERT_EQ(speculative(dec, prompt, logits), ref);
  }
}

// The greedy walk over argmax ids equals walk_block's greedy walk over the logits they came from.
TEST(SpecDecode, GreedyWalkOverIdsEqualsWalkOverLogits) {
  std::mt19937 rng(5);
  const size_t V = 50;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + trial % 9;
    std::vector<float> logits(size_t(n + 1) * V);
    std::vector<int32_t> argmax(static_cast<size_t>(n + 1)), drafts(static_cast<size_t>(n));
    for (int r = 0; r <= n; ++r) {
      for (size_t v = 0; v < V; ++v) logits[size_t(r) * V + v] = float(int(rng() % 7));  // many ties
      argmax[size_t(r)] = int32_t(std::max_element(logits.begin() + long(size_t(r) * V), logits.begin() + long(size_t(r + 1) * V)) -
                                  (logits.begin() + long(size_t(r) * V)));
    }
    // Drafts that mostly agree, so walks get long.
    for (int i = 0; i < n; ++i) drafts[size_t(i)] = rng() % 4 == 0 ? int32_t(rng() % V) : argmax[size_t(i)];
    const int stop_at = int(rng() % 12);  // on_accept ends the walk after this many accepts
    auto walk = [&](bool ids) {
      std::vector<int32_t> accepted;
      auto on_accept = [&](int32_t d) {
        accepted.push_back(d);
        return int(accepted.size()) < stop_at;
      };
      Sampler s(SamplingParams{0.0f}, int(V));
      std::mt19937_64 r64(1);
      const spec::BlockWalk w = ids ? spec::walk_block_greedy(argmax, drafts, on_accept)
                                    : spec::walk_block(logits, V, drafts, {}, true, s, r64, on_accept);
      return std::tuple(w.kept, w.next_row, accepted, w.next ? *w.next : argmax[size_t(w.next_row)]);
    };
    ASSERT_EQ(walk(true), walk(false)) << "trial " << trial;
  }
}

TEST(SpecDecode, GreedyScriptedDraftsEqualPlainWithLongAcceptance) {
  Pair p;
  int all_accepted_steps = 0;
  for (int block : {4, 8, 16})
    for (int period : {0, 3, 5, 11}) {  // 0: every draft right
      for (int i = 0; i < 6; ++i) {
        SCOPED_TRACE("block " + std::to_string(block) + " period " + std::to_string(period) + " prompt " +
                     std::to_string(i));
        const auto prompt = prompt_of(i + 100);
        const GenerateOptions o = greedy(40 + i);  // max_tokens lands inside a block
        const auto ref = plain(p, prompt, o);
        ScriptedSource src(block, p.target->hparams().n_vocab, prompt, ref, period);
        GenerateStats ss;
        ASSERT_EQ(speculative(p, src, prompt, o, &ss), ref);
        if (period == 0) {
          // Perfect drafts: every step keeps the whole block (except the last, cut by max_tokens).
          EXPECT_GE(ss.mean_accept_len(), 0.8 * block) << "tau " << ss.mean_accept_len();
          all_accepted_steps += ss.draft_steps;
        }
      }
    }
  EXPECT_GT(all_accepted_steps, 0);
}

TEST(SpecDecode, StopCallbackInsideBlockEndsWhereStopped) {
  Pair p;
  const auto prompt = prompt_of(7);
  const GenerateOptions o = greedy(40);
  const auto ref = plain(p, prompt, o);
  for (int stop_after : {1, 2, 5, 9, 13}) {
    ScriptedSource src(8, p.target->hparams().n_vocab, prompt, ref, 0);
    GenerateStats ss;
    const auto got = speculative(p, src, prompt, o, &ss, stop_after);
    EXPECT_EQ(got, std::vector<int32_t>(ref.begin(), ref.begin() + stop_after));
    EXPECT_EQ(ss.finish_reason, "callback");
  }
}

TEST(SpecDecode, EosInsideBlockStopsLikePlain) {
  // Find a logit bias on an end-of-generation token under which plain greedy decoding stops
  // after a few tokens; speculation with perfect drafts must stop at the same token.
  Pair p;
  const int32_t eos = p.tok->vocab().eos_id >= 0 ? p.tok->vocab().eos_id : p.tok->vocab().eot_id;
  ASSERT_GE(eos, 0);
  int found = 0;
  for (int i = 0; i < 12 && found < 3; ++i)
    for (float bias = 2.0f; bias <= 30.0f; bias += 1.0f) {
      const auto prompt = prompt_of(200 + i);
      GenerateOptions o = greedy(40);
      o.sampling.logit_bias[eos] = bias;
      GenerateStats ps;
      const auto ref = plain(p, prompt, o, &ps);
      if (ps.finish_reason != "stop" || ref.size() < 4) continue;
      ScriptedSource src(16, p.target->hparams().n_vocab, prompt, ref, 0);
      GenerateStats ss;
      EXPECT_EQ(speculative(p, src, prompt, o, &ss), ref);
      EXPECT_EQ(ss.finish_reason, "stop");
      ++found;
      break;
    }
  EXPECT_GT(found, 0) << "no bias made the model stop early; the test did not run";
}

TEST(SpecDecode, GreedyWithQ8KvCacheEqualsPlain) {
  // A q8_0 cache quantizes each token row on its own, so the K/V bytes a verify pass writes for
  // a row are those plain decoding writes for it: speculation stays exact (target and drafter
  // both on q8_0 caches).
  for (const char* arch : {"qwen35", "qwen3"}) {
    Pair p(arch, GgmlType::Q8_0);
    ASSERT_EQ(p.target->options().kv_type, GgmlType::Q8_0);
    DraftModel draft(*p.draft_file, *p.target, 8);
    DFlashSource src(draft, *p.target, 256);
    for (int i = 0; i < 12; ++i) {
      SCOPED_TRACE(std::string(arch) + " prompt " + std::to_string(i));
      const auto prompt = prompt_of(i + 500);
      const GenerateOptions o = greedy(24 + i % 5);
      const auto ref = plain(p, prompt, o);
      EXPECT_EQ(speculative(p, src, prompt, o), ref);
      ScriptedSource good(8, p.target->hparams().n_vocab, prompt, ref, 5);  // long acceptances
      EXPECT_EQ(speculative(p, good, prompt, o), ref);
    }
  }
}

TEST(SpecDecode, AttentionOnlyTargetEqualsPlain) {
  Pair p("qwen3");
  DraftModel draft(*p.draft_file, *p.target, 8);
  DFlashSource src(draft, *p.target, 256);
  for (int i = 0; i < 10; ++i) {
    const auto prompt = prompt_of(i + 300);
    const GenerateOptions o = greedy(24);
    const auto ref = plain(p, prompt, o);
    EXPECT_EQ(speculative(p, src, prompt, o), ref);
    ScriptedSource good(8, p.target->hparams().n_vocab, prompt, ref, 4);
    EXPECT_EQ(speculative(p, good, prompt, o), ref);
  }
}

TEST(SpecDecode, AdaptivePolicyKeepsOutputExact) {
  // With the policy on, speculation may switch itself off (a random drafter is useless) and
  // re-probe; the output must not change.
  Pair p;
  DraftModel draft(*p.draft_file, *p.target, 8);
  DFlashSource src(draft, *p.target, 256);
  const auto prompt = prompt_of(5);
  const GenerateOptions o = greedy(120);
  GenerateStats ss;
  EXPECT_EQ(speculative(p, src, prompt, o, &ss, -1, SpecOptions{true, 16, 0}), plain(p, prompt, o));
  EXPECT_GT(ss.plain_steps, 0) << "the policy never measured plain steps";
}

TEST(SpecDecode, DraftWindowSeesTheLastRowsAndKeepsOutputExact) {
  // A drafter with a window of 8 over 40 context rows (its ring has wrapped several times) must
  // draft what a whole-context drafter drafts from just those 8 rows: attention depends on
  // relative positions only, so shifting every position by 32 changes logits only by rounding.
  Pair p;
  ModelOptions exact_kv;
  exact_kv.kv_type = GgmlType::F32;  // f16 K/V would round keys rotated at different positions differently
  TargetModel tm(*p.target_file, *p.be, exact_kv);
  std::vector<int32_t> ctx;
  for (int i = 0; i < 40; ++i) ctx.push_back(int32_t((i * 29 + 7) % 240 + 5));
  DraftModel windowed(*p.draft_file, tm, 8, 8);
  DraftModel whole(*p.draft_file, tm, 8, 0);
  auto st = tm.make_state(1, 64);
  const int s = st->create();
  Batch b;
  for (int i = 0; i < 40; ++i) b.add(s, i, ctx[size_t(i)], i == 39);
  ForwardOutput out;
  tm.forward(b, *st, out);
  auto ws = windowed.make_state(1, 64), fs = whole.make_state(1, 64);
  const int wseq = ws->create(), fseq = fs->create();
  windowed.ingest(*ws, wseq, tm.features(), 20);  // in two calls: the ring wraps in between
  windowed.ingest(*ws, wseq, tm.features() + size_t(20) * tm.feature_width(), 20);
  whole.ingest(*fs, fseq, tm.features() + size_t(32) * tm.feature_width(), 8);
  std::vector<float> a, c;
  windowed.draft(*ws, wseq, 17, a);
  whole.draft(*fs, fseq, 17, c);
  ASSERT_EQ(a.size(), c.size());
  double max_abs = 0, max_err = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_abs = std::max(max_abs, double(std::abs(c[i])));
    max_err = std::max(max_err, double(std::abs(a[i] - c[i])));
  }
  double max_a = 0;
  for (float x : a) max_a = std::max(max_a, double(std::abs(x)));
  EXPECT_LE(max_err, 1e-3 * max_abs) << "windowed drafter does not see exactly the last 8 rows; max|a| " << max_a;

  // And speculation with a tiny window is still exact.
  DraftModel small_window(*p.draft_file, *p.target, 8, 8);
  DFlashSource src(small_window, *p.target, 256);
  SpecDecoder dec(*p.target, src, p.tok.get(), 256, SpecOptions{false, 64, 0});
  for (int i = 0; i < 6; ++i) {
    const auto prompt = prompt_of(i + 400);
    const GenerateOptions o = greedy(40);
    EXPECT_EQ(speculative(dec, prompt, o), plain(p, prompt, o));
  }
}

// ---- Sampling ----

double chi_square(const std::map<std::vector<int32_t>, int>& counts, const std::map<std::vector<int32_t>, double>& probs,
                  int n, int* df) {
  // Cells with an expected count below 5 are pooled into one.
  double stat = 0, pooled_exp = 0, pooled_obs = 0;
  int cells = 0;
  for (const auto& [key, pr] : probs) {
    const double e = pr * n;
    const auto it = counts.find(key);
    const double o = it == counts.end() ? 0 : it->second;
    if (e < 5) {
      pooled_exp += e;
      pooled_obs += o;
      continue;
    }
    stat += (o - e) * (o - e) / e;
    ++cells;
  }
  for (const auto& [key, c] : counts)
    if (!probs.count(key)) pooled_obs += c;  // outcomes plain sampling can never produce
  if (pooled_exp > 0 || pooled_obs > 0) {
    stat += (pooled_obs - pooled_exp) * (pooled_obs - pooled_exp) / std::max(pooled_exp, 1e-9);
    ++cells;
  }
  *df = cells - 1;
  return stat;
}

TEST(SpecDecode, RejectionRuleReproducesTargetDistribution) {
  // Adversarial pairs over 5 ids: disjoint supports, equal, one-hot q, q mass where p has none.
  const std::vector<std::pair<std::vector<float>, std::vector<float>>> cases = {
      {{0.5f, 0.5f, 0, 0, 0}, {0, 0, 0.3f, 0.3f, 0.4f}},
      {{0.1f, 0.2f, 0.3f, 0.4f, 0}, {0.1f, 0.2f, 0.3f, 0.4f, 0}},
      {{0.25f, 0.25f, 0.25f, 0.25f, 0}, {0, 0, 0, 0, 1.0f}},
      {{0.7f, 0.1f, 0.1f, 0.1f, 0}, {0, 1.0f, 0, 0, 0}},
      {{0.05f, 0.05f, 0.3f, 0.3f, 0.3f}, {0.6f, 0.3f, 0.05f, 0.05f, 0}},
  };
  std::mt19937_64 rng(77);
  const int N = 200000;
  for (size_t c = 0; c < cases.size(); ++c) {
    const auto& [p, q] = cases[c];
    std::vector<int> count(5, 0);
    for (int i = 0; i < N; ++i) {
      const int32_t x = spec::draw(q, rng);
      count[size_t(spec::rejection_step(p, q, x, rng).token)]++;
    }
    double chi = 0;
    int cells = 0;
    for (int k = 0; k < 5; ++k) {
      const double e = double(p[size_t(k)]) * N;
      if (e == 0) {
        EXPECT_EQ(count[size_t(k)], 0) << "case " << c << " emitted id " << k << " that p excludes";
        continue;
      }
      chi += (count[size_t(k)] - e) * (count[size_t(k)] - e) / e;
      ++cells;
    }
    // Chi-square with at most 4 degrees of freedom: P(chi > 30) < 1e-5.
    EXPECT_LT(chi, 30.0) << "case " << c;
  }
}

// The point-proposal rule (drafts that are the drafter's argmax): for every draft id, including
// ids p excludes and an id holding all of p's mass, the emitted token is distributed as p.
TEST(SpecDecode, PointProposalRuleReproducesTargetDistribution) {
  const std::vector<std::vector<float>> ps = {
      {0.5f, 0.5f, 0, 0, 0}, {0.1f, 0.2f, 0.3f, 0.4f, 0}, {0, 0, 1.0f, 0, 0}, {0.7f, 0.1f, 0.1f, 0.1f, 0}};
  std::mt19937_64 rng(78);
  const int N = 100000;
  for (size_t c = 0; c < ps.size(); ++c) {
    const std::vector<float>& p = ps[c];
    for (int32_t x = 0; x < 5; ++x) {
      std::vector<int> count(5, 0);
      int kept = 0;
      for (int i = 0; i < N; ++i) {
        const spec::RejectionStep r = spec::rejection_step_point(p, x, rng);
        count[size_t(r.token)]++;
        kept += r.accepted;
        if (r.accepted) {
          EXPECT_EQ(r.token, x);
        }
      }
      double chi = 0;
      for (int k = 0; k < 5; ++k) {
        const double e = double(p[size_t(k)]) * N;
        if (e == 0) {
          EXPECT_EQ(count[size_t(k)], 0) << "p " << c << ", draft " << x << ": emitted id " << k << " that p excludes";
          continue;
        }
        chi += (count[size_t(k)] - e) * (count[size_t(k)] - e) / e;
      }
      EXPECT_LT(chi, 30.0) << "p " << c << ", draft " << x;  // <= 4 degrees of freedom: P(chi > 30) < 1e-5
      // The draft is kept with probability p(x): 5 sigma of a binomial.
      const double px = p[size_t(x)], sd = std::sqrt(N * px * (1 - px));
      EXPECT_LE(std::fabs(kept - N * px), 5 * sd + 1e-9) << "p " << c << ", draft " << x;
    }
  }
}

TEST(SpecDecode, SampledOutputMatchesPlainDistribution) {
  // Exact distribution of the first three tokens under plain sampling (temperature 1, top-k 4,
  // no penalties): the product of the sampler's per-step distributions along every branch.
  Pair p;
  const auto prompt = prompt_of(9);
  GenerateOptions o;
  o.max_new_tokens = 3;
  o.sampling.temperature = 1.0f;
  o.sampling.top_k = 4;
  o.sampling.top_p = 1.0f;
  o.sampling.min_p = 0.0f;
  std::map<std::vector<int32_t>, double> exact;
  {
    Generator g(*p.target, p.tok.get(), 64);
    std::vector<float> l0, l1, l2;
    Sampler s(o.sampling, p.tok->n_vocab());
    g.prefill(prompt, 64, l0);
    const auto d0 = s.distribution(l0);
    for (int32_t a = 0; a < int32_t(d0.size()); ++a) {
      if (d0[size_t(a)] <= 0) continue;
      g.reset();
      g.prefill(prompt, 64, l0);
      g.decode(a, l1);
      const auto d1 = s.distribution(l1);
      for (int32_t b = 0; b < int32_t(d1.size()); ++b) {
        if (d1[size_t(b)] <= 0) continue;
        g.reset();
        g.prefill(prompt, 64, l0);
        g.decode(a, l1);
        g.decode(b, l2);
        const auto d2 = s.distribution(l2);
        for (int32_t c = 0; c < int32_t(d2.size()); ++c)
          if (d2[size_t(c)] > 0) exact[{a, b, c}] = double(d0[size_t(a)]) * d1[size_t(b)] * d2[size_t(c)];
      }
    }
  }
  ASSERT_EQ(exact.size(), 64u);
  DraftModel draft(*p.draft_file, *p.target, 4);
  DFlashSource random_src(draft, *p.target, 256);
  const int N = 1000;
  for (int which = 0; which < 2; ++which) {
    // A random drafter (mostly rejections, residual draws) and a scripted one proposing the
    // greedy continuation (mostly acceptances).
    std::map<std::vector<int32_t>, int> counts;
    GenerateOptions g = greedy(3);
    const auto greedy_ref = plain(p, prompt, g);
    ScriptedSource scripted(4, p.target->hparams().n_vocab, prompt, greedy_ref, 0);
    DraftSource& src = which == 0 ? static_cast<DraftSource&>(random_src) : scripted;
    for (bool argmax_drafts : {false, true}) {  // sampled drafts, argmax drafts (point proposals)
      counts.clear();
      SpecDecoder dec(*p.target, src, p.tok.get(), 64, SpecOptions{false, 64, 0, argmax_drafts});
      for (int seed = 0; seed < N; ++seed) {
        o.sampling.seed = uint64_t(seed) * 7919 + 1;
        counts[speculative(dec, prompt, o)]++;
      }
      int df = 0;
      const double chi = chi_square(counts, exact, N, &df);
      // df <= 64: the chi-square 1e-5 upper quantile for 64 degrees of freedom is about 120.
      EXPECT_LT(chi, 120.0) << (which == 0 ? "random drafter" : "scripted drafter")
                            << (argmax_drafts ? ", argmax drafts" : ", sampled drafts") << ", df " << df;
    }
  }
}

// ---- Drafter validation ----

TEST(SpecDecode, DrafterForAnotherTargetIsRejected) {
  Pair p;
  TempDir dir;
  const std::string bin = DELTAFLASH_BIN;
  run_command(bin + " make-model --arch qwen35 --shape tiny --hidden 512 --type q8_0 --seed 3 -o " + dir.file("big.gguf"));
  run_command(bin + " make-model --arch qwen35-dflash-draft --target " + dir.file("big.gguf") + " -q -o " + dir.file("d.gguf"));
  auto f = gguf::File::open(dir.file("d.gguf"));
  try {
    DraftModel d(*f, *p.target);
    FAIL() << "a drafter of hidden size 512 loaded for a 256 target";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hidden size"), std::string::npos) << e.what();
  }
  EXPECT_THROW(DraftModel(*p.draft_file, *p.target, 17), Error) << "block wider than trained";
  EXPECT_THROW(DraftModel(*p.draft_file, *p.target, 1), Error) << "block of 1";
}

}  // namespace
}  // namespace df
