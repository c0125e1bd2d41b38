// make-model against an independent expectation written from docs/qwen35-architecture.md
// (tensor names and ne of §8.4 and §10, the keys of §7.4 and §8.3) and from llama.cpp's
// quantization recipe (src/llama-quant.cpp): every tensor present with the right shape and type,
// nothing extra, metadata values, reproducible bytes, and weights of the intended scale.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "gguf/gguf.h"
#include "modelgen/make_model.h"
#include "quant/dequant.h"
#include "support/subprocess.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace df {
namespace {

using test::TempDir;

struct Expected {
  std::string name;
  std::vector<int64_t> ne;
};

std::string blk(int i, const char* s) { return "blk." + std::to_string(i) + "." + s; }

// The tiny qwen35 shape: n_embd 256, ffn 512, 8 heads x 64 (2 KV heads), DeltaNet n_k 2, n_v 4,
// d_k = d_v = 64 (conv_dim 2*2*64 + 4*64 = 512, inner 256), kernel 4, 8 layers of which 3 and 7
// are full attention; MTP blocks (full attention + nextn.*) follow the main layers.
std::vector<Expected> qwen35_tiny_tensors(int64_t V, bool tied, int nextn) {
  std::vector<Expected> t = {{"token_embd.weight", {256, V}}, {"output_norm.weight", {256}}};
  if (!tied) t.push_back({"output.weight", {256, V}});
  for (int i = 0; i < 8 + nextn; ++i) {
    t.push_back({blk(i, "attn_norm.weight"), {256}});
    t.push_back({blk(i, "post_attention_norm.weight"), {256}});
    t.push_back({blk(i, "ffn_gate.weight"), {256, 512}});
    t.push_back({blk(i, "ffn_up.weight"), {256, 512}});
    t.push_back({blk(i, "ffn_down.weight"), {512, 256}});
    if (i == 3 || i >= 7) {
      t.push_back({blk(i, "attn_q.weight"), {256, 2 * 8 * 64}});  // query + output gate
      t.push_back({blk(i, "attn_k.weight"), {256, 2 * 64}});
      t.push_back({blk(i, "attn_v.weight"), {256, 2 * 64}});
      t.push_back({blk(i, "attn_output.weight"), {8 * 64, 256}});
      t.push_back({blk(i, "attn_q_norm.weight"), {64}});
      t.push_back({blk(i, "attn_k_norm.weight"), {64}});
    } else {
      t.push_back({blk(i, "attn_qkv.weight"), {256, 512}});
      t.push_back({blk(i, "attn_gate.weight"), {256, 256}});
      t.push_back({blk(i, "ssm_conv1d.weight"), {4, 512}});
      t.push_back({blk(i, "ssm_dt.bias"), {4}});
      t.push_back({blk(i, "ssm_a"), {4}});
      t.push_back({blk(i, "ssm_beta.weight"), {256, 4}});
      t.push_back({blk(i, "ssm_alpha.weight"), {256, 4}});
      t.push_back({blk(i, "ssm_norm.weight"), {64}});
      t.push_back({blk(i, "ssm_out.weight"), {256, 256}});
    }
    if (i >= 8) {
      t.push_back({blk(i, "nextn.eh_proj.weight"), {512, 256}});
      t.push_back({blk(i, "nextn.enorm.weight"), {256}});
      t.push_back({blk(i, "nextn.hnorm.weight"), {256}});
      t.push_back({blk(i, "nextn.shared_head_norm.weight"), {256}});
    }
  }
  return t;
}

// The tiny qwen3 shape: 4 layers, n_embd 256, ffn 512, 8 heads x 64, 2 KV heads, no output gate.
std::vector<Expected> qwen3_tiny_tensors(int64_t V, bool tied) {
  std::vector<Expected> t = {{"token_embd.weight", {256, V}}, {"output_norm.weight", {256}}};
  if (!tied) t.push_back({"output.weight", {256, V}});
  for (int i = 0; i < 4; ++i) {
    t.push_back({blk(i, "attn_norm.weight"), {256}});
    t.push_back({blk(i, "ffn_norm.weight"), {256}});
    t.push_back({blk(i, "ffn_gate.weight"), {256, 512}});
    t.push_back({blk(i, "ffn_up.weight"), {256, 512}});
    t.push_back({blk(i, "ffn_down.weight"), {512, 256}});
    t.push_back({blk(i, "attn_q.weight"), {256, 8 * 64}});
    t.push_back({blk(i, "attn_k.weight"), {256, 2 * 64}});
    t.push_back({blk(i, "attn_v.weight"), {256, 2 * 64}});
    t.push_back({blk(i, "attn_output.weight"), {8 * 64, 256}});
    t.push_back({blk(i, "attn_q_norm.weight"), {64}});
    t.push_back({blk(i, "attn_k_norm.weight"), {64}});
  }
  return t;
}

std::vector<int64_t> ne_of(const gguf::TensorInfo& t) { return std::vector<int64_t>(t.ne, t.ne + t.n_dims); }

void expect_tensors(const gguf::File& f, const std::vector<Expected>& want) {
  std::set<std::string> names;
  for (const Expected& e : want) {
    names.insert(e.name);
    const gguf::TensorInfo* t = f.find_tensor(e.name);
    if (!t) {
      ADD_FAILURE() << "missing tensor " << e.name;
      continue;
    }
    EXPECT_EQ(ne_of(*t), e.ne) << e.name;
  }
  for (const auto& t : f.tensors()) EXPECT_TRUE(names.count(t.name)) << "unexpected tensor " << t.name;
  EXPECT_EQ(f.tensors().size(), want.size());
}

// Tensors converters keep in F32 whatever the file type: vectors and the conv kernel.
bool stays_f32(const std::string& name) {
  auto ends = [&](const std::string& s) { return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0; };
  return ends("norm.weight") || ends("ssm_a") || ends("ssm_dt.bias") || ends("ssm_conv1d.weight");
}

MakeModelOptions options(const std::string& arch, const std::string& type, const std::string& out) {
  MakeModelOptions o;
  o.arch = arch;
  o.shape = "tiny";
  o.type = type;
  o.seed = 11;
  o.output = out;
  o.threads = 2;
  o.log = [](const std::string&) {};
  return o;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<float> dequantize(const gguf::TensorInfo& t) {
  std::vector<float> out(size_t(t.n_elements()));
  const int64_t row = t.ne[0];
  for (int64_t r = 0; r < t.n_elements() / row; ++r)
    dequantize_row(t.type, t.data + size_t(r) * row_size(t.type, row), out.data() + r * row, row);
  return out;
}

struct Stats {
  double mean = 0, std = 0, min = 0, max = 0;
  bool finite = true;
};

Stats stats_of(const std::vector<float>& v) {
  Stats s;
  s.min = s.max = v.empty() ? 0 : v[0];
  double sum = 0, sq = 0;
  for (float x : v) {
    s.finite = s.finite && std::isfinite(x);
    sum += x;
    sq += double(x) * x;
    s.min = std::min(s.min, double(x));
    s.max = std::max(s.max, double(x));
  }
  s.mean = sum / double(v.size());
  s.std = std::sqrt(std::max(0.0, sq / double(v.size()) - s.mean * s.mean));
  return s;
}

// ---- layout ------------------------------------------------------------------------------------

class Qwen35TinyTypes : public ::testing::TestWithParam<const char*> {};

TEST_P(Qwen35TinyTypes, TensorsShapesAndTypes) {
  TempDir dir;
  const std::string path = dir.file("m.gguf");
  make_model(options("qwen35", GetParam(), path));
  auto f = gguf::File::open(path);
  const int64_t V = f->tensor("token_embd.weight").ne[1];
  expect_tensors(*f, qwen35_tiny_tensors(V, /*tied=*/true, 0));
  const GgmlType want = *type_from_name(GetParam());
  for (const auto& t : f->tensors()) EXPECT_EQ(t.type, stays_f32(t.name) ? GgmlType::F32 : want) << t.name;
}

INSTANTIATE_TEST_SUITE_P(Types, Qwen35TinyTypes,
                         ::testing::Values("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k",
                                           "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs"));

TEST(MakeModel, Qwen3TinyLayout) {
  TempDir dir;
  const std::string path = dir.file("m.gguf");
  MakeModelOptions o = options("qwen3", "q8_0", path);
  o.overrides.tied = false;
  make_model(o);
  auto f = gguf::File::open(path);
  expect_tensors(*f, qwen3_tiny_tensors(f->tensor("token_embd.weight").ne[1], /*tied=*/false));
}

TEST(MakeModel, MtpBlockAndUntiedOutput) {
  TempDir dir;
  const std::string path = dir.file("m.gguf");
  MakeModelOptions o = options("qwen35", "q8_0", path);
  o.overrides.n_nextn = 1;
  o.overrides.tied = false;
  make_model(o);
  auto f = gguf::File::open(path);
  expect_tensors(*f, qwen35_tiny_tensors(f->tensor("token_embd.weight").ne[1], /*tied=*/false, 1));
  EXPECT_EQ(f->get_u32("qwen35.block_count"), 9u);
  EXPECT_EQ(f->get_u32("qwen35.nextn_predict_layers"), 1u);
}

// Concrete shapes of the published sizes (docs §8.4 and §10), from the plan alone.
TEST(MakeModel, PublishedShapes) {
  auto shape_of = [](const ModelPlan& p, const std::string& name) {
    for (const auto& t : p.tensors)
      if (t.name == name) return t.ne;
    return std::vector<int64_t>{};
  };
  MakeModelOptions o;
  o.shape = "27b";
  o.log = [](const std::string&) {};
  const ModelPlan p27 = plan_model(o);
  EXPECT_EQ(shape_of(p27, "blk.3.attn_q.weight"), (std::vector<int64_t>{5120, 12288}));
  EXPECT_EQ(shape_of(p27, "blk.3.attn_k.weight"), (std::vector<int64_t>{5120, 1024}));
  EXPECT_EQ(shape_of(p27, "blk.3.attn_v.weight"), (std::vector<int64_t>{5120, 1024}));
  EXPECT_EQ(shape_of(p27, "blk.3.attn_output.weight"), (std::vector<int64_t>{6144, 5120}));
  EXPECT_EQ(shape_of(p27, "blk.0.attn_qkv.weight"), (std::vector<int64_t>{5120, 10240}));
  EXPECT_EQ(shape_of(p27, "blk.0.attn_gate.weight"), (std::vector<int64_t>{5120, 6144}));
  EXPECT_EQ(shape_of(p27, "blk.0.ssm_conv1d.weight"), (std::vector<int64_t>{4, 10240}));
  EXPECT_EQ(shape_of(p27, "blk.0.ssm_a"), (std::vector<int64_t>{48}));
  EXPECT_EQ(shape_of(p27, "blk.0.ssm_dt.bias"), (std::vector<int64_t>{48}));
  EXPECT_EQ(shape_of(p27, "blk.0.ssm_alpha.weight"), (std::vector<int64_t>{5120, 48}));
  EXPECT_EQ(shape_of(p27, "blk.0.ssm_beta.weight"), (std::vector<int64_t>{5120, 48}));
  EXPECT_EQ(shape_of(p27, "blk.0.ssm_norm.weight"), (std::vector<int64_t>{128}));
  EXPECT_EQ(shape_of(p27, "blk.0.ssm_out.weight"), (std::vector<int64_t>{6144, 5120}));
  EXPECT_EQ(shape_of(p27, "blk.63.ffn_gate.weight"), (std::vector<int64_t>{5120, 17408}));
  EXPECT_EQ(shape_of(p27, "blk.63.ffn_down.weight"), (std::vector<int64_t>{17408, 5120}));
  EXPECT_EQ(shape_of(p27, "token_embd.weight"), (std::vector<int64_t>{5120, 248320}));
  EXPECT_EQ(shape_of(p27, "output.weight"), (std::vector<int64_t>{5120, 248320}));
  EXPECT_EQ(p27.tensors.size(), 3u + 16 * 11 + 48 * 14);  // globals, attention layers, DeltaNet layers
  EXPECT_TRUE(shape_of(p27, "blk.64.attn_norm.weight").empty());

  o.shape = "0.8b";
  const ModelPlan p08 = plan_model(o);
  EXPECT_EQ(shape_of(p08, "blk.7.attn_q.weight"), (std::vector<int64_t>{1024, 4096}));
  EXPECT_EQ(shape_of(p08, "blk.7.attn_k.weight"), (std::vector<int64_t>{1024, 512}));
  EXPECT_EQ(shape_of(p08, "blk.7.attn_output.weight"), (std::vector<int64_t>{2048, 1024}));
  EXPECT_EQ(shape_of(p08, "blk.0.attn_qkv.weight"), (std::vector<int64_t>{1024, 6144}));
  EXPECT_EQ(shape_of(p08, "blk.0.attn_gate.weight"), (std::vector<int64_t>{1024, 2048}));
  EXPECT_EQ(shape_of(p08, "blk.0.ssm_out.weight"), (std::vector<int64_t>{2048, 1024}));
  EXPECT_EQ(shape_of(p08, "blk.0.ssm_alpha.weight"), (std::vector<int64_t>{1024, 16}));
  EXPECT_EQ(shape_of(p08, "blk.23.ffn_up.weight"), (std::vector<int64_t>{1024, 3584}));
  EXPECT_EQ(shape_of(p08, "token_embd.weight"), (std::vector<int64_t>{1024, 248320}));
  EXPECT_TRUE(shape_of(p08, "output.weight").empty());  // tied

  o.arch = "qwen3";
  o.shape = "0.6b";
  const ModelPlan p06 = plan_model(o);
  EXPECT_EQ(shape_of(p06, "blk.27.attn_q.weight"), (std::vector<int64_t>{1024, 2048}));
  EXPECT_EQ(shape_of(p06, "blk.27.attn_k.weight"), (std::vector<int64_t>{1024, 1024}));
  EXPECT_EQ(shape_of(p06, "blk.27.attn_output.weight"), (std::vector<int64_t>{2048, 1024}));
  EXPECT_EQ(shape_of(p06, "blk.27.attn_q_norm.weight"), (std::vector<int64_t>{128}));
  EXPECT_EQ(shape_of(p06, "blk.27.ffn_norm.weight"), (std::vector<int64_t>{1024}));
  EXPECT_EQ(shape_of(p06, "blk.27.ffn_down.weight"), (std::vector<int64_t>{3072, 1024}));
  EXPECT_EQ(shape_of(p06, "token_embd.weight"), (std::vector<int64_t>{1024, 151936}));
  EXPECT_TRUE(shape_of(p06, "blk.28.attn_norm.weight").empty());
}

// ---- metadata ----------------------------------------------------------------------------------

TEST(MakeModel, Qwen35Metadata) {
  TempDir dir;
  const std::string path = dir.file("m.gguf");
  make_model(options("qwen35", "q8_0", path));
  auto f = gguf::File::open(path);
  EXPECT_EQ(f->get_string("general.architecture"), "qwen35");
  EXPECT_EQ(f->get_u32("general.file_type"), 7u);  // LLAMA_FTYPE_MOSTLY_Q8_0
  EXPECT_EQ(f->get_u32("general.quantization_version"), 2u);
  const std::map<std::string, uint32_t> u32 = {
      {"qwen35.block_count", 8},           {"qwen35.embedding_length", 256},
      {"qwen35.feed_forward_length", 512}, {"qwen35.attention.head_count", 8},
      {"qwen35.attention.head_count_kv", 2}, {"qwen35.attention.key_length", 64},
      {"qwen35.attention.value_length", 64}, {"qwen35.rope.dimension_count", 16},
      {"qwen35.full_attention_interval", 4}, {"qwen35.ssm.conv_kernel", 4},
      {"qwen35.ssm.state_size", 64},       {"qwen35.ssm.group_count", 2},
      {"qwen35.ssm.time_step_rank", 4},    {"qwen35.ssm.inner_size", 256},
  };
  for (const auto& [key, value] : u32) EXPECT_EQ(f->get_u32(key), value) << key;
  EXPECT_TRUE(f->has("qwen35.context_length"));
  EXPECT_FALSE(f->has("qwen35.nextn_predict_layers"));
  EXPECT_FLOAT_EQ(f->get_f32("qwen35.attention.layer_norm_rms_epsilon"), 1e-6f);
  EXPECT_FLOAT_EQ(f->get_f32("qwen35.rope.freq_base"), 1e7f);
  EXPECT_EQ(f->get_int_array("qwen35.rope.dimension_sections"), (std::vector<int64_t>{3, 3, 2, 0}));
  EXPECT_EQ(f->find("qwen35.rope.dimension_sections")->elem_type, gguf::ValueType::I32);
}

TEST(MakeModel, Qwen3Metadata) {
  TempDir dir;
  const std::string path = dir.file("m.gguf");
  make_model(options("qwen3", "mix-q4_k_m", path));
  auto f = gguf::File::open(path);
  EXPECT_EQ(f->get_string("general.architecture"), "qwen3");
  EXPECT_EQ(f->get_u32("general.file_type"), 15u);  // LLAMA_FTYPE_MOSTLY_Q4_K_M
  EXPECT_EQ(f->get_u32("qwen3.block_count"), 4u);
  EXPECT_EQ(f->get_u32("qwen3.attention.head_count"), 8u);
  EXPECT_EQ(f->get_u32("qwen3.attention.head_count_kv"), 2u);
  EXPECT_EQ(f->get_u32("qwen3.attention.key_length"), 64u);
  EXPECT_FLOAT_EQ(f->get_f32("qwen3.rope.freq_base"), 1e6f);
  for (const auto& [key, v] : f->metadata()) EXPECT_EQ(key.find("ssm"), std::string::npos) << key;
  EXPECT_EQ(f->get_string("tokenizer.ggml.pre"), "qwen2");
}

TEST(MakeModel, ToyVocabulary) {
  TempDir dir;
  const std::string path = dir.file("m.gguf");
  make_model(options("qwen35", "q8_0", path));
  auto f = gguf::File::open(path);
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f->get_string("tokenizer.ggml.pre"), "qwen35");
  const auto& tokens = f->get_string_array("tokenizer.ggml.tokens");
  const auto& types = f->get_int_array("tokenizer.ggml.token_type");
  ASSERT_EQ(int64_t(tokens.size()), f->tensor("token_embd.weight").ne[1]);
  ASSERT_EQ(types.size(), tokens.size());
  EXPECT_EQ(tokens[0], "!");  // GPT-2 byte order, as in Qwen's vocabulary
  auto id_of = [&](const std::string& s) { return int64_t(std::find(tokens.begin(), tokens.end(), s) - tokens.begin()); };
  const std::map<std::string, int64_t> special_types = {
      {"<|endoftext|>", 3}, {"<|im_start|>", 3}, {"<|im_end|>", 3}, {"<think>", 4},
      {"</think>", 4},      {"<tool_call>", 4},  {"</tool_call>", 4},
  };
  for (const auto& [text, type] : special_types) {
    const int64_t id = id_of(text);
    ASSERT_LT(id, int64_t(tokens.size())) << text;
    EXPECT_EQ(types[size_t(id)], type) << text;
  }
  EXPECT_EQ(tokens[f->get_u32("tokenizer.ggml.eos_token_id")], "<|im_end|>");
  EXPECT_EQ(tokens[f->get_u32("tokenizer.ggml.padding_token_id")], "<|endoftext|>");
  EXPECT_FALSE(f->get_bool_or("tokenizer.ggml.add_bos_token", true));
  EXPECT_NE(f->get_string("tokenizer.chat_template").find("<|im_start|>"), std::string::npos);
  // Every merge joins two tokens into a third.
  const auto& merges = f->get_string_array("tokenizer.ggml.merges");
  EXPECT_GT(merges.size(), 200u);
  const std::set<std::string> known(tokens.begin(), tokens.end());
  for (const std::string& m : merges) {
    const size_t sp = m.find(' ');
    ASSERT_NE(sp, std::string::npos) << m;
    EXPECT_TRUE(known.count(m.substr(0, sp)) && known.count(m.substr(sp + 1)) &&
                known.count(m.substr(0, sp) + m.substr(sp + 1)))
        << m;
  }
  // It works as a tokenizer: round trip, merges shorten text, ChatML markers are single tokens.
  const Tokenizer tok(Vocab::from_gguf(*f));
  const std::string text = "The model reads the prompt and writes the answer.";
  const std::vector<int32_t> ids = tok.encode(text);
  EXPECT_LT(ids.size(), text.size() / 2);
  EXPECT_EQ(tok.decode(ids), text);
  const std::vector<int32_t> chat = tok.encode("<|im_start|>user\nHi<|im_end|>");
  EXPECT_EQ(chat.front(), id_of("<|im_start|>"));
  EXPECT_EQ(chat.back(), id_of("<|im_end|>"));
}

TEST(MakeModel, VocabPaddingAndCopy) {
  TempDir dir;
  const std::string a = dir.file("a.gguf"), b = dir.file("b.gguf");
  MakeModelOptions o = options("qwen35", "q8_0", a);
  o.overrides.vocab_size = 1000;
  make_model(o);
  auto fa = gguf::File::open(a);
  const auto& tokens = fa->get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 1000u);
  EXPECT_EQ(tokens[999], "[PAD999]");
  EXPECT_EQ(fa->get_int_array("tokenizer.ggml.token_type")[999], 5);  // UNUSED
  EXPECT_EQ(fa->tensor("token_embd.weight").ne[1], 1000);

