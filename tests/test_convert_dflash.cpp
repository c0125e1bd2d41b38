// Converting DFlash drafters from the published Hugging Face layout. A random drafter GGUF is
// written out as an HF checkpoint (names and [out, in] shapes from the published layout, kept
// in this test's own table), converted back with `deltaflash convert`, and must come back
// identical: every tensor bit for bit, every dflash.* key, and the same draft logits. Plus the
// errors a user meets with a wrong or incomplete checkpoint.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstring>
#include <map>
#include <regex>

#include "gguf/gguf.h"
#include "model/draft_hparams.h"
#include "model/draft_model.h"
#include "model/target_model.h"
#include "support/safetensors_writer.h"
#include "support/subprocess.h"
#include "util/error.h"

namespace df {
namespace {

using nlohmann::json;
using test::run_command;
using test::TempDir;

// GGUF name -> published HF name.
std::string hf_name(const std::string& g) {
  static const std::map<std::string, std::string> globals = {
      {"dflash.fc.weight", "fc.weight"}, {"dflash.hidden_norm.weight", "hidden_norm.weight"}, {"output_norm.weight", "norm.weight"}};
  if (auto it = globals.find(g); it != globals.end()) return it->second;
  static const std::map<std::string, std::string> layer = {
      {"attn_norm.weight", "input_layernorm.weight"},    {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"}, {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},       {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"}};
  std::smatch m;
  static const std::regex blk(R"(blk\.(\d+)\.(.+))");
  if (!std::regex_match(g, m, blk)) throw std::runtime_error("unexpected tensor " + g);
  return "layers." + m[1].str() + "." + layer.at(m[2].str());
}

struct Fixture {
  TempDir dir;
  std::string target, draft, hf;
  Fixture() {
    const std::string bin = DELTAFLASH_BIN;
    target = dir.file("t.gguf");
    draft = dir.file("d.gguf");
    hf = dir.file("hf");
    run_command(bin + " make-model --arch qwen35 --shape tiny --type q8_0 --seed 5 -q -o " + target);
    run_command(bin + " make-model --arch qwen35-dflash-draft --target " + target + " --type f32 --seed 6 -q -o " + draft);
    std::filesystem::create_directories(hf);
  }
  // Writes the HF checkpoint; `edit` may drop or change entries first.
  void write_hf(const std::function<void(std::vector<test::StEntry>&, json&)>& edit = nullptr) {
    auto f = gguf::File::open(draft);
    const DraftHParams h = DraftHParams::from_gguf(*f);
    std::vector<test::StEntry> entries;
    for (const gguf::TensorInfo& t : f->tensors()) {
      std::vector<int64_t> shape;
      for (int d = t.n_dims - 1; d >= 0; --d) shape.push_back(t.ne[d]);
      entries.push_back({hf_name(t.name), "F32", shape, std::string(reinterpret_cast<const char*>(t.data), t.nbytes)});
    }
    json cfg = {{"architectures", {"DFlashDraftModel"}},
                {"hidden_size", h.n_embd},
                {"num_hidden_layers", h.n_layer},
                {"num_attention_heads", h.n_head},
                {"num_key_value_heads", h.n_head_kv},
                {"head_dim", h.head_dim},
                {"intermediate_size", h.n_ff},
                {"rms_norm_eps", h.rms_eps},
                {"rope_theta", h.rope_theta},
                {"max_position_embeddings", h.n_ctx_train},
                {"vocab_size", h.n_vocab},
                {"block_size", h.block_size},
                {"num_target_layers", 8},  // z-lab: the target's depth (the tiny shape has 8 layers)
                {"dflash_config", {{"mask_token_id", h.mask_token_id}, {"target_layer_ids", h.target_layer_ids}}}};
    if (edit) edit(entries, cfg);
    test::write_file(hf + "/model.safetensors", test::safetensors_file(entries));
    test::write_file(hf + "/config.json", cfg.dump(2));
  }
  std::string convert(const std::string& type = "f32") {
    return run_command(std::string(DELTAFLASH_BIN) + " convert " + hf + " --type " + type + " -o " + dir.file("c.gguf") +
                       " 2>&1");
  }
};

TEST(ConvertDflash, RoundTripIsExact) {
  Fixture fx;
  fx.write_hf();
  fx.convert();
  auto a = gguf::File::open(fx.draft);
  auto b = gguf::File::open(fx.dir.file("c.gguf"));
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (const gguf::TensorInfo& t : a->tensors()) {
    const gguf::TensorInfo* u = b->find_tensor(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(u->type, t.type) << t.name;
    EXPECT_EQ(u->shape_string(), t.shape_string()) << t.name;
    ASSERT_EQ(u->nbytes, t.nbytes) << t.name;
    EXPECT_EQ(0, std::memcmp(u->data, t.data, t.nbytes)) << t.name;
  }
  const DraftHParams ha = DraftHParams::from_gguf(*a), hb = DraftHParams::from_gguf(*b);
  EXPECT_EQ(ha.target_layer_ids, hb.target_layer_ids);
  EXPECT_EQ(ha.mask_token_id, hb.mask_token_id);
  EXPECT_EQ(ha.block_size, hb.block_size);
  EXPECT_EQ(ha.head_dim, hb.head_dim);
  EXPECT_EQ(ha.n_ff, hb.n_ff);
  EXPECT_EQ(ha.rope_theta, hb.rope_theta);

  // Same drafts from both files.
  auto tf = gguf::File::open(fx.target);
  auto be = make_cpu_backend(1);
  TargetModel tm(*tf, *be, ModelOptions{});
  std::vector<float> la, lb;
  for (auto* f : {a.get(), b.get()}) {
    DraftModel dm(*f, tm);
    auto st = tm.make_state(1, 64);
    auto ds = dm.make_state(1, 64);
    const int s = st->create(), d = ds->create();
    Batch batch;
    for (int i = 0; i < 6; ++i) batch.add(s, i, 10 + i, i == 5);
    ForwardOutput out;
    tm.forward(batch, *st, out);
    dm.ingest(*ds, d, tm.features(), 6);
    dm.draft(*ds, d, 42, f == a.get() ? la : lb);
  }
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)));
}

