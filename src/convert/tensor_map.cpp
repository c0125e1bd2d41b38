#include "convert/tensor_map.h"

#include <charconv>
#include <span>
#include <string_view>

#include "util/error.h"

namespace df::convert {

namespace {

struct Rule {
  const char* hf;    // suffix after the prefix (global), or after "layers.N." (per layer)
  const char* gguf;  // full name (global) or suffix after "blk.N."
  ValueOp op = ValueOp::None;
  VHeadAxis v_heads = VHeadAxis::None;
};

// Per decoder layer, Qwen3.5. Every "*norm.weight" gets +1 except the gated DeltaNet norm.
constexpr Rule kQwen35Layer[] = {
    {"input_layernorm.weight", "attn_norm.weight", ValueOp::AddOne},
    {"post_attention_layernorm.weight", "post_attention_norm.weight", ValueOp::AddOne},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    // gated full attention; q_proj rows stay per head [q_h | gate_h]
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight", ValueOp::AddOne},
    {"self_attn.k_norm.weight", "attn_k_norm.weight", ValueOp::AddOne},
    // gated DeltaNet
    {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight", ValueOp::None, VHeadAxis::QkvRows},
    {"linear_attn.in_proj_z.weight", "attn_gate.weight", ValueOp::None, VHeadAxis::Rows},
    {"linear_attn.in_proj_b.weight", "ssm_beta.weight", ValueOp::None, VHeadAxis::RowPerHead},
    {"linear_attn.in_proj_a.weight", "ssm_alpha.weight", ValueOp::None, VHeadAxis::RowPerHead},
    {"linear_attn.conv1d.weight", "ssm_conv1d.weight", ValueOp::None, VHeadAxis::ConvChannels},
    {"linear_attn.dt_bias", "ssm_dt.bias", ValueOp::None, VHeadAxis::Elements},
    {"linear_attn.A_log", "ssm_a", ValueOp::NegExp, VHeadAxis::Elements},
    {"linear_attn.norm.weight", "ssm_norm.weight"},
    {"linear_attn.out_proj.weight", "ssm_out.weight", ValueOp::None, VHeadAxis::Columns},
};

// Per decoder layer, Qwen3: plain RMSNorm (no +1), and the pre-FFN norm is ffn_norm.
constexpr Rule kQwen3Layer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
};

// Top level in every layout (absent when the embeddings are tied).
constexpr Rule kLmHead = {"lm_head.weight", "output.weight"};

constexpr Rule kQwen35Global[] = {
    {"embed_tokens.weight", "token_embd.weight"},
    {"norm.weight", "output_norm.weight", ValueOp::AddOne},
};
constexpr Rule kQwen3Global[] = {
    {"embed_tokens.weight", "token_embd.weight"},
    {"norm.weight", "output_norm.weight"},
};

// The MTP head of Qwen3.5 (after "mtp."), stored in block n_layer as llama.cpp's newer converter
// does. Its decoder layer (mtp.layers.J.*) follows kQwen35Layer in block n_layer + J.
constexpr Rule kQwen35MtpHead[] = {
    {"fc.weight", "nextn.eh_proj.weight"},
    {"pre_fc_norm_embedding.weight", "nextn.enorm.weight", ValueOp::AddOne},
    {"pre_fc_norm_hidden.weight", "nextn.hnorm.weight", ValueOp::AddOne},
    {"norm.weight", "nextn.shared_head_norm.weight", ValueOp::AddOne},
};

const Rule* find_rule(std::span<const Rule> rules, std::string_view hf_suffix) {
  for (const Rule& r : rules)
    if (hf_suffix == r.hf) return &r;
  return nullptr;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

bool strip_prefix(std::string_view s, std::string_view p, std::string_view& rest) {
  if (!starts_with(s, p)) return false;
  rest = s.substr(p.size());
  return true;
}

// "12.rest" -> index 12, rest "rest"; false when s does not start with "<digits>.".
bool split_index(std::string_view s, int& index, std::string_view& rest) {
  const size_t dot = s.find('.');
  if (dot == 0 || dot == std::string_view::npos) return false;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + dot, index);
  if (ec != std::errc() || p != s.data() + dot || index < 0) return false;
  rest = s.substr(dot + 1);
  return true;
}

MappedTensor mapped(const Rule& r, std::string gguf_name) {
  MappedTensor m;
  m.gguf_name = std::move(gguf_name);
  m.op = r.op;
  m.v_heads = r.v_heads;
  return m;
}

MappedTensor skipped(std::string reason) {
  MappedTensor m;
  m.skip = true;
  m.skip_reason = std::move(reason);
  return m;
}

[[noreturn]] void cannot_map(const std::string& name, const HfModelConfig& cfg) {
  fail("cannot map tensor '{}' of {} to a GGUF name (not a tensor of this architecture?)", name, cfg.hf_arch);
}

MappedTensor map_mtp(const std::string& name, std::string_view rest, const HfModelConfig& cfg, bool keep_mtp) {
  if (cfg.hp.arch != Arch::Qwen35) cannot_map(name, cfg);
  if (!keep_mtp) return skipped("MTP (--no-mtp)");
  const int n_main = cfg.hp.n_layer;
  int j = 0;
  std::string_view indexed, layer_rest;
  if (strip_prefix(rest, "layers.", indexed) && split_index(indexed, j, layer_rest)) {
    const Rule* r = find_rule(kQwen35Layer, layer_rest);
    if (r == nullptr) cannot_map(name, cfg);
    MappedTensor m = mapped(*r, fmt::format("blk.{}.{}", n_main + j, r->gguf));
    m.mtp_layer = j;
    return m;
  }
  const Rule* r = find_rule(kQwen35MtpHead, rest);
  if (r == nullptr) cannot_map(name, cfg);
  return mapped(*r, fmt::format("blk.{}.{}", n_main, r->gguf));
}

}  // namespace

MappedTensor map_hf_tensor(const std::string& name, const HfModelConfig& cfg, bool keep_mtp) {
  const bool qwen35 = cfg.hp.arch == Arch::Qwen35;
  std::string_view n = name;
  // Not weights: precomputed RoPE frequencies some exports include.
  if (n.ends_with(".rotary_emb.inv_freq")) return skipped("RoPE frequency buffer");
  if (starts_with(n, "model.visual.") || starts_with(n, "visual.")) return skipped("vision tower");
  if (n == kLmHead.hf) return mapped(kLmHead, kLmHead.gguf);
  std::string_view mtp;
  if (strip_prefix(n, "mtp.", mtp) || strip_prefix(n, "model.mtp.", mtp)) return map_mtp(name, mtp, cfg, keep_mtp);
  // The text tower sits under model.language_model. in multimodal checkpoints; like llama.cpp,
  // accept either prefix whatever the config says.
  std::string_view rest;
  if (!strip_prefix(n, "model.language_model.", rest) && !strip_prefix(n, "model.", rest)) cannot_map(name, cfg);

  int layer = 0;
  std::string_view indexed, layer_rest;
  if (strip_prefix(rest, "layers.", indexed) && split_index(indexed, layer, layer_rest)) {
    if (layer >= cfg.hp.n_layer) cannot_map(name, cfg);
    const Rule* r = qwen35 ? find_rule(kQwen35Layer, layer_rest) : find_rule(kQwen3Layer, layer_rest);
    if (r == nullptr) cannot_map(name, cfg);
    return mapped(*r, fmt::format("blk.{}.{}", layer, r->gguf));
  }
  const Rule* r = qwen35 ? find_rule(kQwen35Global, rest) : find_rule(kQwen3Global, rest);
  if (r == nullptr) cannot_map(name, cfg);
  return mapped(*r, r->gguf);
}

}  // namespace df::convert
