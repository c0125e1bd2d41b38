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
  EXPECT_THROW(tm.forward(v, *st, out), Error) << "5 rows > room for 4 speculative rows";
  EXPECT_EQ(st->get(a).n_past, 0);
  v.clear();
  for (int i = 0; i < 4; ++i) v.add_speculative(a, i, 7);
  tm.forward(v, *st, out);
  EXPECT_THROW(tm.commit(*st, a, 0), Error);
  EXPECT_THROW(tm.commit(*st, a, 5), Error);
  tm.commit(*st, a, 2);
  EXPECT_EQ(st->get(a).n_past, 2);
}

// A verify block whose drafts are read from backend memory (Batch::add_speculative_from, as
// greedy drafts that stay on the device) computes the logits of the same block given on the
// host, bit for bit, and its argmax ids left in backend memory (ForwardOutput::greedy_to) are
// the ids greedy_only returns; the rows after the ids in that memory are left alone.
TEST(SpecState, DeviceTokensEqualHostTokens) {
  Fixture fx("qwen35");
  TargetModel& tm = *fx.tm;
  Backend& be = *fx.be;
  const auto prompt = tokens(9, 6), block = tokens(8, 7);
  const int V = tm.hparams().n_vocab;
  int32_t* dev = static_cast<int32_t*>(be.alloc(32 * sizeof(int32_t)));
  const std::vector<int32_t> poison(32, -5);
  for (int pass = 0; pass < 3; ++pass) {  // logits; greedy ids; ids to backend memory
    SCOPED_TRACE("pass " + std::to_string(pass));
    auto st_host = tm.make_state(1, 64, 8), st_dev = tm.make_state(1, 64, 8);
    const int a = st_host->create(), b = st_dev->create();
    ForwardOutput oh, od;
    feed(tm, *st_host, a, prompt, oh);
    feed(tm, *st_dev, b, prompt, od);
    be.upload(dev, poison.data(), poison.size() * sizeof(int32_t));
    be.upload(dev + 3, block.data() + 1, 7 * sizeof(int32_t));  // the drafts, as a drafter leaves them
    Batch vh, vd;
    for (int i = 0; i < 8; ++i) vh.add_speculative(a, int(prompt.size()) + i, block[size_t(i)]);
    vd.add_speculative(b, int(prompt.size()), block[0]);
    vd.add_speculative_from(b, int(prompt.size()) + 1, dev + 3, 7);
    ASSERT_EQ(vd.rows.size(), 8u);
    EXPECT_EQ(vd.rows[3].token, Batch::kDeviceToken);
    oh.greedy_only = od.greedy_only = pass > 0 ? V : 0;
    od.greedy_to = pass == 2 ? dev + 16 : nullptr;
    tm.forward(vh, *st_host, oh);
    tm.forward(vd, *st_dev, od);
    if (pass == 0) {
      ASSERT_EQ(od.logits.size(), oh.logits.size());
      EXPECT_EQ(0, std::memcmp(od.logits.data(), oh.logits.data(), oh.logits.size() * sizeof(float)));
    } else if (pass == 1) {
      EXPECT_EQ(od.greedy, oh.greedy);
    } else {
      EXPECT_TRUE(od.greedy.empty()) << "greedy_to: nothing for the host";
      std::vector<int32_t> got(32);
      be.download(got.data(), dev, got.size() * sizeof(int32_t));
      EXPECT_EQ(std::vector<int32_t>(got.begin() + 16, got.begin() + 24), oh.greedy);
      EXPECT_EQ(std::vector<int32_t>(got.begin() + 3, got.begin() + 10), std::vector<int32_t>(block.begin() + 1, block.end()))
          << "the drafts were read, not moved";
      for (int i : {0, 1, 2, 10, 15, 24, 31}) EXPECT_EQ(got[size_t(i)], -5) << "entry " << i << " was written";
    }
    // The kept rows commit alike: the next step's logits agree too.
    tm.commit(*st_host, a, 5);
    tm.commit(*st_dev, b, 5);
    oh.greedy_only = od.greedy_only = 0;
    od.greedy_to = nullptr;
    feed(tm, *st_host, a, {block[5]}, oh);
    feed(tm, *st_dev, b, {block[5]}, od);
    EXPECT_EQ(0, std::memcmp(od.logits.data(), oh.logits.data(), oh.logits.size() * sizeof(float))) << "after commit";
  }
  be.release(dev);
}

