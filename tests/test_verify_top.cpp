// Speculative verification on top candidates (spec/verify.h: SparseDist, choose_drafts_top,
// walk_block_top) against the dense rules on full rows: for random drafter and target logits
// (with ties and vocabulary padding), the same drafts, the same q values, the same walk (kept
// rows, next token, accepted tokens) and the same random numbers consumed, greedy and sampled,
// with drawn and with point proposals, over temperatures and filters. The dense rules are the
// ones tests/test_spec_decode.cpp checks for exactness against plain sampling.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "engine/generator.h"
#include "engine/sampler.h"
#include "spec/draft_source.h"
#include "spec/spec_decoder.h"
#include "spec/verify.h"
#include "support/demo_pair.h"

namespace df {
namespace {

constexpr size_t kVocab = 3000;
constexpr int kSampleable = 2990;  // ids past it are padding: never drawn
constexpr size_t kTop = 64;

// The k largest of the sampleable ids, by logit descending, lower id first (Backend::top_k_rows).
void top_of(std::span<const float> row, std::vector<int32_t>& ids, std::vector<float>& logits) {
  std::vector<int32_t> order(kSampleable);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + kTop, order.end(),
                    [&](int32_t a, int32_t b) { return row[size_t(a)] > row[size_t(b)] || (row[size_t(a)] == row[size_t(b)] && a < b); });
  for (size_t i = 0; i < kTop; ++i) ids.push_back(order[i]), logits.push_back(row[size_t(order[i])]);
}

TEST(VerifyTop, TopCandidateRulesEqualTheDenseRules) {
  std::mt19937_64 gen(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  int cases = 0, accepted_total = 0, rejections = 0;
  for (float temp : {0.0f, 0.7f, 1.3f})
    for (int top_k : {20, 40})
      for (float top_p : {1.0f, 0.9f})
        for (float min_p : {0.0f, 0.05f})
          for (int point = 0; point < 2; ++point)
            for (int seed = 0; seed < 12; ++seed) {
              SamplingParams sp;
              sp.temperature = temp, sp.top_k = top_k, sp.top_p = top_p, sp.min_p = min_p;
              const size_t n = 8;  // drafts; n + 1 verify rows
              std::vector<float> draft(n * kVocab), target((n + 1) * kVocab);
              for (float& v : draft) v = std::round(normal(gen) * 4.0f) / 4.0f;  // quarter steps: ties
              for (size_t i = 0; i < (n + 1) * kVocab; ++i)
                target[i] = (i < n * kVocab ? draft[i] : 0.0f) + std::round(normal(gen) * 2.0f) / 4.0f;
              std::vector<int32_t> dids, tids;
              std::vector<float> dlog, tlog;
              for (size_t i = 0; i < n; ++i) top_of(std::span<const float>(draft).subspan(i * kVocab, kVocab), dids, dlog);
              for (size_t i = 0; i <= n; ++i)
                top_of(std::span<const float>(target).subspan(i * kVocab, kVocab), tids, tlog);
              const spec::TopRows dtop{dids, dlog, kTop}, ttop{tids, tlog, kTop};
              const bool greedy = temp <= 0;

              // Drafts: dense and from the top candidates, same random numbers.
              Sampler ds_dense(spec::draft_sampling(sp), kSampleable), ds_top(spec::draft_sampling(sp), kSampleable);
              std::mt19937_64 rd(uint64_t(seed) * 7 + 1), rt(uint64_t(seed) * 7 + 1);
              std::vector<int32_t> drafts_dense(n), drafts_top(n);
              std::vector<std::vector<float>> qs_dense;
              std::vector<spec::SparseDist> qs_top;
              spec::choose_drafts(draft, kVocab, kSampleable, greedy, ds_dense, rd, drafts_dense, qs_dense);
              spec::choose_drafts_top(dtop, greedy, ds_top, rt, drafts_top, qs_top);
              ASSERT_EQ(drafts_dense, drafts_top) << "temp " << temp << " seed " << seed;
              ASSERT_EQ(qs_dense.size(), qs_top.size());
              for (size_t i = 0; i < qs_top.size(); ++i)
                for (size_t v = 0; v < kVocab; ++v)
                  ASSERT_EQ(qs_dense[i][v], qs_top[i].at(int32_t(v))) << "q of draft " << i << " at id " << v;
              if (point) qs_dense.clear(), qs_top.clear();  // the drafts as point proposals

              // The walk: same kept rows, next token, accepted tokens and random numbers.
              Sampler s_dense(sp, kSampleable), s_top(sp, kSampleable);
              std::vector<int32_t> acc_dense, acc_top;
              const spec::BlockWalk wd = spec::walk_block(target, kVocab, drafts_dense, qs_dense, greedy, s_dense, rd,
                                                          [&](int32_t t) { return acc_dense.push_back(t), true; });
              const spec::BlockWalk wt = spec::walk_block_top(ttop, drafts_top, qs_top, greedy, s_top, rt,
                                                              [&](int32_t t) { return acc_top.push_back(t), true; });
              ASSERT_EQ(wd.kept, wt.kept) << "temp " << temp << " top_k " << top_k << " seed " << seed;
              ASSERT_EQ(wd.next_row, wt.next_row);
              ASSERT_EQ(wd.next, wt.next);
              ASSERT_EQ(acc_dense, acc_top);
              ASSERT_EQ(rd(), rt()) << "the two walks drew different random numbers";
              ++cases;
              accepted_total += wd.kept - 1;
              rejections += wd.next.has_value();
            }
  EXPECT_EQ(cases, 3 * 2 * 2 * 2 * 2 * 12);
  EXPECT_GT(accepted_total, cases / 2) << "too few accepted drafts to test the walk";
  EXPECT_GT(rejections, cases / 4) << "too few rejections to test the residual draw";
}

// SpecDecoder with top candidates (GenerateOptions::device_top_k) on the demo pair: sampled
// generations equal those from full logits token for token (same random numbers), at several
// temperatures, filters and seeds, with drawn and with argmax drafts; and the speculative run
// still commits accepted drafts.
TEST(VerifyTop, SpecDecoderOnTopCandidatesEqualsFullLogits) {
  auto be = make_cpu_backend(1);
  test::DemoPair demo(*be);
  const Tokenizer& tok = demo.tok;
  constexpr int kCtx = 384;
  DFlashSource source(demo.draft, demo.target, kCtx);
  const std::vector<int32_t> prompt = tok.encode("def quicksort(xs):\n    \"\"\"Sort a list.\"\"\"\n", false);
  int accepted = 0;
  for (int argmax_drafts = 0; argmax_drafts < 2; ++argmax_drafts) {
    SpecOptions so{false, 64, 0};  // always the full block
    so.argmax_drafts = argmax_drafts == 1;
    SpecDecoder spec(demo.target, source, &tok, kCtx, so);
    for (float temp : {0.7f, 1.1f})
      for (int top_k : {20, 40})
        for (uint64_t seed : {1u, 2u, 3u}) {
          GenerateOptions o;
          o.max_new_tokens = 40;
          o.stop_at_eog = false;
          o.sampling.temperature = temp;
          o.sampling.top_k = top_k;
          o.sampling.seed = seed;
          std::vector<int32_t> got[2];
          GenerateStats st[2];
          for (int on = 0; on < 2; ++on) {
            o.device_top_k = on == 1;
            st[on] = spec.generate(prompt, o, [&](int32_t t) { return got[on].push_back(t), true; });
          }
          EXPECT_EQ(got[0], got[1]) << "temp " << temp << " top_k " << top_k << " seed " << seed << " argmax drafts "
                                    << argmax_drafts;
          EXPECT_EQ(st[0].accepted_tokens, st[1].accepted_tokens);
          accepted += st[1].accepted_tokens;
        }
  }
  EXPECT_GT(accepted, 20) << "too few accepted drafts to test the walk";
}

}  // namespace
}  // namespace df
