#include "convert/convert_dflash.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <regex>

#include "convert/convert_tensor.h"
#include "convert/safetensors.h"
#include "gguf/gguf.h"
#include "model/draft_hparams.h"
#include "model/hparams.h"
#include "modelgen/type_mix.h"
#include "quant/quantize.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace df {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

int int_field(const json& c, const char* key, const std::string& where) {
  if (!c.contains(key) || !c[key].is_number_integer()) fail("{}: missing or non-integer '{}'", where, key);
  const int64_t v = c[key].get<int64_t>();
  if (v <= 0 || v > (int64_t(1) << 30)) fail("{}: '{}' = {} is out of range", where, key, v);
  return int(v);
}

// A key of the drafter block, which published configs keep either in dflash_config or at the top.
const json* dflash_field(const json& c, const char* key) {
  if (c.contains("dflash_config") && c["dflash_config"].is_object() && c["dflash_config"].contains(key))
    return &c["dflash_config"][key];
  return c.contains(key) ? &c[key] : nullptr;
}

DraftHParams read_draft_config(const json& c, const std::string& where) {
  DraftHParams h;
  h.n_embd = int_field(c, "hidden_size", where);
  h.n_layer = int_field(c, "num_hidden_layers", where);
  h.n_head = int_field(c, "num_attention_heads", where);
  h.n_head_kv = c.contains("num_key_value_heads") ? int_field(c, "num_key_value_heads", where) : h.n_head;
  h.head_dim = c.contains("head_dim") ? int_field(c, "head_dim", where) : h.n_embd / h.n_head;
  h.n_ff = int_field(c, "intermediate_size", where);
  h.n_ctx_train = c.contains("max_position_embeddings") ? int_field(c, "max_position_embeddings", where) : 32768;
  h.n_vocab = c.contains("vocab_size") ? int_field(c, "vocab_size", where) : 0;
  if (c.contains("rms_norm_eps") && c["rms_norm_eps"].is_number()) h.rms_eps = c["rms_norm_eps"].get<float>();
  const json* theta = c.contains("rope_parameters") && c["rope_parameters"].is_object() &&
                              c["rope_parameters"].contains("rope_theta")
                          ? &c["rope_parameters"]["rope_theta"]
                          : (c.contains("rope_theta") ? &c["rope_theta"] : nullptr);
  if (theta == nullptr || !theta->is_number()) fail("{}: no rope_theta", where);
  h.rope_theta = theta->get<float>();
  if (c.contains("rope_scaling") && !c["rope_scaling"].is_null())
    fail("{}: rope_scaling is not supported for drafters yet", where);
  const json* block = dflash_field(c, "block_size");
  h.block_size = block && block->is_number_integer() ? block->get<int>() : 16;
  const json* mask = dflash_field(c, "mask_token_id");
  if (!mask || !mask->is_number_integer()) fail("{}: no mask_token_id (in dflash_config)", where);
  h.mask_token_id = mask->get<int32_t>();
  const json* ids = dflash_field(c, "target_layer_ids");
  if (ids && ids->is_array()) {
    for (const json& v : *ids) {
      if (!v.is_number_integer()) fail("{}: target_layer_ids has a non-integer entry", where);
      h.target_layer_ids.push_back(v.get<int>());
    }
  }
  // Without explicit ids, the count comes from fc's width (set by the caller from the tensor)
  // and the ids from the target's depth: z-lab configs give it as num_target_layers.
  if (c.contains("sliding_window") && c["sliding_window"].is_number_integer() &&
      c.value("use_sliding_window", false))
    fail("{}: sliding-window drafter layers are not supported yet", where);
  return h;
}

// Fills target_layer_ids when the config has none: n = fc's input width / hidden size, spread
// over the target's depth when the config names it (num_target_layers), else left for the
// loader to resolve against the target (-1).
void resolve_layer_ids(DraftHParams& h, const json& c, const convert::StTensor* fc, const std::string& where) {
  if (!h.target_layer_ids.empty()) return;
  if (fc == nullptr || fc->shape.size() != 2 || fc->shape[1] % h.n_embd != 0)
    fail("{}: no target_layer_ids, and fc.weight does not tell how many layers are fused", where);
  const int n = int(fc->shape[1] / h.n_embd);
  const json* depth = dflash_field(c, "num_target_layers");
  if (depth && depth->is_number_integer() && depth->get<int>() > n)
    h.target_layer_ids = DraftHParams::default_layer_ids(depth->get<int>(), n);
  else
    h.target_layer_ids.assign(size_t(n), -1);
}

