#include "modelgen/tensor_plan.h"

#include <cmath>

#include "util/error.h"

namespace df::modelgen {

bool is_quantizable(TensorRole role) {
  switch (role) {
    case TensorRole::Norm:
    case TensorRole::SsmConv:
    case TensorRole::SsmDt:
    case TensorRole::SsmA:
      return false;
    default:
      return true;
  }
}

namespace {

// Scales that keep activations O(1) through any depth:
// - matrices reading a normed activation (rms ~1) get std 1/sqrt(fan_in), so outputs have rms ~1;
// - matrices writing into the residual stream are further scaled by 1/sqrt(2 * n_layer) (GPT-2
//   style), so the residual after all layers stays O(1) instead of growing with depth;
// - embeddings/LM head get std 3/sqrt(n_embd): a normed hidden state then gives logits with a
//   std of about 3, a peaked but not degenerate distribution.
struct Scales {
  float in_proj;      // 1/sqrt(n_embd)
  float residual;     // 1/sqrt(2 * n_layer)
  float embedding;
};

WeightInit normal(float std) { return {WeightInit::Kind::Normal, 0.0f, std}; }
// Norm weights in GGUF already include the +1 of Qwen3.5's zero-centred norm: around 1.
WeightInit norm_weight() { return {WeightInit::Kind::Normal, 1.0f, 0.05f}; }

class Planner {
 public:
  Planner(const HParams& hp, int64_t n_vocab) : hp_(hp), n_vocab_(n_vocab) {
    const float e = float(hp.n_embd);
    sc_.in_proj = 1.0f / std::sqrt(e);
    sc_.residual = 1.0f / std::sqrt(2.0f * float(hp.n_layer));
    sc_.embedding = 3.0f / std::sqrt(e);
  }

  std::vector<PlannedTensor> run(bool tied) {
    const int64_t E = hp_.n_embd;
    add("token_embd.weight", {E, n_vocab_}, TensorRole::TokenEmbd, -1, normal(sc_.embedding));
    for (int il = 0; il < hp_.n_layer + hp_.n_nextn; ++il) block(il);
    add("output_norm.weight", {E}, TensorRole::Norm, -1, norm_weight());
    if (!tied) add("output.weight", {E, n_vocab_}, TensorRole::Output, -1, normal(sc_.embedding));
    return std::move(out_);
  }

 private:
  void add(std::string name, std::vector<int64_t> ne, TensorRole role, int layer, WeightInit init) {
    out_.push_back(PlannedTensor{std::move(name), std::move(ne), role, layer, init, GgmlType::F32});
  }

  std::string blk(int il, const char* suffix) const { return fmt::format("blk.{}.{}", il, suffix); }

  void block(int il) {
    const int64_t E = hp_.n_embd, F = hp_.n_ff;
    const bool mtp = il >= hp_.n_layer;  // MTP blocks are always full attention
    const bool recurrent = !mtp && hp_.is_recurrent(il);
    add(blk(il, "attn_norm.weight"), {E}, TensorRole::Norm, il, norm_weight());
    if (recurrent) gated_deltanet(il);
    else attention(il);
    if (mtp) nextn(il);
    // qwen3 names the pre-FFN norm ffn_norm; qwen35 names it post_attention_norm.
    const char* post_norm = hp_.arch == Arch::Qwen35 ? "post_attention_norm.weight" : "ffn_norm.weight";
    add(blk(il, post_norm), {E}, TensorRole::Norm, il, norm_weight());
    add(blk(il, "ffn_gate.weight"), {E, F}, TensorRole::FfnGate, il, normal(sc_.in_proj));
    add(blk(il, "ffn_up.weight"), {E, F}, TensorRole::FfnUp, il, normal(sc_.in_proj));
    add(blk(il, "ffn_down.weight"), {F, E}, TensorRole::FfnDown, il,
        normal(sc_.residual / std::sqrt(float(F))));
  }

