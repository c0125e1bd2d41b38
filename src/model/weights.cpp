// Binding GGUF tensors to the model: every tensor is checked for presence, type and exact
// shape before use, with errors naming the file and tensor.
#include <algorithm>
#include <vector>

#include "gguf/gguf.h"
#include "model/target_model.h"
#include "model/weight_binder.h"
#include "quant/dequant.h"
#include "util/error.h"

namespace df {

namespace {
constexpr int kMaxHeadDim = 512;  // CPU kernels keep per-head vectors on the stack
}  // namespace

void TargetModel::bind(const gguf::File& f) {
  const HParams& hp = hp_;
  if (hp.head_dim > kMaxHeadDim) fail("{}: attention head dim {} exceeds {}", f.path(), hp.head_dim, kMaxHeadDim);
  if (hp.arch == Arch::Qwen35 && (hp.ssm_d_state > kMaxHeadDim || hp.d_v() > kMaxHeadDim))
    fail("{}: DeltaNet head dims {}/{} exceed {}", f.path(), hp.ssm_d_state, hp.d_v(), kMaxHeadDim);
  Binder b(f, be_, owned_);
  const int64_t E = hp.n_embd, F = hp.n_ff, H = hp.n_head, Hkv = hp.n_head_kv, D = hp.head_dim;

  const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight");
  if (emb == nullptr) fail("{}: missing tensor 'token_embd.weight'", f.path());
  hp_.n_vocab = int(emb->ne[1]);
  const int64_t V = hp_.n_vocab;
  tok_embd_ = b.embedding("token_embd.weight", E, V);
  output_norm_ = b.vector("output_norm.weight", {E});
  // Tied embeddings: no output.weight, the embedding table doubles as the LM head.
  output_ = b.has("output.weight") ? b.matrix("output.weight", E, V) : tok_embd_;

  const bool gated_q = hp.arch == Arch::Qwen35;
  const GdnShape g = gdn_shape();
  for (int il = 0; il < hp.n_layer; ++il) {
    const std::string p = fmt::format("blk.{}.", il);
    LayerWeights L;
    L.recurrent = hp.is_recurrent(il);
    L.attn_norm = b.vector(p + "attn_norm.weight", {E});
    L.post_norm = b.vector(p + (hp.arch == Arch::Qwen35 ? "post_attention_norm.weight" : "ffn_norm.weight"), {E});
    L.ffn_gate = b.matrix(p + "ffn_gate.weight", E, F);
    L.ffn_up = b.matrix(p + "ffn_up.weight", E, F);
    L.ffn_down = b.matrix(p + "ffn_down.weight", F, E);
    if (L.recurrent) {
      L.gdn_index = n_gdn_++;
      L.wqkv = b.matrix(p + "attn_qkv.weight", E, g.conv_dim());
      L.wz = b.matrix(p + "attn_gate.weight", E, int64_t(g.n_v) * g.d_v);
      L.wbeta = b.matrix(p + "ssm_beta.weight", E, g.n_v);
      L.walpha = b.matrix(p + "ssm_alpha.weight", E, g.n_v);
      L.ssm_out = b.matrix(p + "ssm_out.weight", int64_t(g.n_v) * g.d_v, E);
      L.conv_w = b.vector(p + "ssm_conv1d.weight", {hp.ssm_conv_kernel, g.conv_dim()});
      L.ssm_a = b.vector(p + "ssm_a", {g.n_v});
      L.dt_bias = b.vector(p + "ssm_dt.bias", {g.n_v});
      L.ssm_norm = b.vector(p + "ssm_norm.weight", {g.d_v});
    } else {
      L.attn_index = n_attn_++;
      L.wq = b.matrix(p + "attn_q.weight", E, (gated_q ? 2 : 1) * H * D);
      L.wk = b.matrix(p + "attn_k.weight", E, Hkv * D);
      L.wv = b.matrix(p + "attn_v.weight", E, Hkv * D);
      L.wo = b.matrix(p + "attn_output.weight", H * D, E);
      L.q_norm = b.vector(p + "attn_q_norm.weight", {D});
      L.k_norm = b.vector(p + "attn_k_norm.weight", {D});
    }
    layers_.push_back(L);
  }
}

}  // namespace df
