// Speculative segments and their rollback (TargetModel::commit): after verifying B rows and
// keeping k of them, every piece of state — each DeltaNet layer's delta-rule state and conv
// window, the committed KV rows, n_past — equals the state after feeding those k tokens plainly,
// for every k; the next token's logits agree bit for bit. Also the feature capture a drafter
// reads: the captured rows equal the layer outputs of an ordinary forward.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "gguf/gguf.h"
#include "model/target_model.h"
#include "support/subprocess.h"
#include "util/error.h"
#include "util/half.h"

namespace df {
namespace {

using test::run_command;
using test::TempDir;

struct Fixture {
  TempDir dir;
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<Backend> be;
  std::unique_ptr<TargetModel> tm;
  explicit Fixture(const std::string& arch, const std::string& type = "q8_0") {
    run_command(std::string(DELTAFLASH_BIN) + " make-model --arch " + arch + " --shape tiny --type " + type +
                " --seed 21 -o " + dir.file("m.gguf"));
    file = gguf::File::open(dir.file("m.gguf"));
    be = make_cpu_backend(1);
    tm = std::make_unique<TargetModel>(*file, *be, ModelOptions{});
  }
};

std::vector<int32_t> tokens(int n, int salt) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t((i * 37 + salt * 11 + 5) % 200 + 3));
  return t;
}

void feed(TargetModel& tm, SequenceStore& st, int seq, const std::vector<int32_t>& toks, ForwardOutput& out) {
  Batch b;
  const int p0 = st.get(seq).n_past;
  for (size_t i = 0; i < toks.size(); ++i) b.add(seq, p0 + int(i), toks[i], i + 1 == toks.size());
  tm.forward(b, st, out);
}

// Everything a sequence's future depends on, read back from the pools.
std::vector<uint8_t> snapshot(const TargetModel& tm, const SequenceStore& st, int seq) {
  std::vector<uint8_t> bytes;
  auto put = [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), b, b + n);
  };
  const Sequence& q = const_cast<SequenceStore&>(st).get(seq);
  put(&q.n_past, sizeof(q.n_past));
  if (RecurrentPool* rec = st.recurrent())
    for (int l = 0; l < tm.n_recurrent_layers(); ++l) {
      put(rec->state(q.recurrent_slot, l), rec->state_floats() * sizeof(float));
      put(rec->conv(q.recurrent_slot, l), rec->conv_floats() * sizeof(float));
    }
  if (KvPool* kv = st.kv())
    for (int l = 0; l < tm.n_attention_layers(); ++l) {
      const KvLayerView v = kv->layer(l);
      const size_t tok_bytes = v.token_stride() * (v.type == GgmlType::F16 ? 2 : 4);
      for (int p = 0; p < q.n_past; ++p) {
        const size_t off = (size_t(q.block_table[size_t(p / v.block_tokens)]) * v.block_tokens + p % v.block_tokens) * tok_bytes;
        put(static_cast<const uint8_t*>(v.k) + off, tok_bytes);
        put(static_cast<const uint8_t*>(v.v) + off, tok_bytes);
      }
    }
  return bytes;
}

void check_rollback(const std::string& arch) {
  Fixture fx(arch);
  TargetModel& tm = *fx.tm;
  const int B = 8;
  const auto prompt = tokens(13, 1), block = tokens(B, 2), next = tokens(1, 3);
  for (int k = 1; k <= B; ++k) {
    SCOPED_TRACE(arch + ": keep " + std::to_string(k) + " of " + std::to_string(B));
    ForwardOutput out_spec, out_plain;
    auto st_spec = tm.make_state(1, 64, B);
    auto st_plain = tm.make_state(1, 64);
    const int a = st_spec->create(), b = st_plain->create();
    feed(tm, *st_spec, a, prompt, out_spec);
    feed(tm, *st_plain, b, prompt, out_plain);

    Batch verify;
    for (int i = 0; i < B; ++i) verify.add_speculative(a, int(prompt.size()) + i, block[size_t(i)]);
    tm.forward(verify, *st_spec, out_spec);
    EXPECT_THROW(feed(tm, *st_spec, a, next, out_spec), Error) << "a forward before commit must be refused";
    tm.commit(*st_spec, a, k);

    feed(tm, *st_plain, b, std::vector<int32_t>(block.begin(), block.begin() + k), out_plain);
    EXPECT_EQ(st_spec->get(a).n_past, int(prompt.size()) + k);
    EXPECT_TRUE(snapshot(tm, *st_spec, a) == snapshot(tm, *st_plain, b)) << "state differs from plain feeding";

    feed(tm, *st_spec, a, next, out_spec);
    feed(tm, *st_plain, b, next, out_plain);
    ASSERT_EQ(out_spec.logits.size(), out_plain.logits.size());
    EXPECT_EQ(0, std::memcmp(out_spec.logits.data(), out_plain.logits.data(), out_plain.logits.size() * sizeof(float)))
        << "next-token logits differ";
  }
}

TEST(SpecState, CommitEqualsPlainFeedingHybrid) { check_rollback("qwen35"); }
TEST(SpecState, CommitEqualsPlainFeedingAttentionOnly) { check_rollback("qwen3"); }