  // --vocab FILE.gguf copies every tokenizer.* key verbatim.
  MakeModelOptions ob = options("qwen3", "f16", b);
  ob.vocab = a;
  make_model(ob);
  auto fb = gguf::File::open(b);
  size_t copied = 0;
  for (const auto& [key, v] : fa->metadata()) {
    if (key.rfind("tokenizer.", 0) != 0) continue;
    ++copied;
    const gguf::Value* w = fb->find(key);
    ASSERT_NE(w, nullptr) << key;
    EXPECT_EQ(w->type, v.type) << key;
    EXPECT_EQ(w->s, v.s) << key;
    EXPECT_EQ(w->u, v.u) << key;
    EXPECT_EQ(w->strings, v.strings) << key;
    EXPECT_EQ(w->ints, v.ints) << key;
  }
  EXPECT_GE(copied, 8u);
  EXPECT_EQ(fb->tensor("token_embd.weight").ne[1], 1000);
}

TEST(MakeModel, HuggingFaceTokenizerDirectory) {
  TempDir dir;
  std::ofstream(dir.file("tokenizer.json"))
      << R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3}, "merges": ["a b"]},
             "added_tokens": [{"id": 4, "content": "<|im_end|>", "special": true},
                              {"id": 5, "content": "<think>", "special": false}]})";
  std::ofstream(dir.file("tokenizer_config.json")) << R"({"eos_token": "<|im_end|>", "chat_template": "{{ x }}"})";
  MakeModelOptions o = options("qwen35", "f32", dir.file("m.gguf"));
  o.vocab = dir.path();
  make_model(o);
  auto f = gguf::File::open(dir.file("m.gguf"));
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens"),
            (std::vector<std::string>{"a", "b", "ab", "Ġ", "<|im_end|>", "<think>"}));
  EXPECT_EQ(f->get_int_array("tokenizer.ggml.token_type"), (std::vector<int64_t>{1, 1, 1, 1, 3, 4}));
  EXPECT_EQ(f->get_u32("tokenizer.ggml.eos_token_id"), 4u);
  EXPECT_EQ(f->get_string("tokenizer.chat_template"), "{{ x }}");
  EXPECT_EQ(f->tensor("token_embd.weight").ne[1], 6);
}