  void attention(int il) {
    const int64_t E = hp_.n_embd, D = hp_.head_dim;
    const int64_t q_rows = hp_.n_head * D;
    // qwen35's q projection also produces the per-head output gate: [q_h | gate_h] per head.
    const int64_t q_out = hp_.arch == Arch::Qwen35 ? 2 * q_rows : q_rows;
    const int64_t kv_rows = hp_.n_head_kv * D;
    add(blk(il, "attn_q.weight"), {E, q_out}, TensorRole::AttnQ, il, normal(sc_.in_proj));
    add(blk(il, "attn_k.weight"), {E, kv_rows}, TensorRole::AttnK, il, normal(sc_.in_proj));
    add(blk(il, "attn_v.weight"), {E, kv_rows}, TensorRole::AttnV, il, normal(sc_.in_proj));
    add(blk(il, "attn_output.weight"), {q_rows, E}, TensorRole::AttnOut, il,
        normal(sc_.residual / std::sqrt(float(q_rows))));
    add(blk(il, "attn_q_norm.weight"), {D}, TensorRole::Norm, il, norm_weight());
    add(blk(il, "attn_k_norm.weight"), {D}, TensorRole::Norm, il, norm_weight());
  }

  void gated_deltanet(int il) {
    const int64_t E = hp_.n_embd, n_v = hp_.ssm_dt_rank;
    const int64_t inner = hp_.ssm_d_inner, conv_dim = hp_.conv_dim(), K = hp_.ssm_conv_kernel;
    add(blk(il, "attn_qkv.weight"), {E, conv_dim}, TensorRole::AttnQkv, il, normal(sc_.in_proj));
    add(blk(il, "attn_gate.weight"), {E, inner}, TensorRole::AttnGate, il, normal(sc_.in_proj));
    // Depthwise causal conv, rms-preserving for a window of K rms-1 inputs.
    add(blk(il, "ssm_conv1d.weight"), {K, conv_dim}, TensorRole::SsmConv, il,
        normal(1.0f / std::sqrt(float(K))));
    // dt bias around -3: softplus(alpha + dt) is then ~0.05-0.3, so the per-token decay
    // exp(ssm_a * softplus(..)) stays around 0.6-0.95 and the state remembers several tokens
    // (a short memory would hide state-handling bugs in tests).
    add(blk(il, "ssm_dt.bias"), {n_v}, TensorRole::SsmDt, il, {WeightInit::Kind::Normal, -3.0f, 0.5f});
    add(blk(il, "ssm_a"), {n_v}, TensorRole::SsmA, il, {WeightInit::Kind::NegExp, 0.0f, 1.0f});
    add(blk(il, "ssm_beta.weight"), {E, n_v}, TensorRole::SsmBeta, il, normal(sc_.in_proj));
    add(blk(il, "ssm_alpha.weight"), {E, n_v}, TensorRole::SsmAlpha, il, normal(sc_.in_proj));
    // The gated output norm has no +1 in any form: plain weights around 1.
    add(blk(il, "ssm_norm.weight"), {hp_.d_v()}, TensorRole::Norm, il, norm_weight());
    add(blk(il, "ssm_out.weight"), {inner, E}, TensorRole::SsmOut, il,
        normal(sc_.residual / std::sqrt(float(inner))));
  }

  // The MTP head of llama.cpp's newer converter: a full-attention block plus these.
  void nextn(int il) {
    const int64_t E = hp_.n_embd;
    add(blk(il, "nextn.eh_proj.weight"), {2 * E, E}, TensorRole::NextnEhProj, il,
        normal(1.0f / std::sqrt(float(2 * E))));
    add(blk(il, "nextn.enorm.weight"), {E}, TensorRole::Norm, il, norm_weight());
    add(blk(il, "nextn.hnorm.weight"), {E}, TensorRole::Norm, il, norm_weight());
    add(blk(il, "nextn.shared_head_norm.weight"), {E}, TensorRole::Norm, il, norm_weight());
  }

  const HParams& hp_;
  int64_t n_vocab_;
  Scales sc_;
  std::vector<PlannedTensor> out_;
};

}  // namespace

std::vector<PlannedTensor> plan_tensors(const HParams& hp, bool tied, int64_t n_vocab) {
  if (n_vocab <= 0) fail("make-model: vocabulary size {} is not positive", n_vocab);
  return Planner(hp, n_vocab).run(tied);
}

}  // namespace df::modelgen