TEST(ConvertDflash, LayerIdsFromTargetDepthWhenAbsent) {
  // Published configs may give only num_target_layers (the target's depth); the fused-layer count
  // comes from fc's width and the ids from the published spread rule.
  Fixture fx;
  fx.write_hf([](auto&, json& c) { c["dflash_config"].erase("target_layer_ids"); });
  fx.convert();
  auto a = gguf::File::open(fx.draft);
  auto b = gguf::File::open(fx.dir.file("c.gguf"));
  EXPECT_EQ(DraftHParams::from_gguf(*a).target_layer_ids, DraftHParams::from_gguf(*b).target_layer_ids);
}

TEST(ConvertDflash, QuantizedOutputLoads) {
  Fixture fx;
  fx.write_hf();
  fx.convert("q8_0");
  auto b = gguf::File::open(fx.dir.file("c.gguf"));
  EXPECT_EQ(b->tensor("blk.0.attn_q.weight").type, GgmlType::Q8_0);
  EXPECT_EQ(b->tensor("blk.0.attn_norm.weight").type, GgmlType::F32);
}

void expect_convert_error(Fixture& fx, const std::string& needle) {
  try {
    fx.convert();
    FAIL() << "convert succeeded; expected an error mentioning '" << needle << "'";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ConvertDflash, ClearErrors) {
  {
    Fixture fx;
    fx.write_hf([](auto& e, json&) { e.erase(e.begin() + 3); });
    expect_convert_error(fx, "has no tensor for");
  }
  {
    Fixture fx;
    fx.write_hf([](auto& e, json&) { e.back().shape[0] += 1; e.back().bytes += std::string(size_t(e.back().shape[1]) * 4, '\0'); });
    expect_convert_error(fx, "config.json implies");
  }
  {
    Fixture fx;
    fx.write_hf([](auto& e, json&) { e.push_back({"layers.0.mlp.extra.weight", "F32", {4}, std::string(16, '\0')}); });
    expect_convert_error(fx, "not part of a DFlash drafter");
  }
  {
    Fixture fx;
    fx.write_hf([](auto&, json& c) { c["dflash_config"].erase("mask_token_id"); });
    expect_convert_error(fx, "mask_token_id");
  }
}

}  // namespace
}  // namespace df