// ---- type recipes ------------------------------------------------------------------------------

std::map<std::string, GgmlType> types_of(const gguf::File& f) {
  std::map<std::string, GgmlType> m;
  for (const auto& t : f.tensors()) m[t.name] = t.type;
  return m;
}

// llama.cpp Q4_K_M: Q4_K, with Q6_K for the LM head (token_embd when tied) and for attn_v-like
// tensors (attn_v and the DeltaNet attn_qkv, counted together in layer order) and ffn_down at
// the "use more bits" positions. For 8 layers those are i < 1, i >= 7 and (i - 1) % 3 == 2:
// layers 0, 3, 6, 7.
TEST(MakeModel, MixQ4KMFollowsLlamaCpp) {
  TempDir dir;
  const std::string path = dir.file("m.gguf");
  make_model(options("qwen35", "mix-q4_k_m", path));
  auto f = gguf::File::open(path);
  const std::set<int> more_bits = {0, 3, 6, 7};
  for (const auto& [name, type] : types_of(*f)) {
    int layer = -1;
    std::sscanf(name.c_str(), "blk.%d.", &layer);
    GgmlType want = GgmlType::Q4_K;
    if (stays_f32(name)) want = GgmlType::F32;
    else if (name == "token_embd.weight") want = GgmlType::Q6_K;
    else if (name.find("attn_v.weight") != std::string::npos || name.find("attn_qkv.weight") != std::string::npos ||
             name.find("ffn_down.weight") != std::string::npos)
      want = more_bits.count(layer) ? GgmlType::Q6_K : GgmlType::Q4_K;
    EXPECT_EQ(type, want) << name;
  }
  EXPECT_EQ(f->get_u32("general.file_type"), 15u);
}