// Greedy decoding whose every token goes from one step's argmax to the next step's embedding in
// backend memory, the host never reading it until the end (a one-row speculative segment a step,
// committed whole): the ids of plain host-driven greedy decoding.
TEST(SpecState, TokensChainedInBackendMemoryEqualHostGreedy) {
  Fixture fx("qwen35");
  TargetModel& tm = *fx.tm;
  Backend& be = *fx.be;
  const auto prompt = tokens(6, 8);
  constexpr int kSteps = 20;
  const int V = tm.hparams().n_vocab;
  std::vector<int32_t> want;
  {
    auto st = tm.make_state(1, 64);
    const int s = st->create();
    ForwardOutput o;
    o.greedy_only = V;
    feed(tm, *st, s, prompt, o);
    for (int i = 0; i < kSteps; ++i) {
      want.push_back(o.greedy.at(0));
      feed(tm, *st, s, {want.back()}, o);
    }
  }
  auto st = tm.make_state(1, 64, 1);
  const int s = st->create();
  int32_t* dev = static_cast<int32_t*>(be.alloc((kSteps + 1) * sizeof(int32_t)));
  ForwardOutput o;
  o.greedy_only = V;
  o.greedy_to = dev;
  feed(tm, *st, s, prompt, o);
  for (int i = 0; i < kSteps; ++i) {
    Batch b;
    b.add_speculative_from(s, int(prompt.size()) + i, dev + i, 1);
    o.greedy_to = dev + i + 1;
    tm.forward(b, *st, o);
    tm.commit(*st, s, 1);
  }
  std::vector<int32_t> got(kSteps + 1);
  be.download(got.data(), dev, got.size() * sizeof(int32_t));
  got.pop_back();
  EXPECT_EQ(got, want);
  be.release(dev);
}

// Device-token rows are checked like host rows: a row the batch takes from backend memory must
// hold kDeviceToken, a host row must not, and the ranges must lie in the batch in row order.
TEST(SpecState, BadDeviceTokenBatchesAreRejected) {
  Fixture fx("qwen35");
  TargetModel& tm = *fx.tm;
  auto st = tm.make_state(1, 64, 8);
  const int a = st->create();
  int32_t* dev = static_cast<int32_t*>(fx.be->alloc(8 * sizeof(int32_t)));
  ForwardOutput out;
  Batch b;
  b.add_speculative(a, 0, Batch::kDeviceToken);  // a host row without a token
  EXPECT_THROW(tm.forward(b, *st, out), Error);
  b.clear();
  b.add_speculative_from(a, 0, dev, 3);
  b.rows[1].token = 7;  // a device row with a host token
  EXPECT_THROW(tm.forward(b, *st, out), Error);
  b.clear();
  b.add_speculative_from(a, 0, dev, 3);
  b.device_tokens.push_back(DeviceTokens{2, 2, dev});  // past the batch, and overlapping
  EXPECT_THROW(tm.forward(b, *st, out), Error);
  b.device_tokens.pop_back();
  b.device_tokens.push_back(DeviceTokens{1, 1, dev});  // overlapping
  EXPECT_THROW(tm.forward(b, *st, out), Error);
  EXPECT_EQ(st->get(a).n_past, 0) << "a rejected batch changes nothing";
  b.device_tokens.pop_back();
  tm.forward(b, *st, out);  // zeros from alloc: token 0, a valid id
  EXPECT_EQ(st->get(a).n_past, 3);
  fx.be->release(dev);
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
