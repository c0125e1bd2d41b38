// ProfilingBackend over the CPU backend: it forwards every op unchanged (a model's logits are
// bit-identical with and without it, in every mode), counts calls and matmul weight bytes per
// op kind (weight type x rows bucket), times ops only in time mode, and clears on reset().
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "backend/profiling_backend.h"
#include "gguf/gguf.h"
#include "model/target_model.h"
#include "modelgen/make_model.h"
#include "quant/quantize.h"
#include "support/subprocess.h"

namespace df {
namespace {

using Mode = ProfilingBackend::Mode;

const ProfilingBackend::Entry* find(const std::vector<ProfilingBackend::Entry>& es, const std::string& op) {
  for (const auto& e : es)
    if (e.op == op) return &e;
  return nullptr;
}

TEST(ProfilingBackend, CountsMatmulsByTypeAndRowsAndForwardsResults) {
  ProfilingBackend prof(make_cpu_backend(1));
  auto plain = make_cpu_backend(1);
  EXPECT_STREQ(prof.name(), "cpu");
  const int64_t n_in = 256, n_out = 9;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  std::vector<float> wf(size_t(n_in * n_out));
  for (auto& f : wf) f = nd(rng);
  const size_t row_bytes = row_size(GgmlType::Q8_0, n_in);
  std::vector<uint8_t> wq(row_bytes * size_t(n_out));
  for (int64_t o = 0; o < n_out; ++o) quantize_row(GgmlType::Q8_0, wf.data() + o * n_in, wq.data() + size_t(o) * row_bytes, n_in);
  const Weight w{GgmlType::Q8_0, n_in, n_out, wq.data(), row_bytes};
  std::vector<float> x(size_t(20 * n_in));
  for (auto& f : x) f = nd(rng);

  prof.set_mode(Mode::kOff);
  std::vector<float> y(size_t(20 * n_out)), want(y.size());
  prof.matmul(w, x.data(), 1, y.data());
  EXPECT_TRUE(prof.entries().empty()) << "off: nothing counted";

  prof.set_mode(Mode::kCount);
  for (int rows : {1, 5, 20, 16, 2}) {
    prof.matmul(w, x.data(), rows, y.data());
    plain->matmul(w, x.data(), rows, want.data());
    EXPECT_EQ(0, std::memcmp(y.data(), want.data(), size_t(rows * n_out) * sizeof(float))) << rows << " rows";
  }
  std::vector<float> xn(size_t(3 * n_in));
  prof.rms_norm(x.data(), size_t(n_in), wf.data(), 3, int(n_in), 1e-6f, xn.data(), size_t(n_in));
  auto es = prof.entries();
  const auto* r1 = find(es, "matmul q8_0 r1 w<4MiB");
  const auto* r16 = find(es, "matmul q8_0 r2-16 w<4MiB");
  const auto* rbig = find(es, "matmul q8_0 r>16 w<4MiB");
  const auto* norm = find(es, "rms_norm");
  ASSERT_TRUE(r1 && r16 && rbig && norm);
  EXPECT_EQ(r1->calls, 1);
  EXPECT_EQ(r16->calls, 3);
  EXPECT_EQ(rbig->calls, 1);
  EXPECT_EQ(r16->group, "matmul");
  EXPECT_EQ(norm->group, "norms");
  EXPECT_DOUBLE_EQ(r16->weight_bytes, 3.0 * double(n_out) * double(row_bytes));  // once per call, whatever the rows
  EXPECT_DOUBLE_EQ(prof.total_weight_bytes(), 5.0 * double(n_out) * double(row_bytes));
  EXPECT_EQ(prof.total_seconds(), 0.0) << "count mode times nothing";

  prof.reset();
  EXPECT_TRUE(prof.entries().empty());
  prof.set_mode(Mode::kTime);
  for (int i = 0; i < 3; ++i) prof.matmul(w, x.data(), 16, y.data());
  es = prof.entries();
  ASSERT_EQ(es.size(), 1u);
  EXPECT_EQ(es[0].calls, 3);
  EXPECT_GT(es[0].seconds, 0.0);
  EXPECT_NEAR(prof.total_seconds(), es[0].seconds, 1e-12);
}

// A whole model through the profiler: identical logits in every mode, weights read once per
// forward whatever its rows, and every matmul call counted in the right rows bucket.
TEST(ProfilingBackend, ModelForwardIsUnchanged) {
  test::TempDir dir;
  MakeModelOptions mo;
  mo.arch = "qwen35";
  mo.shape = "tiny";
  mo.type = "mix-q4_k_m";
  mo.seed = 3;
  mo.output = dir.file("m.gguf");
  mo.log = [](const std::string&) {};
  make_model(mo);
  auto file = gguf::File::open(mo.output);
  auto cpu = make_cpu_backend(2);
  ProfilingBackend prof(make_cpu_backend(2));
  TargetModel plain(*file, *cpu, ModelOptions{}), wrapped(*file, prof, ModelOptions{});
  auto run = [](TargetModel& tm, int rows) {
    auto st = tm.make_state(1, 64);
    const int seq = st->create();
    Batch b;
    for (int i = 0; i < rows; ++i) b.add(seq, i, (i * 31 + 7) % tm.hparams().n_vocab, true);
    ForwardOutput out;
    tm.forward(b, *st, out);
    return out.logits;
  };
  double bytes[2] = {0, 0};
  int64_t matmuls[2] = {0, 0};
  const int widths[2] = {1, 5};
  for (int k = 0; k < 2; ++k) {
    for (Mode mode : {Mode::kOff, Mode::kCount, Mode::kTime}) {
      prof.reset();
      prof.set_mode(mode);
      const auto got = run(wrapped, widths[k]);
      prof.set_mode(Mode::kOff);
      const auto want = run(plain, widths[k]);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
          << widths[k] << " rows, mode " << int(mode);
      if (mode != Mode::kCount) continue;
      for (const auto& e : prof.entries()) {
        if (e.group != "matmul") continue;
        bytes[k] += e.weight_bytes;
        matmuls[k] += e.calls;
        EXPECT_NE(e.op.find(widths[k] == 1 ? " r1 " : " r2-16 "), std::string::npos) << e.op;
      }
    }
  }
  EXPECT_GT(bytes[0], 0.0);
  EXPECT_EQ(bytes[0], bytes[1]) << "weights are read once per forward, whatever its rows";
  EXPECT_EQ(matmuls[0], matmuls[1]);
}

}  // namespace
}  // namespace df
