#include "model/draft_model.h"

#include <cmath>

#include "gguf/gguf.h"
#include "model/backend_buffers.h"
#include "model/target_model.h"
#include "model/weight_binder.h"
#include "util/error.h"

namespace df {

struct DraftModel::Scratch : BackendBuffers {
  using BackendBuffers::BackendBuffers;
  float *x, *u, *tmp, *q, *k, *v, *attn, *gate, *up, *fused, *lhid, *logits;
  int32_t *tokens, *pos, *slots, *bound;  // rotary positions, storage slots, visible-slot bound
  std::vector<int32_t> h_tokens, h_pos, h_slots, h_bound;
};

DraftModel::DraftModel(const gguf::File& file, TargetModel& target, int block_size, int window)
    : hp_(DraftHParams::from_gguf(file)), target_(target), be_(target.backend()), window_(window) {
  if (window < 0) fail("draft window {} is negative", window);
  const HParams& t = target.hparams();
  for (int& id : hp_.target_layer_ids)  // files without explicit ids use the published spread
    if (id == -1) {
      hp_.target_layer_ids = DraftHParams::default_layer_ids(t.n_layer, hp_.n_target_layers());
      break;
    }
  hp_.validate_against(t, file.path());
  if (block_size != 0 && (block_size < 2 || block_size > hp_.block_size))
    fail("draft block {} is outside 2..{} (the drafter was trained with blocks of {})", block_size, hp_.block_size,
         hp_.block_size);
  block_ = block_size ? block_size : hp_.block_size;
  check_kv_type(target.options().kv_type, hp_.head_dim);  // the drafter's cache takes the target's type
  bind(file);
  target_.set_feature_layers(hp_.target_layer_ids);

  max_ingest_rows_ = target.options().max_batch_rows;
  const size_t B = size_t(block_), R = std::max<size_t>(B, size_t(max_ingest_rows_)), E = size_t(hp_.n_embd);
  const size_t HD = size_t(hp_.n_head) * hp_.head_dim, KVD = size_t(hp_.n_head_kv) * hp_.head_dim;
  s_ = std::make_unique<Scratch>(be_);
  Scratch& s = *s_;
  s.x = s.make<float>(B * E);
  s.u = s.make<float>(B * E);
  s.tmp = s.make<float>(B * E);
  s.q = s.make<float>(B * HD);
  s.attn = s.make<float>(B * HD);
  s.k = s.make<float>(R * KVD);
  s.v = s.make<float>(R * KVD);
  s.gate = s.make<float>(B * size_t(hp_.n_ff));
  s.up = s.make<float>(B * size_t(hp_.n_ff));
  s.fused = s.make<float>(size_t(max_ingest_rows_) * E);
  s.lhid = s.make<float>(B * E);
  s.logits = s.make<float>(B * size_t(t.n_vocab));
  s.tokens = s.make<int32_t>(B);
  s.pos = s.make<int32_t>(R);
  s.slots = s.make<int32_t>(R);
  s.bound = s.make<int32_t>(B);
}

DraftModel::~DraftModel() {
  s_.reset();
  for (void* p : owned_) be_.release(p);
}

void DraftModel::bind(const gguf::File& f) {
  Binder b(f, be_, owned_);
  const int64_t E = hp_.n_embd, F = hp_.n_ff, HD = int64_t(hp_.n_head) * hp_.head_dim;
  const int64_t KVD = int64_t(hp_.n_head_kv) * hp_.head_dim, D = hp_.head_dim;
  fc_ = b.matrix("dflash.fc.weight", E * hp_.n_target_layers(), E);
  hidden_norm_ = b.vector("dflash.hidden_norm.weight", {E});
  output_norm_ = b.vector("output_norm.weight", {E});
  layers_.resize(size_t(hp_.n_layer));
  for (int i = 0; i < hp_.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    DraftLayerWeights& L = layers_[size_t(i)];
    L.attn_norm = b.vector(p + "attn_norm.weight", {E});
    L.ffn_norm = b.vector(p + (b.has(p + "ffn_norm.weight") ? "ffn_norm.weight" : "post_attention_norm.weight"), {E});
    L.q_norm = b.vector(p + "attn_q_norm.weight", {D});
    L.k_norm = b.vector(p + "attn_k_norm.weight", {D});
    L.wq = b.matrix(p + "attn_q.weight", E, HD);
    L.wk = b.matrix(p + "attn_k.weight", E, KVD);
    L.wv = b.matrix(p + "attn_v.weight", E, KVD);
    L.wo = b.matrix(p + "attn_output.weight", HD, E);
    L.ffn_gate = b.matrix(p + "ffn_gate.weight", E, F);
    L.ffn_up = b.matrix(p + "ffn_up.weight", E, F);
    L.ffn_down = b.matrix(p + "ffn_down.weight", F, E);
  }
}

std::unique_ptr<SequenceStore> DraftModel::make_state(int n_seqs, int ctx) const {
  constexpr int kBlockTokens = 16;
  // Room for the block written after the context, never committed; a window bounds the slots.
  const int slots = window_ ? std::min(ctx, window_) + block_ : ctx + block_;
  const int blocks_per_seq = (slots + kBlockTokens - 1) / kBlockTokens;
  auto kv = std::make_unique<KvPool>(be_, hp_.n_layer, blocks_per_seq * n_seqs, kBlockTokens, hp_.n_head_kv,
                                     hp_.head_dim, target_.options().kv_type);
  return std::make_unique<SequenceStore>(std::move(kv), nullptr, slots);
}

// K (normed, rotated at positions s.pos) and V of `rows` fused context rows (s.fused), stored
// at slots s.slots.
void DraftModel::store_context_kv(const DraftLayerWeights& L, int rows, const SeqKv& seq, const KvLayerView& kv) {
  Scratch& s = *s_;
  const int D = hp_.head_dim, Hkv = hp_.n_head_kv;
  const Weight* kv_w[] = {&L.wk, &L.wv};
  float* kv_y[] = {s.k, s.v};
  be_.matmul_shared_input(kv_w, kv_y, 2, s.fused, rows);
  be_.rms_norm(s.k, size_t(D), L.k_norm, rows * Hkv, D, hp_.rms_eps, s.k, size_t(D));
  be_.rope_neox(s.k, size_t(Hkv) * D, size_t(D), rows, Hkv, s.pos, D, hp_.rope_theta);
  be_.kv_store(kv, seq, s.k, s.v, s.slots, rows);
}

void DraftModel::ingest(SequenceStore& st, int seq, const float* features, int rows) {
  const size_t E = size_t(hp_.n_embd), W = E * size_t(hp_.n_target_layers());
  if (window_ && rows > window_ + block_) {  // older rows would only be overwritten in the ring
    const int skip = rows - (window_ + block_);
    st.get(seq).n_past += skip;
    features += size_t(skip) * W;
    rows -= skip;
  }
  for (int r0 = 0; r0 < rows; r0 += max_ingest_rows_) {
    const int n = std::min(max_ingest_rows_, rows - r0);
    ingest_step(st, seq, features + size_t(r0) * W, n, n);
  }
}

void DraftModel::ingest_padded(SequenceStore& st, int seq, const float* features, int rows, int compute_rows) {
  if (rows < 1 || rows > compute_rows || compute_rows > block_ || compute_rows > max_ingest_rows_)
    fail("padded ingest of {} rows computed as {} (block {}, at most {} rows a step)", rows, compute_rows, block_,
         max_ingest_rows_);
  ingest_step(st, seq, features, rows, compute_rows);
}

void DraftModel::ingest_step(SequenceStore& st, int seq, const float* features, int keep, int compute) {
  Scratch& s = *s_;
  const size_t E = size_t(hp_.n_embd);
  StepScope step(be_);  // the few rows of a decode or verify step: replayed as a CUDA graph
  Sequence& q = st.get(seq);
  const int p0 = q.n_past;
  // Rows past `keep` reach at most p0 + block - 1: the region a draft block writes after the
  // context (make_state leaves room for it), overwritten by the next block before it is read.
  st.reserve(seq, std::min(p0 + compute, st.max_tokens_per_seq()));
  s.h_pos.resize(size_t(compute));
  s.h_slots.resize(size_t(compute));
  for (int i = 0; i < compute; ++i) {
    s.h_pos[size_t(i)] = p0 + i;
    s.h_slots[size_t(i)] = slot(p0 + i);
  }
  be_.upload(s.pos, s.h_pos.data(), size_t(compute) * sizeof(int32_t));
  be_.upload(s.slots, s.h_slots.data(), size_t(compute) * sizeof(int32_t));
  be_.matmul(fc_, features, compute, s.fused);
  be_.rms_norm(s.fused, E, hidden_norm_, compute, int(E), hp_.rms_eps, s.fused, E);
  const SeqKv sk{q.block_table.data(), int(q.block_table.size())};
  for (size_t l = 0; l < layers_.size(); ++l) store_context_kv(layers_[l], compute, sk, st.kv()->layer(int(l)));
  q.n_past = p0 + keep;
}

// One block layer; s.u holds the layer's normed input (attn_norm of s.x) on entry. The FFN's
// residual add is left to the caller, fused with the norm that reads its sum.
void DraftModel::layer(const DraftLayerWeights& L, int B, const SeqKv& seq, const KvLayerView& kv) {
  Scratch& s = *s_;
  const int H = hp_.n_head, Hkv = hp_.n_head_kv, D = hp_.head_dim;
  const size_t E = size_t(hp_.n_embd), HD = size_t(H) * D;
  const Weight* qkv_w[] = {&L.wq, &L.wk, &L.wv};
  float* qkv_y[] = {s.q, s.k, s.v};
  be_.matmul_shared_input(qkv_w, qkv_y, 3, s.u, B);
  be_.qk_norm_rope(s.q, size_t(D), H, L.q_norm, s.k, Hkv, L.k_norm, B, D, hp_.rms_eps, s.pos, D, hp_.rope_theta);
  be_.kv_store(kv, seq, s.k, s.v, s.slots, B);
  // Every block row's visible range ends at the block's last position: bidirectional block.
  be_.attention(s.q, HD, size_t(D), B, s.bound, H, kv, seq, 1.0f / std::sqrt(float(D)), s.attn);
  be_.matmul(L.wo, s.attn, B, s.tmp);
  be_.add_rms_norm(s.x, s.tmp, L.ffn_norm, B, int(E), hp_.rms_eps, s.u, E);
  const Weight* gate_up_w[] = {&L.ffn_gate, &L.ffn_up};
  float* gate_up_y[] = {s.gate, s.up};
  be_.matmul_shared_input(gate_up_w, gate_up_y, 2, s.u, B);
  be_.swiglu(s.gate, s.up, B, hp_.n_ff, s.gate);
  be_.matmul(L.ffn_down, s.gate, B, s.tmp);  // s.x += s.tmp: the caller's add_rms_norm
}

void DraftModel::draft(SequenceStore& st, int seq, int32_t anchor, std::vector<float>& logits) {
  StepScope step(be_);  // the block's forward may replay as one CUDA graph
  run_block(st, seq, anchor);
  const size_t V = size_t(target_.hparams().n_vocab);
  logits.resize(size_t(block_ - 1) * V);
  be_.download(logits.data(), s_->logits, logits.size() * sizeof(float));
}

void DraftModel::draft_top_k(SequenceStore& st, int seq, int32_t anchor, int k, int limit, std::vector<int32_t>& ids,
                             std::vector<float>& logits) {
  const int V = target_.hparams().n_vocab;
  if (limit <= 0 || limit > V) fail("draft_top_k: id limit {} outside 1..{}", limit, V);
  StepScope step(be_);
  run_block(st, seq, anchor);
  ids.resize(size_t(block_ - 1) * size_t(k));
  logits.resize(ids.size());
  be_.top_k_rows(s_->logits, block_ - 1, limit, size_t(V), k, ids.data(), logits.data());
}

void DraftModel::draft_greedy(SequenceStore& st, int seq, int32_t anchor, int limit, std::vector<int32_t>& ids) {
  const int V = target_.hparams().n_vocab;
  if (limit <= 0 || limit > V) fail("draft_greedy: id limit {} outside 1..{}", limit, V);
  StepScope step(be_);
  run_block(st, seq, anchor);
  ids.resize(size_t(block_ - 1));
  be_.argmax_rows(s_->logits, block_ - 1, limit, size_t(V), ids.data());
}

void DraftModel::draft_greedy_to(SequenceStore& st, int seq, int32_t anchor, int limit, int32_t* ids) {
  const int V = target_.hparams().n_vocab;
  if (limit <= 0 || limit > V) fail("draft_greedy_to: id limit {} outside 1..{}", limit, V);
  StepScope step(be_);
  run_block(st, seq, anchor);
  be_.argmax_rows_to(s_->logits, block_ - 1, limit, size_t(V), ids);
}

void DraftModel::run_block(SequenceStore& st, int seq, int32_t anchor) {
  Scratch& s = *s_;
  const int B = block_;
  const size_t E = size_t(hp_.n_embd), V = size_t(target_.hparams().n_vocab);
  if (anchor < 0 || size_t(anchor) >= V) fail("draft anchor token {} is outside the vocabulary", anchor);
  Sequence& q = st.get(seq);
  const int p0 = q.n_past;
  st.reserve(seq, std::min(p0 + B, st.max_tokens_per_seq()));
  s.h_tokens.assign(size_t(B), hp_.mask_token_id);
  s.h_tokens[0] = anchor;
  s.h_pos.resize(size_t(B));
  s.h_slots.resize(size_t(B));
  // Every block row sees every filled slot: the context (or its last W rows) and the block.
  s.h_bound.assign(size_t(B), (window_ ? std::min(p0 + B, window_ + B) : p0 + B) - 1);
  for (int i = 0; i < B; ++i) {
    s.h_pos[size_t(i)] = p0 + i;
    s.h_slots[size_t(i)] = slot(p0 + i);
  }
  be_.upload(s.tokens, s.h_tokens.data(), size_t(B) * sizeof(int32_t));
  be_.upload(s.pos, s.h_pos.data(), size_t(B) * sizeof(int32_t));
  be_.upload(s.slots, s.h_slots.data(), size_t(B) * sizeof(int32_t));
  be_.upload(s.bound, s.h_bound.data(), size_t(B) * sizeof(int32_t));
  be_.embed(target_.token_embedding(), s.tokens, B, s.x);
  const SeqKv sk{q.block_table.data(), int(q.block_table.size())};
  // Each layer's FFN residual add is fused with the norm that reads it: the next layer's
  // attn_norm, after the last layer the output norm (into s.lhid, all B rows).
  be_.rms_norm(s.x, E, layers_.front().attn_norm, B, int(E), hp_.rms_eps, s.u, E);
  for (size_t l = 0; l < layers_.size(); ++l) {
    layer(layers_[l], B, sk, st.kv()->layer(int(l)));
    const bool last = l + 1 == layers_.size();
    be_.add_rms_norm(s.x, s.tmp, last ? output_norm_ : layers_[l + 1].attn_norm, B, int(E), hp_.rms_eps,
                     last ? s.lhid : s.u, E);
  }
  // Row 0 is the anchor itself; rows 1..B-1 are the proposals.
  be_.matmul(target_.lm_head(), s.lhid + E, B - 1, s.logits);
}

}  // namespace df
