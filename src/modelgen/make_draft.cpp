#include "modelgen/make_draft.h"

#include <cmath>

#include "gguf/gguf.h"
#include "model/draft_hparams.h"
#include "model/hparams.h"
#include "modelgen/random_fill.h"
#include "modelgen/type_mix.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace df {

namespace {

using modelgen::PlannedTensor;
using modelgen::TensorRole;
using modelgen::WeightInit;

DraftHParams draft_shape(const MakeDraftOptions& o, const HParams& t, int64_t n_vocab) {
  DraftHParams h;
  h.n_embd = t.n_embd;
  h.n_layer = o.n_layer.value_or(t.n_layer >= 8 ? 5 : 2);
  h.head_dim = o.head_dim.value_or(t.n_embd >= 1024 ? 128 : 32);
  h.n_head = o.n_head.value_or(std::max(2, t.n_embd * 4 / 5 / h.head_dim));
  h.n_head_kv = o.n_head_kv.value_or(std::max(1, h.n_head / 4));
  h.n_ff = o.n_ff.value_or(t.n_ff);
  h.n_ctx_train = t.n_ctx_train;
  h.rms_eps = t.rms_eps;
  h.rope_theta = 1e7f;
  h.n_vocab = n_vocab;
  h.block_size = o.block_size.value_or(16);
  h.mask_token_id = int32_t(n_vocab - 1);  // a padding row in generated vocabularies
  const int n_f = o.n_target_layers.value_or(std::max(1, std::min(5, t.n_layer - 1)));
  h.target_layer_ids = DraftHParams::default_layer_ids(t.n_layer, n_f);
  h.validate("make-model (drafter)");
  return h;
}

}  // namespace

void make_draft_model(const MakeDraftOptions& opt) {
  if (opt.output.empty()) fail("make-model: no output path (-o OUT.gguf)");
  if (opt.target.empty()) fail("make-model: a drafter needs --target TARGET.gguf");
  auto target = gguf::File::open(opt.target);
  HParams thp = HParams::from_gguf(*target);
  const int64_t n_vocab = target->tensor("token_embd.weight").ne[1];
  thp.n_vocab = int(n_vocab);
  const DraftHParams h = draft_shape(opt, thp, n_vocab);
  h.validate_against(thp, opt.target);

  const int64_t E = h.n_embd, F = h.n_ff, D = h.head_dim;
  const int64_t HD = int64_t(h.n_head) * D, KVD = int64_t(h.n_head_kv) * D;
  const float in_std = 1.0f / std::sqrt(float(E)), res_std = in_std / std::sqrt(2.0f * float(h.n_layer));
  std::vector<PlannedTensor> ts;
  auto add = [&](std::string name, std::vector<int64_t> ne, TensorRole role, int layer, WeightInit init) {
    ts.push_back(PlannedTensor{std::move(name), std::move(ne), role, layer, init, GgmlType::F32});
  };
  const WeightInit norm{WeightInit::Kind::Normal, 1.0f, 0.05f};
  auto normal = [](float s) { return WeightInit{WeightInit::Kind::Normal, 0.0f, s}; };
  add("dflash.fc.weight", {E * h.n_target_layers(), E}, TensorRole::AttnQ, -1,
      normal(1.0f / std::sqrt(float(E * h.n_target_layers()))));
  add("dflash.hidden_norm.weight", {E}, TensorRole::Norm, -1, norm);
  add("output_norm.weight", {E}, TensorRole::Norm, -1, norm);
  for (int i = 0; i < h.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    add(p + "attn_norm.weight", {E}, TensorRole::Norm, i, norm);
    add(p + "attn_q.weight", {E, HD}, TensorRole::AttnQ, i, normal(in_std));
    add(p + "attn_k.weight", {E, KVD}, TensorRole::AttnK, i, normal(in_std));
    add(p + "attn_v.weight", {E, KVD}, TensorRole::AttnV, i, normal(in_std));
    add(p + "attn_output.weight", {HD, E}, TensorRole::AttnOut, i, normal(res_std));
    add(p + "attn_q_norm.weight", {D}, TensorRole::Norm, i, norm);
    add(p + "attn_k_norm.weight", {D}, TensorRole::Norm, i, norm);
    add(p + "ffn_norm.weight", {E}, TensorRole::Norm, i, norm);
    add(p + "ffn_gate.weight", {E, F}, TensorRole::FfnGate, i, normal(in_std));
    add(p + "ffn_up.weight", {E, F}, TensorRole::FfnUp, i, normal(in_std));
    add(p + "ffn_down.weight", {F, E}, TensorRole::FfnDown, i, normal(res_std));
  }
  modelgen::assign_types(ts, modelgen::parse_type_spec(opt.type), thp, [](const std::string&) {});

  gguf::Writer w;
  h.to_gguf(w);
  w.set("general.type", gguf::Value::of_string("model"));
  w.set("general.name", gguf::Value::of_string("DFlash-Draft (random weights) for " + opt.target));
  w.set("general.quantization_version", gguf::Value::of_u32(2));
  ThreadPool pool(opt.threads);
  for (const PlannedTensor& t : ts)
    w.add_tensor(t.name, t.type, t.ne, [&t, &opt, &pool](uint8_t* dst) { modelgen::fill_tensor(t, opt.seed, dst, pool); });
  w.write(opt.output, 32, opt.progress);
}

}  // namespace df