TEST(MakeModel, MixQ4KMUntiedAndPublishedDepth) {
  MakeModelOptions o;
  o.shape = "0.8b";
  o.type = "mix-q4_k_m";
  o.overrides.tied = false;
  o.log = [](const std::string&) {};
  const ModelPlan p = plan_model(o);
  // 24 layers: use_more_bits(i, 24) holds for i < 3, i >= 21 and (i - 3) % 3 == 2.
  const std::set<int> more_bits = {0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23};
  for (const auto& t : p.tensors) {
    int layer = -1;
    std::sscanf(t.name.c_str(), "blk.%d.", &layer);
    GgmlType want = GgmlType::Q4_K;  // token_embd (untied), ssm_alpha, every other matrix
    if (t.ne.size() == 1 || t.name.find("ssm_conv1d") != std::string::npos) {
      want = GgmlType::F32;
    } else if (t.name == "output.weight") {
      want = GgmlType::Q6_K;
    } else if (t.name.find("ffn_down") != std::string::npos || t.name.find("attn_v.weight") != std::string::npos ||
               t.name.find("attn_qkv") != std::string::npos) {
      want = more_bits.count(layer) ? GgmlType::Q6_K : GgmlType::Q4_K;
    }
    EXPECT_EQ(t.type, want) << t.name;
  }
}