// HF name -> GGUF name ("" = not part of the drafter).
std::string gguf_name(std::string name) {
  if (name.rfind("model.", 0) == 0) name = name.substr(6);
  static const std::map<std::string, std::string> globals = {
      {"fc.weight", "dflash.fc.weight"}, {"hidden_norm.weight", "dflash.hidden_norm.weight"},
      {"norm.weight", "output_norm.weight"}};
  if (auto it = globals.find(name); it != globals.end()) return it->second;
  static const std::regex layer(R"(layers\.(\d+)\.(.+))");
  static const std::map<std::string, std::string> per_layer = {
      {"input_layernorm.weight", "attn_norm.weight"},       {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},         {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},         {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},          {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"}};
  std::smatch m;
  if (std::regex_match(name, m, layer)) {
    const auto it = per_layer.find(m[2].str());
    if (it != per_layer.end()) return "blk." + m[1].str() + "." + it->second;
  }
  return "";
}

struct Planned {
  std::string name;
  std::vector<int64_t> ne;  // GGUF order
  bool matrix;
};

std::vector<Planned> plan(const DraftHParams& h) {
  const int64_t E = h.n_embd, F = h.n_ff, D = h.head_dim, HD = int64_t(h.n_head) * D, KVD = int64_t(h.n_head_kv) * D;
  std::vector<Planned> p = {{"dflash.fc.weight", {E * h.n_target_layers(), E}, true},
                            {"dflash.hidden_norm.weight", {E}, false},
                            {"output_norm.weight", {E}, false}};
  for (int i = 0; i < h.n_layer; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    p.push_back({b + "attn_norm.weight", {E}, false});
    p.push_back({b + "attn_q.weight", {E, HD}, true});
    p.push_back({b + "attn_k.weight", {E, KVD}, true});
    p.push_back({b + "attn_v.weight", {E, KVD}, true});
    p.push_back({b + "attn_output.weight", {HD, E}, true});
    p.push_back({b + "attn_q_norm.weight", {D}, false});
    p.push_back({b + "attn_k_norm.weight", {D}, false});
    p.push_back({b + "ffn_norm.weight", {E}, false});
    p.push_back({b + "ffn_gate.weight", {E, F}, true});
    p.push_back({b + "ffn_up.weight", {E, F}, true});
    p.push_back({b + "ffn_down.weight", {F, E}, true});
  }
  return p;
}

GgmlType matrix_type(const std::string& requested) {
  // Drafters are small next to their targets; auto keeps them at f16 (published GGUF drafters
  // are f16 or q8_0).
  const std::string t = requested == "auto" ? "f16" : requested;
  if (t.rfind("mix-", 0) == 0) fail("--type {}: recipes are for targets; give one type for a drafter", t);
  const std::optional<GgmlType> g = type_from_name(t);
  if (!g || !can_quantize(*g)) fail("--type {}: not a type deltaflash can write", requested);
  return *g;
}

}  // namespace

bool is_dflash_config(const json& c) {
  if (c.contains("dflash_config")) return true;
  if (c.contains("architectures") && c["architectures"].is_array())
    for (const json& a : c["architectures"])
      if (a.is_string() && a.get<std::string>().find("DFlash") != std::string::npos) return true;
  return false;
}

void convert_dflash(const ConvertOptions& opt, const json& config) {
  const std::string where = (fs::path(opt.input_dir) / "config.json").string();
  DraftHParams h = read_draft_config(config, where);
  const std::unique_ptr<convert::Checkpoint> ckpt = convert::Checkpoint::open(opt.input_dir);
  const convert::StTensor* fc = ckpt->find("fc.weight");
  resolve_layer_ids(h, config, fc ? fc : ckpt->find("model.fc.weight"), where);
  h.validate(where);
  const GgmlType mtype = matrix_type(opt.type);

  std::map<std::string, const convert::StTensor*> by_name;
  int skipped = 0;
  for (const convert::StTensor* t : ckpt->tensors()) {
    const std::string g = gguf_name(t->name);
    if (g.empty()) {
      if (t->name.find("embed_tokens") != std::string::npos || t->name.find("lm_head") != std::string::npos) {
        ++skipped;  // a copy of the target's; the drafter uses the target's own
        continue;
      }
      fail("{}: tensor '{}' is not part of a DFlash drafter (DFlash2/DSpark heads are not supported yet)", t->file,
           t->name);
    }
    if (!by_name.emplace(g, t).second) fail("{}: two tensors map to {}", opt.input_dir, g);
  }
  if (skipped && opt.log) opt.log(fmt::format("skipped {} copy(ies) of the target's embedding / LM head", skipped));
  const std::vector<Planned> planned = plan(h);
  for (const Planned& p : planned) {
    const auto it = by_name.find(p.name);
    if (it == by_name.end()) fail("{}: the checkpoint has no tensor for {}", opt.input_dir, p.name);
    const convert::StTensor& t = *it->second;
    const std::vector<int64_t> want(p.ne.rbegin(), p.ne.rend());
    if (t.shape != want)
      fail("{}: tensor '{}' has shape {}, but config.json implies {}", t.file, t.name, t.shape_string(),
           fmt::format("[{}]", fmt::join(want, ", ")));
    if (!convert::is_float_readable(t.dtype))
      fail("{}: tensor '{}' has dtype {}; only F32, F16, BF16 and F64 can be converted", t.file, t.name,
           convert::dtype_name(t.dtype));
    if (p.matrix && p.ne[0] % type_traits(mtype).block_size != 0)
      fail("--type {}: {} rows of {} are not a multiple of its block size", type_name(mtype), p.name, p.ne[0]);
  }
  if (by_name.size() != planned.size())
    for (const auto& [name, t] : by_name)
      if (std::none_of(planned.begin(), planned.end(), [&](const Planned& p) { return p.name == name; }))
        fail("{}: tensor '{}' ({}) is beyond what config.json describes", opt.input_dir, t->name, name);

  gguf::Writer w;
  h.to_gguf(w);
  w.set("general.type", gguf::Value::of_string("model"));
  w.set("general.name", gguf::Value::of_string(fmt::format("DFlash-Draft-{}h-{}L", h.n_embd, h.n_layer)));
  w.set("general.quantization_version", gguf::Value::of_u32(2));
  ThreadPool pool(opt.threads);
  const HParams no_target;  // drafter tensors need no value-head reordering
  for (const Planned& p : planned) {
    const convert::TensorConversion job{by_name.at(p.name), convert::ValueOp::None, convert::VHeadAxis::None,
                                        p.matrix ? mtype : GgmlType::F32};
    w.add_tensor(p.name, job.type, p.ne,
                 [job, &no_target, &pool](uint8_t* dst) { convert::convert_tensor(job, no_target, dst, pool); });
  }
  w.write(opt.output, 32, opt.progress);
}

}  // namespace df
