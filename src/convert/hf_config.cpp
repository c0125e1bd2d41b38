// Field by field as llama.cpp's converter reads them (Qwen3_5TextModel / Qwen3Model
// set_gguf_parameters), with the checks our GGUF layout needs: the layer pattern must be a
// full_attention_interval, RoPE must be plain (no scaling), and no biases.
#include "convert/hf_config.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "util/error.h"

namespace df::convert {

namespace {

using nlohmann::json;

// Qwen3.5's default mrope_section, written when a checkpoint omits it (llama.cpp requires the key).
const std::vector<int32_t> kDefaultQwen35Sections = {11, 11, 10, 0};

class Fields {
 public:
  Fields(const json& j, std::string where) : j_(j), where_(std::move(where)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }

  int integer(const char* key) const {
    if (!has(key)) fail("{}: missing '{}'", where_, key);
    return to_int(j_[key], key);
  }
  int integer_or(const char* key, int fallback) const { return has(key) ? to_int(j_[key], key) : fallback; }

  double number_or(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_number()) fail("{}: '{}' is not a number", where_, key);
    return j_[key].get<double>();
  }

  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_boolean()) fail("{}: '{}' is not true/false", where_, key);
    return j_[key].get<bool>();
  }

  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_string()) fail("{}: '{}' is not a string", where_, key);
    return j_[key].get<std::string>();
  }

  const json& object_or_empty(const char* key) const {
    static const json empty = json::object();
    if (!has(key)) return empty;
    if (!j_[key].is_object()) fail("{}: '{}' is not an object", where_, key);
    return j_[key];
  }

  const json& raw() const { return j_; }
  const std::string& where() const { return where_; }

 private:
  int to_int(const json& v, const char* key) const {
    if (!v.is_number_integer()) fail("{}: '{}' is not an integer", where_, key);
    const int64_t x = v.get<int64_t>();
    if (x < 0 || x > (int64_t(1) << 30)) fail("{}: '{}' = {} is out of range", where_, key, x);
    return int(x);
  }

  const json& j_;
  std::string where_;
};

// RoPE: transformers 5 writes rope_parameters {rope_type, rope_theta, partial_rotary_factor,
// mrope_section}; older configs have rope_theta / partial_rotary_factor at top level and an
// optional rope_scaling.
void read_rope(const Fields& c, HfModelConfig& out) {
  HParams& hp = out.hp;
  const json& rp = c.has("rope_parameters") ? c.object_or_empty("rope_parameters") : c.object_or_empty("rope_scaling");
  const Fields r(rp, c.where() + " rope_parameters");
  const std::string type = r.string_or("rope_type", r.string_or("type", "default"));
  if (type != "default")
    fail("{}: RoPE type '{}' is not supported (only plain RoPE; no scaling)", c.where(), type);
  const double theta = r.number_or("rope_theta", c.number_or("rope_theta", 0));
  if (!(theta > 0)) fail("{}: no rope_theta (in rope_parameters or at top level)", c.where());
  hp.rope_theta = float(theta);

  const bool qwen35 = hp.arch == Arch::Qwen35;
  // llama.cpp's default for Qwen3.5 is 0.25 when the field is missing; Qwen3 rotates whole heads.
  const double factor = r.number_or("partial_rotary_factor", c.number_or("partial_rotary_factor", qwen35 ? 0.25 : 1.0));
  hp.n_rot = int(double(hp.head_dim) * factor);
  if (!qwen35 && hp.n_rot != hp.head_dim)
    fail("{}: partial_rotary_factor {} is not supported for Qwen3 (it rotates the whole head)", c.where(), factor);
  if (qwen35) {
    if (rp.contains("mrope_section")) {
      const json& s = rp["mrope_section"];
      if (!s.is_array() || s.size() > 4) fail("{}: mrope_section is not a list of up to 4 integers", c.where());
      for (const json& v : s) {
        if (!v.is_number_integer()) fail("{}: mrope_section has a non-integer entry", c.where());
        hp.rope_sections.push_back(v.get<int32_t>());
      }
      hp.rope_sections.resize(4, 0);  // [time, height, width, extra], as llama.cpp pads it
    } else {
      hp.rope_sections = kDefaultQwen35Sections;
    }
  }
}

// GGUF can only say "every Nth layer is full attention"; the HF config may list layer_types.
void read_layer_pattern(const Fields& c, HfModelConfig& out) {
  HParams& hp = out.hp;
  std::vector<std::string> types;
  if (c.has("layer_types")) {
    const json& lt = c.raw()["layer_types"];
    if (!lt.is_array()) fail("{}: 'layer_types' is not a list", c.where());
    for (const json& t : lt) {
      if (!t.is_string()) fail("{}: 'layer_types' has a non-string entry", c.where());
      types.push_back(t.get<std::string>());
    }
    if (int(types.size()) != hp.n_layer)
      fail("{}: layer_types has {} entries for num_hidden_layers = {}", c.where(), types.size(), hp.n_layer);
  }
  if (hp.arch == Arch::Qwen3) {
    for (size_t i = 0; i < types.size(); ++i)
      if (types[i] != "full_attention")
        fail("{}: layer {} is '{}'; only full attention is supported for Qwen3", c.where(), i, types[i]);
    return;
  }
  int interval = c.integer_or("full_attention_interval", 0);
  if (interval == 0 && !types.empty()) {
    const auto first = std::find(types.begin(), types.end(), "full_attention");
    interval = first == types.end() ? 0 : int(first - types.begin()) + 1;
  }
  if (interval == 0) interval = 4;  // the HF default
  hp.full_attn_interval = interval;
  for (size_t i = 0; i < types.size(); ++i) {
    const std::string want = (int(i) + 1) % interval == 0 ? "full_attention" : "linear_attention";
    if (types[i] != want)
      fail("{}: layer_types[{}] is '{}', but GGUF can only express 'every {}th layer is full attention' "
           "(which makes it '{}')",
           c.where(), i, types[i], interval, want);
  }
}