// IQ4_XS as in unsloth's Qwen3.5 UD files: IQ4_XS, Q6_K LM head, Q5_K attn_v-like tensors when
// n_head / n_head_kv >= 4 (8 / 2 here), Q8_0 for ssm_alpha, ssm_beta and ssm_out.
TEST(MakeModel, MixIQ4XS) {
  TempDir dir;
  const std::string path = dir.file("m.gguf");
  make_model(options("qwen35", "mix-iq4_xs", path));
  auto f = gguf::File::open(path);
  for (const auto& [name, type] : types_of(*f)) {
    GgmlType want = GgmlType::IQ4_XS;
    if (stays_f32(name)) want = GgmlType::F32;
    else if (name == "token_embd.weight") want = GgmlType::Q6_K;
    else if (name.find("attn_v.weight") != std::string::npos || name.find("attn_qkv.weight") != std::string::npos)
      want = GgmlType::Q5_K;
    else if (name.find("ssm_alpha") != std::string::npos || name.find("ssm_beta") != std::string::npos ||
             name.find("ssm_out") != std::string::npos)
      want = GgmlType::Q8_0;
    EXPECT_EQ(type, want) << name;
  }
  EXPECT_EQ(f->get_u32("general.file_type"), 30u);
}

// Rows that the block size does not divide fall back to Q8_0, then F16, and say so.
TEST(MakeModel, BlockSizeFallbacks) {
  TempDir dir;
  std::vector<std::string> notices;
  MakeModelOptions o = options("qwen35", "q4_k", dir.file("a.gguf"));
  o.overrides.n_embd = 320;  // 320 % 256 != 0, 320 % 32 == 0
  o.log = [&](const std::string& m) { notices.push_back(m); };
  make_model(o);
  auto f = gguf::File::open(o.output);
  EXPECT_EQ(f->tensor("blk.0.ffn_gate.weight").type, GgmlType::Q8_0);
  EXPECT_EQ(f->tensor("blk.0.ffn_down.weight").type, GgmlType::Q4_K);  // ne0 = 512
  EXPECT_FALSE(notices.empty());

  o.overrides.n_embd = 272;  // 272 % 32 != 0
  o.output = dir.file("b.gguf");
  make_model(o);
  auto g = gguf::File::open(o.output);
  EXPECT_EQ(g->tensor("blk.0.ffn_gate.weight").type, GgmlType::F16);
  EXPECT_EQ(g->tensor("blk.0.ffn_down.weight").ne[1], 272);
}

