// Converted Hugging Face checkpoints in llama.cpp (through the llama-peer harness): every golden
// fixture llama.cpp can run (Qwen3, and Qwen3.5 with linear key head dim == value head dim;
// llama.cpp takes d_v = ssm.state_size, so q35_dk32_dv64 is deltaflash-only) loads, and its
// logits reproduce the float64 logits of transformers, in one batch and token by token.
//
// f32 file, llama.cpp with f32 KV and no flash attention: llama.cpp computes in f32 like we do,
// so the bound is test_convert's: 1e-4 x max|logit| against the float64 reference (measured
// worst: printed below, ~1e-5 relative). A wrong name, layout or transform in the converter
// moves logits by >= 4 (the fixtures' sensitivity numbers).
//
// f16 file: the converter rounds the weights to f16 and both engines also round activations to
// f16 before each product, so both land ~1e-3..1e-2 x max|logit| from transformers (the f16
// weights, not the engines: measured up to 1.1e-2 on q35_deep8, printed below). The tight check
// is engine against engine on the same file: 1e-2 x max|logit| (measured <= 2.5e-3); against
// transformers only 5e-2 x max|logit|, still far below the effect of a wrong layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "gguf/gguf.h"
#include "model/target_model.h"
#include "support/model_runs.h"
#include "support/hf_golden.h"
#include "support/subprocess.h"

namespace df {
namespace {

using test::run_command;
using test::TempDir;

const std::string kData = DELTAFLASH_TEST_DATA;

std::string join(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  const std::vector<double> bd(b.begin(), b.end());
  return test::max_abs_diff(a, bd);
}

std::vector<std::string> llama_runnable_variants() {
  std::vector<std::string> names;
  for (const std::string& n : test::golden_variant_names(kData))
    if (test::load_golden_variant(kData, n).llama_cpp_can_run) names.push_back(n);
  return names;
}

struct TypeCase {
  const char* type;
  double vs_transformers;  // bound on max|llama.cpp - golden|, x max|logit|
  double vs_deltaflash;    // bound on max|llama.cpp - ours| on the same file, x max|logit|
};

class ConvertParity : public ::testing::TestWithParam<std::string> {};

TEST_P(ConvertParity, LlamaCppReproducesTransformers) {
  const test::GoldenVariant g = test::load_golden_variant(kData, GetParam());
  TempDir tmp;
  auto backend = make_cpu_backend(2);
  ModelOptions opt;
  opt.kv_type = GgmlType::F32;
  for (const TypeCase tc : {TypeCase{"f32", 1e-4, 1e-4}, TypeCase{"f16", 5e-2, 1e-2}}) {
    SCOPED_TRACE(tc.type);
    const std::string model = tmp.file(g.name + "-" + tc.type + ".gguf");
    run_command(std::string(DELTAFLASH_BIN) + " convert " + g.dir + " -o " + model + " --type " + tc.type +
                " --vocab toy -q");
    const auto file = gguf::File::open(model);
    TargetModel tm(*file, *backend, opt);
    const double bound = tc.vs_transformers * g.max_abs_logit;
    const double engines_bound = tc.vs_deltaflash * g.max_abs_logit;
    double worst_batch = 0, worst_incr = 0, worst_vs_ours = 0;
    for (size_t i = 0; i < g.sequences.size(); ++i) {
      const test::GoldenSequence& s = g.sequences[i];
      const std::vector<float> ours = test::logits_of_all_positions(tm, s.tokens, int(s.tokens.size()));
      for (const int batch : {int(s.tokens.size()), 1}) {
        const std::string out = tmp.file("peer.f32");
        run_command(std::string(DELTAFLASH_LLAMA_PEER) + " logits " + model + " --tokens " + join(s.tokens) + " --batch " +
                    std::to_string(batch) + " --flash off --kv-type f32 --threads 1 --out " + out);
        const std::vector<float> peer = test::read_f32_file(out);
        ASSERT_EQ(peer.size(), s.logits.size());
        const double d = test::max_abs_diff(peer, s.logits);
        EXPECT_LE(d, bound) << "sequence " << i << ", llama.cpp batch " << batch;
        (batch == 1 ? worst_incr : worst_batch) = std::max(batch == 1 ? worst_incr : worst_batch, d);
        worst_vs_ours = std::max(worst_vs_ours, max_abs_diff(peer, ours));
      }
    }
    EXPECT_LE(worst_vs_ours, engines_bound);
    std::printf("[%s %s] max|logit| %.3f  max|llama.cpp - transformers|: batch %.3g (%.2g rel), incremental %.3g "
                "(%.2g rel); max|llama.cpp - deltaflash| %.3g (%.2g rel); bounds %.3g, %.3g\n",
                g.name.c_str(), tc.type, g.max_abs_logit, worst_batch, worst_batch / g.max_abs_logit, worst_incr,
                worst_incr / g.max_abs_logit, worst_vs_ours, worst_vs_ours / g.max_abs_logit, bound, engines_bound);
  }
}

INSTANTIATE_TEST_SUITE_P(HfGolden, ConvertParity, ::testing::ValuesIn(llama_runnable_variants()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace df
