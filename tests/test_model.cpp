// Model-level properties that need no peer: the chunked (prefill) and recurrent (decode)
// DeltaNet paths give the same logits through the whole model; an MTP block stored in the file
// does not change the main model's output; bad batches are rejected without touching state.
#include <gtest/gtest.h>

#include <cmath>

#include "gguf/gguf.h"
#include "model/target_model.h"
#include "support/model_runs.h"
#include "support/subprocess.h"
#include "util/error.h"

namespace df {
namespace {

using test::run_command;
using test::TempDir;

TEST(Model, MtpBlockDoesNotChangeMainModel) {
  TempDir dir;
  run_command(std::string(DELTAFLASH_BIN) + " make-model --arch qwen35 --shape tiny --type f32 --seed 9 -o " + dir.file("a.gguf"));
  run_command(std::string(DELTAFLASH_BIN) + " make-model --arch qwen35 --shape tiny --type f32 --seed 9 --nextn 1 -o " +
              dir.file("b.gguf"));
  auto fa = gguf::File::open(dir.file("a.gguf"));
  auto fb = gguf::File::open(dir.file("b.gguf"));
  auto be = make_cpu_backend(2);
  TargetModel ma(*fa, *be, ModelOptions{}), mb(*fb, *be, ModelOptions{});
  const std::string mtp = "blk." + std::to_string(ma.hparams().n_layer) + ".nextn.eh_proj.weight";
  ASSERT_NE(fb->find_tensor(mtp), nullptr) << "make-model wrote no MTP block";
  EXPECT_EQ(mb.hparams().n_layer, ma.hparams().n_layer);
  const std::vector<int32_t> toks = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5};
  EXPECT_EQ(test::logits_of_all_positions(ma, toks, 4), test::logits_of_all_positions(mb, toks, 4));
}

TEST(Model, ChunkedPrefillMatchesTokenByTokenDecode) {
  TempDir dir;
  run_command(std::string(DELTAFLASH_BIN) + " make-model --arch qwen35 --shape tiny --type f32 --seed 4 -o " + dir.file("m.gguf"));
  auto f = gguf::File::open(dir.file("m.gguf"));
  auto be = make_cpu_backend(2);
  ModelOptions opt;
  opt.max_batch_rows = 200;
  TargetModel tm(*f, *be, opt);
  std::vector<int32_t> toks(150);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = int32_t((i * 37 + 11) % 200);
  const auto a = test::logits_of_all_positions(tm, toks, 150);  // chunked DeltaNet over 3 chunks of 64
  const auto b = test::logits_of_all_positions(tm, toks, 1);    // recurrent, one token per forward
  ASSERT_EQ(a.size(), b.size());
  double max_rel = 0;
  for (size_t i = 0; i < a.size(); ++i) max_rel = std::max(max_rel, std::abs(double(a[i]) - b[i]) / (1 + std::abs(double(b[i]))));
  // Only float summation order differs (the 8-bit activation quantization sees the same
  // inputs up to round-off), so the logits agree to ~1e-4.
  EXPECT_LT(max_rel, 2e-3);
}

TEST(Model, TwoSequencesInOneBatchMatchSeparateRuns) {
  // The Batch API carries several sequences; each segment must see only its own state.
  TempDir dir;
  run_command(std::string(DELTAFLASH_BIN) + " make-model --arch qwen35 --shape tiny --type q8_0 --seed 8 -o " + dir.file("m.gguf"));
  auto f = gguf::File::open(dir.file("m.gguf"));
  auto be = make_cpu_backend(2);
  TargetModel tm(*f, *be, ModelOptions{});
  const std::vector<int32_t> x = {5, 6, 7, 8, 9, 10, 11}, y = {100, 90, 80};
  const auto ax = test::logits_of_all_positions(tm, x, 7), ay = test::logits_of_all_positions(tm, y, 3);
  auto st = tm.make_state(2, 32);
  const int sx = st->create(), sy = st->create();
  Batch b;
  ForwardOutput out;
  for (int i = 0; i < 4; ++i) b.add(sx, i, x[size_t(i)], true);
  for (int i = 0; i < 3; ++i) b.add(sy, i, y[size_t(i)], true);
  tm.forward(b, *st, out);
  std::vector<float> got_x(out.logits.begin(), out.logits.begin() + 4 * tm.hparams().n_vocab);
  std::vector<float> got_y(out.logits.begin() + 4 * tm.hparams().n_vocab, out.logits.end());
  b.clear();
  for (int i = 4; i < 7; ++i) b.add(sx, i, x[size_t(i)], true);
  tm.forward(b, *st, out);
  got_x.insert(got_x.end(), out.logits.begin(), out.logits.end());
  ASSERT_EQ(got_x.size(), ax.size());
  ASSERT_EQ(got_y.size(), ay.size());
  for (size_t i = 0; i < ax.size(); ++i) ASSERT_NEAR(got_x[i], ax[i], 1e-3f * (1 + std::abs(ax[i])));
  for (size_t i = 0; i < ay.size(); ++i) ASSERT_NEAR(got_y[i], ay[i], 1e-3f * (1 + std::abs(ay[i])));
}

TEST(Model, InvalidBatchesAreRejected) {
  TempDir dir;
  run_command(std::string(DELTAFLASH_BIN) + " make-model --arch qwen35 --shape tiny --type q8_0 --seed 4 -o " + dir.file("m.gguf"));
  auto f = gguf::File::open(dir.file("m.gguf"));
  auto be = make_cpu_backend(1);
  TargetModel tm(*f, *be, ModelOptions{});
  auto st = tm.make_state(2, 64);
  const int s0 = st->create();
  Batch b;
  ForwardOutput out;
  b.add(s0, 1, 5, true);  // must start at position 0
  EXPECT_THROW(tm.forward(b, *st, out), Error);
  b.clear();
  b.add(s0, 0, 5, false);
  b.add(s0, 2, 5, true);  // gap
  EXPECT_THROW(tm.forward(b, *st, out), Error);
  b.clear();
  b.add(s0, 0, -3, true);  // bad token
  EXPECT_THROW(tm.forward(b, *st, out), Error);
  b.clear();
  for (int i = 0; i < 65; ++i) b.add(s0, i, 5, false);  // over the context
  EXPECT_THROW(tm.forward(b, *st, out), Error);
  EXPECT_EQ(st->get(s0).n_past, 0);
  b.clear();
  b.add(s0, 0, 5, true);
  tm.forward(b, *st, out);
  EXPECT_EQ(st->get(s0).n_past, 1);
}

}  // namespace
}  // namespace df