// ---- determinism -------------------------------------------------------------------------------

TEST(MakeModel, BytesDependOnlyOnTheSeed) {
  TempDir dir;
  for (const char* type : {"mix-q4_k_m", "f16", "q3_k"}) {
    SCOPED_TRACE(type);
    MakeModelOptions o = options("qwen35", type, dir.file("a.gguf"));
    o.threads = 1;
    make_model(o);
    o.output = dir.file("b.gguf");
    o.threads = 3;
    make_model(o);
    o.output = dir.file("c.gguf");
    o.seed = 12;
    make_model(o);
    const std::string a = read_all(dir.file("a.gguf"));
    EXPECT_GT(a.size(), 100000u);
    EXPECT_EQ(a, read_all(dir.file("b.gguf")));
    EXPECT_NE(a, read_all(dir.file("c.gguf")));
  }
}

// ---- values ------------------------------------------------------------------------------------

// Intended scales: projections reading a normed activation N(0, 1/sqrt(fan_in)); projections
// writing to the residual stream additionally / sqrt(2 * n_layer) = / 4; embeddings 3/sqrt(256);
// norms ~1; ssm_a = -exp(U(0,1)); ssm_dt.bias ~ -3.
class TinyValues : public ::testing::TestWithParam<const char*> {};

TEST_P(TinyValues, FiniteWithIntendedScale) {
  TempDir dir;
  const std::string path = dir.file("m.gguf");
  make_model(options("qwen35", GetParam(), path));
  auto f = gguf::File::open(path);
  for (const auto& t : f->tensors()) EXPECT_TRUE(stats_of(dequantize(t)).finite) << t.name;

  const std::map<std::string, double> std_of = {
      {"token_embd.weight", 3.0 / 16},
      {"blk.0.ffn_gate.weight", 1.0 / 16},
      {"blk.0.attn_qkv.weight", 1.0 / 16},
      {"blk.0.attn_gate.weight", 1.0 / 16},
      {"blk.3.attn_q.weight", 1.0 / 16},
      {"blk.1.ffn_down.weight", 1.0 / std::sqrt(512.0) / 4},
      {"blk.2.ssm_out.weight", 1.0 / 16 / 4},
      {"blk.7.attn_output.weight", 1.0 / std::sqrt(512.0) / 4},
  };
  for (const auto& [name, want] : std_of) {
    const Stats s = stats_of(dequantize(f->tensor(name)));
    EXPECT_NEAR(s.std, want, 0.12 * want) << name;
    EXPECT_LT(std::abs(s.mean), 0.05 * want) << name;
  }
  for (const char* name : {"output_norm.weight", "blk.0.attn_norm.weight", "blk.3.attn_q_norm.weight",
                           "blk.0.ssm_norm.weight"}) {
    const Stats s = stats_of(dequantize(f->tensor(name)));
    EXPECT_NEAR(s.mean, 1.0, 0.05) << name;
    EXPECT_GT(s.min, 0.7) << name;
  }
  const Stats a = stats_of(dequantize(f->tensor("blk.0.ssm_a")));
  EXPECT_GE(a.min, -std::exp(1.0) - 1e-6);
  EXPECT_LE(a.max, -1.0);
  const Stats dt = stats_of(dequantize(f->tensor("blk.0.ssm_dt.bias")));
  EXPECT_GT(dt.min, -5.0);
  EXPECT_LT(dt.max, -1.0);
}