TEST(SpecState, VerifyLogitsEqualPlainDecodeLogits) {
  // Greedy speculation is exact only if a verify row's logits are the logits plain decoding
  // computes at that position: compare each of the 8 verify rows with a one-row decode.
  Fixture fx("qwen35");
  TargetModel& tm = *fx.tm;
  const auto prompt = tokens(9, 4), block = tokens(8, 5);
  auto st_spec = tm.make_state(1, 64, 8);
  auto st_plain = tm.make_state(1, 64);
  const int a = st_spec->create(), b = st_plain->create();
  ForwardOutput os, op;
  feed(tm, *st_spec, a, prompt, os);
  feed(tm, *st_plain, b, prompt, op);
  Batch verify;
  for (int i = 0; i < 8; ++i) verify.add_speculative(a, int(prompt.size()) + i, block[size_t(i)]);
  tm.forward(verify, *st_spec, os);
  const size_t V = size_t(tm.hparams().n_vocab);
  ASSERT_EQ(os.logits.size(), 8 * V);
  for (int i = 0; i < 8; ++i) {
    feed(tm, *st_plain, b, {block[size_t(i)]}, op);
    EXPECT_EQ(0, std::memcmp(os.logits.data() + size_t(i) * V, op.logits.data(), V * sizeof(float))) << "row " << i;
  }
}

TEST(SpecState, BadCommitsAndOversizedSegmentsAreRejected) {
  Fixture fx("qwen35");
  TargetModel& tm = *fx.tm;
  auto st = tm.make_state(1, 64, 4);
  const int a = st->create();
  ForwardOutput out;
  EXPECT_THROW(tm.commit(*st, a, 1), Error) << "nothing to commit";
  Batch v;
  for (int i = 0; i < 5; ++i) v.add_speculative(a, i, 7);
  EXPECT_THROW(tm.forward(v, *st, out), Error) << "5 rows > 4 checkpoint rows";
  EXPECT_EQ(st->get(a).n_past, 0);
  v.clear();
  for (int i = 0; i < 4; ++i) v.add_speculative(a, i, 7);
  tm.forward(v, *st, out);
  EXPECT_THROW(tm.commit(*st, a, 0), Error);
  EXPECT_THROW(tm.commit(*st, a, 5), Error);
  tm.commit(*st, a, 2);
  EXPECT_EQ(st->get(a).n_past, 2);
}

TEST(SpecState, CapturedFeaturesAreLayerOutputs) {
  // Capture layers {0, 2}: the captured row r holds [h_0(r) | h_2(r)]. Reference: a model cut to
  // fewer layers is not available, so use the identity that h_{L-1} (the last layer's output)
  // fed through output_norm + LM head gives the model's logits.
  Fixture fx("qwen35", "f32");
  TargetModel& tm = *fx.tm;
  const int last = tm.hparams().n_layer - 1;
  tm.set_feature_layers({0, last});
  ASSERT_EQ(tm.feature_width(), 2 * tm.hparams().n_embd);
  auto st = tm.make_state(1, 64);
  const int a = st->create();
  ForwardOutput out;
  const auto prompt = tokens(5, 6);
  feed(tm, *st, a, prompt, out);
  const size_t E = size_t(tm.hparams().n_embd), W = size_t(tm.feature_width());
  std::vector<float> feats(prompt.size() * W);
  tm.backend().download(feats.data(), tm.features(), feats.size() * sizeof(float));
  // Logits of the last row, recomputed in double from the captured last-layer output.
  const float* h = feats.data() + (prompt.size() - 1) * W + E;
  const auto* norm_w = fx.file->find_tensor("output_norm.weight");
  ASSERT_NE(norm_w, nullptr);
  const float* nw = reinterpret_cast<const float*>(norm_w->data);
  double ss = 0;
  for (size_t i = 0; i < E; ++i) ss += double(h[i]) * h[i];
  const double inv = 1.0 / std::sqrt(ss / double(E) + double(tm.hparams().rms_eps));
  const auto* out_w = fx.file->find_tensor("output.weight");
  const auto* emb_w = fx.file->find_tensor("token_embd.weight");
  const auto* head = out_w ? out_w : emb_w;
  const float* W_out = reinterpret_cast<const float*>(head->data);
  const size_t V = size_t(tm.hparams().n_vocab);
  double max_err = 0, max_abs = 0;
  for (size_t v = 0; v < V; ++v) {
    double acc = 0;
    for (size_t i = 0; i < E; ++i) acc += double(W_out[v * E + i]) * double(h[i]) * inv * double(nw[i]);
    max_err = std::max(max_err, std::abs(acc - double(out.logits[v])));
    max_abs = std::max(max_abs, std::abs(acc));
  }
  EXPECT_LE(max_err, 1e-4 * max_abs) << "logits from the captured last layer disagree with the model's";
  // Layer 0's capture is not the embedding (it went through a layer) and not the last layer.
  const float* h0 = feats.data() + (prompt.size() - 1) * W;
  EXPECT_NE(0, std::memcmp(h0, h, E * sizeof(float)));
}

}  // namespace
}  // namespace df