void read_common(const Fields& c, HfModelConfig& out) {
  HParams& hp = out.hp;
  hp.n_layer = c.integer("num_hidden_layers");
  hp.n_embd = c.integer("hidden_size");
  hp.n_ff = c.integer("intermediate_size");
  hp.n_head = c.integer("num_attention_heads");
  hp.n_head_kv = c.integer_or("num_key_value_heads", hp.n_head);
  hp.head_dim = c.integer_or("head_dim", hp.n_head ? hp.n_embd / hp.n_head : 0);
  hp.n_ctx_train = c.integer("max_position_embeddings");
  hp.rms_eps = float(c.number_or("rms_norm_eps", 1e-6));
  hp.n_vocab = c.integer("vocab_size");
  out.tie_word_embeddings = c.boolean_or("tie_word_embeddings", out.tie_word_embeddings);
  const std::string act = c.string_or("hidden_act", "silu");
  if (act != "silu") fail("{}: hidden_act '{}' is not supported (only silu)", c.where(), act);
  if (c.boolean_or("attention_bias", false)) fail("{}: attention_bias = true is not supported", c.where());
  if (c.boolean_or("use_sliding_window", false)) fail("{}: use_sliding_window = true is not supported", c.where());
  if (c.integer_or("num_experts", 0) > 0)
    fail("{}: a mixture-of-experts config (num_experts = {}); MoE models are not supported", c.where(),
         c.integer_or("num_experts", 0));
}

void read_qwen35_linear(const Fields& c, HfModelConfig& out) {
  HParams& hp = out.hp;
  hp.ssm_conv_kernel = c.integer("linear_conv_kernel_dim");
  hp.ssm_d_state = c.integer("linear_key_head_dim");
  hp.ssm_n_group = c.integer("linear_num_key_heads");
  hp.ssm_dt_rank = c.integer("linear_num_value_heads");
  const int d_v = c.integer("linear_value_head_dim");
  hp.ssm_d_inner = d_v * hp.ssm_dt_rank;
  hp.n_nextn = c.integer_or("mtp_num_hidden_layers", 0);
  if (d_v != hp.ssm_d_state)
    out.notes.push_back(fmt::format("linear key head dim {} != value head dim {}: deltaflash runs this, llama.cpp "
                                    "does not (it takes d_v = ssm.state_size)",
                                    hp.ssm_d_state, d_v));
}

struct ArchChoice {
  const char* hf_arch;
  const char* model_type;
  Arch arch;
  bool nested_text;  // config under text_config, tensors under model.language_model.
};

constexpr ArchChoice kSupported[] = {
    {"Qwen3_5ForCausalLM", "qwen3_5_text", Arch::Qwen35, false},
    {"Qwen3_5ForConditionalGeneration", "qwen3_5", Arch::Qwen35, true},
    {"Qwen3ForCausalLM", "qwen3", Arch::Qwen3, false},
};

const ArchChoice& choose_arch(const json& j, const std::string& where) {
  std::string name;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty()) {
    if (!j["architectures"][0].is_string()) fail("{}: architectures[0] is not a string", where);
    name = j["architectures"][0].get<std::string>();
    for (const ArchChoice& a : kSupported)
      if (name == a.hf_arch) return a;
  } else if (j.contains("model_type") && j["model_type"].is_string()) {
    name = "model_type " + j["model_type"].get<std::string>();
    for (const ArchChoice& a : kSupported)
      if (j["model_type"] == a.model_type) return a;
  } else {
    fail("{}: neither 'architectures' nor 'model_type' says what model this is", where);
  }
  fail("{}: {} is not supported; convert handles Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration (text "
       "tower) and Qwen3ForCausalLM",
       where, name);
}

}  // namespace

HfModelConfig parse_hf_config(const std::string& json_text, const std::string& where) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", where, e.what());
  }
  if (!j.is_object()) fail("{}: not a JSON object", where);
  const ArchChoice& a = choose_arch(j, where);

  HfModelConfig out;
  out.hf_arch = a.hf_arch;
  out.hp.arch = a.arch;
  out.text_prefix = a.nested_text ? "model.language_model." : "model.";
  // Released multimodal checkpoints may keep tie_word_embeddings at top level.
  out.tie_word_embeddings = Fields(j, where).boolean_or("tie_word_embeddings", false);
  const json* text = &j;
  std::string text_where = where;
  if (a.nested_text) {
    if (!j.contains("text_config") || !j["text_config"].is_object())
      fail("{}: {} needs a 'text_config' object", where, a.hf_arch);
    text = &j["text_config"];
    text_where = where + " text_config";
    out.has_vision = j.contains("vision_config");
    if (out.has_vision)
      out.notes.push_back("the vision tower (model.visual.*) is not converted (llama.cpp puts it in a separate mmproj file)");
  }
  const Fields c(*text, text_where);
  read_common(c, out);
  if (a.arch == Arch::Qwen35) read_qwen35_linear(c, out);
  read_layer_pattern(c, out);
  read_rope(c, out);
  out.hp.validate(text_where);
  return out;
}

HfModelConfig read_hf_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open (an HF checkpoint directory needs config.json)", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_hf_config(ss.str(), path);
}

}  // namespace df::convert
