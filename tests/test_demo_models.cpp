// The committed demo models (models/demo/*.gguf, Q8_0, converted from the checkpoints train/run_demo.py
// trained with transformers) against transformers itself: tests/data/demo/{target,scorer}_golden.json hold,
// for 3 held-out sequences (a code file start, a chat turn, 300 tokens of code), the top-8 ids and
// log-probabilities per position that transformers computed in float64 from the bf16 checkpoint.
// Our engine runs the Q8_0 file on the CPU, in one batch and token by token, and must
//   - pick the same top-1 token wherever transformers' top-1 leads its top-2 by kMargin nats, and
//   - give every stored top-8 id a log-probability within kMaxDeltaLogprob of transformers'.
// The differences come from Q8_0 weights (and the f16 KV cache); see kMaxDeltaLogprob for the measurement.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gguf/gguf.h"
#include "model/target_model.h"
#include "support/model_runs.h"

namespace df {
namespace {

using nlohmann::json;

const std::string kData = std::string(DELTAFLASH_TEST_DATA) + "/demo";
const std::string kModels = std::string(DELTAFLASH_SOURCE_DIR) + "/models/demo";

// Measured on these files (CPU, f16 KV, batch and token by token): max |dlogprob| over the stored top-8
// ids 0.32 (target) and 0.24 (scorer), 0.11 on the top-1 ids; top-1 agreement 100% wherever transformers'
// margin exceeds 0.5 nats; overall 553/556 (target, one batch), 550/556 (token by token), 549/556 (scorer). The same target converted to f32 gives 2e-4
// with `deltaflash logits --kv-type f32`, so the difference is Q8_0 rounding, not the forward pass.
// Bound 0.5: 1.5x the worst measured value.
constexpr double kMaxDeltaLogprob = 0.5;
constexpr double kMargin = 0.5;

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  return json::parse(in);
}

std::vector<double> log_softmax_row(const float* x, int n) {
  double m = -INFINITY;
  for (int i = 0; i < n; ++i) m = std::max(m, double(x[i]));
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(double(x[i]) - m);
  const double lse = m + std::log(s);
  std::vector<double> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out[size_t(i)] = double(x[i]) - lse;
  return out;
}

struct Case {
  const char* gguf;
  const char* golden;
};

class DemoModel : public ::testing::TestWithParam<Case> {};

TEST_P(DemoModel, MatchesTransformersGolden) {
  const Case c = GetParam();
  const auto file = gguf::File::open(kModels + "/" + c.gguf);
  auto backend = make_cpu_backend(2);
  TargetModel tm(*file, *backend, ModelOptions{});
  const int n_vocab = int(tm.hparams().n_vocab);
  const json g = read_json(kData + "/" + c.golden);
  for (const json& s : g["sequences"]) {
    const std::vector<int32_t> tokens = s["tokens"].get<std::vector<int32_t>>();
    const auto top_ids = s["top_ids"].get<std::vector<std::vector<int32_t>>>();
    const auto top_lp = s["top_logprobs"].get<std::vector<std::vector<double>>>();
    for (int batch : {int(tokens.size()), 1}) {
      const std::vector<float> logits = test::logits_of_all_positions(tm, tokens, batch);
      ASSERT_EQ(logits.size(), tokens.size() * size_t(n_vocab));
      double worst = 0;
      int agree = 0, confident = 0, confident_agree = 0;
      for (size_t t = 0; t < tokens.size(); ++t) {
        const std::vector<double> lp = log_softmax_row(logits.data() + t * size_t(n_vocab), n_vocab);
        const int ours = int(std::max_element(lp.begin(), lp.end()) - lp.begin());
        agree += ours == top_ids[t][0];
        if (top_lp[t][0] - top_lp[t][1] > kMargin) {
          ++confident;
          confident_agree += ours == top_ids[t][0];
          EXPECT_EQ(ours, top_ids[t][0]) << s["name"].get<std::string>() << " position " << t << " batch " << batch;
        }
        for (size_t k = 0; k < top_ids[t].size(); ++k) {
          worst = std::max(worst, std::abs(lp[size_t(top_ids[t][k])] - top_lp[t][k]));
        }
      }
      EXPECT_LE(worst, kMaxDeltaLogprob) << s["name"].get<std::string>() << " batch " << batch;
      std::printf("[%s %s batch %d] %zu positions: top-1 agreement %d/%zu (%d/%d where the margin > %.2f), "
                  "max |dlogprob| over top-8 %.4f (bound %.4f)\n",
                  c.gguf, s["name"].get<std::string>().c_str(), batch, tokens.size(), agree, tokens.size(),
                  confident_agree, confident, kMargin, worst, kMaxDeltaLogprob);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Demo, DemoModel,
                         ::testing::Values(Case{"qwen35-demo-target-q8_0.gguf", "target_golden.json"},
                                           Case{"qwen35-demo-scorer-q8_0.gguf", "scorer_golden.json"}),
                         [](const auto& info) { return std::string(info.index == 0 ? "Target" : "Scorer"); });

}  // namespace
}  // namespace df