INSTANTIATE_TEST_SUITE_P(Types, TinyValues,
                         ::testing::Values("f32", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k",
                                           "q4_k", "q5_k", "q6_k", "iq4_nl", "iq4_xs", "mix-q4_k_m",
                                           "mix-iq4_xs"));

// ---- errors ------------------------------------------------------------------------------------

TEST(MakeModel, InvalidCombinationsAreErrors) {
  auto fails = [](MakeModelOptions o) {
    o.output = "/nonexistent/never-written.gguf";
    o.log = [](const std::string&) {};
    EXPECT_THROW(plan_model(o), Error);
  };
  MakeModelOptions o;
  o.arch = "qwen3";
  o.shape = "27b";
  fails(o);
  o.shape = "tiny";
  o.overrides.n_k_heads = 4;
  fails(o);
  o = MakeModelOptions();
  o.arch = "llama";
  fails(o);
  o = MakeModelOptions();
  o.shape = "0.6b";
  fails(o);
  o = MakeModelOptions();
  o.type = "q9_k";
  fails(o);
  o.type = "q8_K";  // activation format
  fails(o);
  o = MakeModelOptions();
  o.overrides.vocab_size = 10;  // fewer rows than the toy vocabulary has tokens
  fails(o);
  o = MakeModelOptions();
  o.overrides.n_head_kv = 3;  // 8 heads
  fails(o);
  o = MakeModelOptions();
  o.overrides.n_v_heads = 3;  // not a multiple of 2 key heads
  fails(o);
  o = MakeModelOptions();
  o.vocab = "/nonexistent/vocab";
  fails(o);
}

}  // namespace
}  // namespace df
