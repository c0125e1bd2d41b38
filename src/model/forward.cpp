// The forward pass, as a textbook: embed, then per layer
//   h = x + Mixer(RMSNorm(x));  x = h + MLP(RMSNorm(h))
// where Mixer is gated attention or Gated DeltaNet, then RMSNorm + LM head for the rows that
// want logits. Matrix products run over all rows of the batch at once; attention and the
// recurrent parts run per sequence segment.
#include <algorithm>
#include <cmath>

#include "gguf/gguf.h"
#include "model/backend_buffers.h"
#include "model/target_model.h"
#include "util/error.h"

namespace df {

namespace {
// Segments at least this long use the chunked DeltaNet form (prefill); shorter ones the
// recurrent form (decode, verify). Both give the same result to fp32 round-off.
constexpr int kChunkedMinRows = 32;
// Prefill segments at least this long take the backend's prompt products (on CUDA an f16 GEMM
// that pays from about here: a 512-row chunk of the 27B shape 107 ms vs 167 on the integer
// kernels, a 32-row one 36 vs 25, H100, docs/performance.md session 12).
constexpr int kPromptProductMinRows = 128;
}  // namespace

struct TargetModel::Scratch : BackendBuffers {
  using BackendBuffers::BackendBuffers;
  float *x, *u, *tmp, *qg, *k, *v, *attn, *qkv, *conv, *z, *alpha, *beta, *gdn, *gate, *up, *lhid, *logits;
  float* features = nullptr;  // [max_batch_rows][n_feature_layers * n_embd] when capturing
  int32_t *tokens, *pos;
  int32_t* commit_rows;  // commit's n_keep: the replay's row limit and the conv window's source row
  // Host copies of the current batch, and its segments.
  std::vector<int32_t> h_tokens, h_pos;
  struct Segment {
    int seq, begin, n;
    bool speculative;
    // Prompt rows in the prefill form: the chunked DeltaNet.
    bool prefill() const { return !speculative && n >= kChunkedMinRows; }
    // Long prompt segments: the backend's prompt products, which may give them other bits than
    // decode rows (speculation never sees these rows).
    bool prompt_products() const { return prefill() && n >= kPromptProductMinRows; }
  };
  std::vector<Segment> segs;
  // Consecutive segments of one product kind (products()).
  struct RowRun {
    int begin, n;
    bool prompt;
  };
  std::vector<RowRun> runs;
};

TargetModel::TargetModel(const gguf::File& file, Backend& be, const ModelOptions& opt)
    : hp_(HParams::from_gguf(file)), be_(be), opt_(opt) {
  if (opt_.max_batch_rows < 1 || opt_.max_logit_rows < 1) fail("model options: batch sizes must be positive");
  bind(file);
  if (n_attn_ > 0) check_kv_type(opt_.kv_type, hp_.head_dim);  // at load, not at the first make_state
  const size_t R = size_t(opt_.max_batch_rows), E = size_t(hp_.n_embd);
  const size_t HD = size_t(hp_.n_head) * hp_.head_dim, KVD = size_t(hp_.n_head_kv) * hp_.head_dim;
  const GdnShape g = gdn_shape();
  s_ = std::make_unique<Scratch>(be_);
  Scratch& s = *s_;
  s.x = s.make<float>(R * E);
  s.u = s.make<float>(R * E);
  s.tmp = s.make<float>(R * E);
  s.qg = s.make<float>(R * 2 * HD);
  s.k = s.make<float>(R * KVD);
  s.v = s.make<float>(R * KVD);
  s.attn = s.make<float>(R * HD);
  s.qkv = s.make<float>(R * size_t(g.conv_dim()));
  s.conv = s.make<float>(R * size_t(g.conv_dim()));
  s.z = s.make<float>(R * size_t(g.n_v) * g.d_v);
  s.gdn = s.make<float>(R * size_t(g.n_v) * g.d_v);
  s.alpha = s.make<float>(2 * R * size_t(g.n_v));  // alpha then beta: a speculative segment's
  s.beta = s.alpha + R * size_t(g.n_v);              // gates of both go to its replay record in one copy
  s.gate = s.make<float>(R * size_t(hp_.n_ff));
  s.up = s.make<float>(R * size_t(hp_.n_ff));
  s.lhid = s.make<float>(size_t(opt_.max_logit_rows) * E);
  s.logits = s.make<float>(size_t(opt_.max_logit_rows) * size_t(hp_.n_vocab));
  s.tokens = s.make<int32_t>(R);
  s.pos = s.make<int32_t>(R);
  s.commit_rows = s.make<int32_t>(1);
}

TargetModel::~TargetModel() {
  s_.reset();
  for (void* p : owned_) be_.release(p);
}

GdnShape TargetModel::gdn_shape() const {
  if (hp_.arch != Arch::Qwen35) return GdnShape{};
  return GdnShape{hp_.ssm_n_group, hp_.ssm_dt_rank, hp_.ssm_d_state, hp_.d_v()};
}

std::unique_ptr<SequenceStore> TargetModel::make_state(int n_seqs, int ctx, int spec_capacity) const {
  constexpr int kBlockTokens = 16;
  std::unique_ptr<KvPool> kv;
  std::unique_ptr<RecurrentPool> rec;
  if (n_attn_ > 0) {
    const int blocks_per_seq = (ctx + kBlockTokens - 1) / kBlockTokens;
    kv = std::make_unique<KvPool>(be_, n_attn_, blocks_per_seq * n_seqs, kBlockTokens, hp_.n_head_kv, hp_.head_dim,
                                  opt_.kv_type);
  }
  if (n_gdn_ > 0)
    rec = std::make_unique<RecurrentPool>(be_, n_gdn_, n_seqs, gdn_shape(), hp_.ssm_conv_kernel, spec_capacity);
  return std::make_unique<SequenceStore>(std::move(kv), std::move(rec), ctx);
}

void TargetModel::forward(const Batch& batch, SequenceStore& st, ForwardOutput& out) {
  Scratch& s = *s_;
  const int R = int(batch.rows.size());
  if (R == 0) fail("empty batch");
  if (R > opt_.max_batch_rows) fail("batch of {} rows exceeds the maximum of {}", R, opt_.max_batch_rows);

  // Validate and split into segments before touching any state.
  s.h_tokens.resize(size_t(R));
  s.h_pos.resize(size_t(R));
  s.segs.clear();
  out.logit_rows.clear();
  for (size_t i = 0; i < batch.device_tokens.size(); ++i) {
    const DeviceTokens& d = batch.device_tokens[i];
    if (d.ids == nullptr || d.n < 1 || d.row < 0 || d.row + d.n > R ||
        (i > 0 && d.row < batch.device_tokens[i - 1].row + batch.device_tokens[i - 1].n))
      fail("device tokens for rows {}..{} of a batch of {} (in row order, not overlapping)", d.row, d.row + d.n - 1, R);
  }
  size_t dev = 0;  // the device-token run at or after row r
  for (int r = 0; r < R; ++r) {
    const BatchRow& row = batch.rows[size_t(r)];
    while (dev < batch.device_tokens.size() && batch.device_tokens[dev].row + batch.device_tokens[dev].n <= r) ++dev;
    const bool on_device = dev < batch.device_tokens.size() && batch.device_tokens[dev].row <= r;
    if (on_device && row.token != Batch::kDeviceToken)
      fail("row {} takes its token from device memory but holds token {}", r, row.token);
    if (!on_device && (row.token < 0 || row.token >= hp_.n_vocab))
      fail("token id {} is outside the vocabulary (0..{})", row.token, hp_.n_vocab - 1);
    if (row.parent != -1) fail("tree rows (parent != -1) are not supported yet");
    s.h_tokens[size_t(r)] = on_device ? 0 : row.token;  // a device row's id is copied in below
    s.h_pos[size_t(r)] = row.pos;
    if (row.want_logits) out.logit_rows.push_back(r);
    if (s.segs.empty() || s.segs.back().seq != row.seq) {
      for (const auto& sg : s.segs)
        if (sg.seq == row.seq) fail("rows of sequence {} are not contiguous in the batch", row.seq);
      s.segs.push_back({row.seq, r, 0, row.speculative});
    } else if (row.pos != batch.rows[size_t(r) - 1].pos + 1) {
      fail("positions of sequence {} are not consecutive in the batch", row.seq);
    } else if (row.speculative != s.segs.back().speculative) {
      fail("sequence {} mixes speculative and ordinary rows in one batch", row.seq);
    }
    s.segs.back().n++;
  }
  s.runs.clear();
  for (const auto& sg : s.segs) {
    if (!s.runs.empty() && s.runs.back().prompt == sg.prompt_products()) s.runs.back().n += sg.n;
    else s.runs.push_back({sg.begin, sg.n, sg.prompt_products()});
  }
  for (const auto& sg : s.segs) {
    Sequence& q = st.get(sg.seq);
    const int p0 = batch.rows[size_t(sg.begin)].pos;
    if (q.spec_rows > 0) fail("sequence {} has an uncommitted speculative segment", sg.seq);
    if (sg.speculative && n_gdn_ > 0 && sg.n > st.recurrent()->spec_capacity())
      fail("speculative segment of {} rows exceeds the state's room for {} speculative rows", sg.n,
           st.recurrent()->spec_capacity());
    // Recurrent state cannot rewind (rollback replays kept rows from the state before them),
    // so a hybrid model only appends; attention-only models may overwrite uncommitted positions.
    if (n_gdn_ > 0 ? p0 != q.n_past : (p0 < 0 || p0 > q.n_past))
      fail("sequence {} is at position {} but the batch starts at {}", sg.seq, q.n_past, p0);
    st.reserve(sg.seq, p0 + sg.n);
  }

  // From here to the logits' download the step's ops may be replayed as one CUDA graph.
  StepScope step(be_);
  be_.upload(s.tokens, s.h_tokens.data(), size_t(R) * sizeof(int32_t));
  for (const DeviceTokens& d : batch.device_tokens)  // in the step: a CUDA graph holds the copies
    be_.copy(s.tokens + d.row, d.ids, size_t(d.n) * sizeof(int32_t));
  be_.upload(s.pos, s.h_pos.data(), size_t(R) * sizeof(int32_t));
  const size_t E = size_t(hp_.n_embd);
  keep_conv_windows(st);
  be_.embed(tok_embd_, s.tokens, R, s.x);
  // Each residual add is fused with the norm that reads its result (the next layer's input
  // norm after the FFN), except the last, whose norm runs per logit row below.
  if (!layers_.empty()) be_.rms_norm(s.x, E, layers_[0].attn_norm, R, int(E), hp_.rms_eps, s.u, E);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerWeights& L = layers_[l];
    if (L.recurrent) {
      deltanet_layer(L, batch, st);
    } else {
      attention_layer(L, batch, st);
    }
    be_.add_rms_norm(s.x, s.tmp, L.post_norm, R, int(E), hp_.rms_eps, s.u, E);
    ffn(L, R);
    if (l + 1 < layers_.size())
      be_.add_rms_norm(s.x, s.tmp, layers_[l + 1].attn_norm, R, int(E), hp_.rms_eps, s.u, E);
    else
      be_.add(s.x, s.tmp, int64_t(R) * int64_t(E));
    capture_features(int(l), R);
  }
  for (const auto& sg : s.segs) {
    Sequence& q = st.get(sg.seq);
    q.n_past = batch.rows[size_t(sg.begin + sg.n - 1)].pos + 1;
    if (sg.speculative) {
      q.spec_begin = batch.rows[size_t(sg.begin)].pos;
      q.spec_rows = sg.n;
    }
  }

  // LM head over the rows that asked, max_logit_rows at a time.
  const size_t V = size_t(hp_.n_vocab);
  const int n_logits = int(out.logit_rows.size());
  const bool greedy = out.greedy_only > 0;
  const int top_k = out.top_k_only;
  if (greedy && out.greedy_only > int(V)) fail("greedy_only {} exceeds the vocabulary ({})", out.greedy_only, V);
  if (greedy && top_k > 0) fail("greedy_only and top_k_only are exclusive");
  if (top_k > 0 && (out.top_k_limit > int(V) || top_k > std::min(out.top_k_limit, kMaxDeviceTopK)))
    fail("top_k_only {} outside 1..min(top_k_limit {}, {}) (vocabulary {})", top_k, out.top_k_limit, kMaxDeviceTopK, V);
  out.logits.resize(greedy || top_k > 0 ? 0 : size_t(n_logits) * V);
  out.greedy.resize(greedy && !out.greedy_to ? size_t(n_logits) : 0);
  out.top_ids.resize(size_t(n_logits) * size_t(std::max(top_k, 0)));
  out.top_logits.resize(out.top_ids.size());
  for (int i0 = 0; i0 < n_logits; i0 += opt_.max_logit_rows) {
    const int n = std::min(opt_.max_logit_rows, n_logits - i0);
    // Runs of consecutive rows (a verify block, one row per decoding sequence) in one launch each.
    for (int i = 0; i < n;) {
      const int r0 = out.logit_rows[size_t(i0 + i)];
      int run = 1;
      while (i + run < n && out.logit_rows[size_t(i0 + i + run)] == r0 + run) ++run;
      be_.rms_norm(s.x + size_t(r0) * E, E, output_norm_, run, int(E), hp_.rms_eps, s.lhid + size_t(i) * E, E);
      i += run;
    }
    be_.matmul(output_, s.lhid, n, s.logits);
    if (greedy && out.greedy_to)
      be_.argmax_rows_to(s.logits, n, out.greedy_only, V, out.greedy_to + i0);
    else if (greedy)
      be_.argmax_rows(s.logits, n, out.greedy_only, V, out.greedy.data() + i0);
    else if (top_k > 0)
      be_.top_k_rows(s.logits, n, out.top_k_limit, V, top_k, out.top_ids.data() + size_t(i0) * top_k,
                     out.top_logits.data() + size_t(i0) * top_k);
    else
      be_.download(out.logits.data() + size_t(i0) * V, s.logits, size_t(n) * V * sizeof(float));
  }
}

void TargetModel::attention_layer(const LayerWeights& L, const Batch& batch, SequenceStore& st) {
  Scratch& s = *s_;
  const int R = int(batch.rows.size());
  const int H = hp_.n_head, Hkv = hp_.n_head_kv, D = hp_.head_dim;
  const bool gated = hp_.arch == Arch::Qwen35;
  const size_t q_head_stride = size_t(gated ? 2 : 1) * D;  // qwen35 interleaves [q_h | gate_h]
  const size_t q_row_stride = q_head_stride * H;
  const Weight* qkv_w[] = {&L.wq, &L.wk, &L.wv};
  float* qkv_y[] = {s.qg, s.k, s.v};
  products(qkv_w, qkv_y, 3, s.u);
  be_.qk_norm_rope(s.qg, q_head_stride, H, L.q_norm, s.k, Hkv, L.k_norm, R, D, hp_.rms_eps, s.pos, hp_.n_rot,
                   hp_.rope_theta);
  const KvLayerView kv = st.kv()->layer(L.attn_index);
  const size_t kvd = size_t(Hkv) * D, hd = size_t(H) * D;
  for (const auto& sg : s.segs) {
    const Sequence& q = st.get(sg.seq);
    const SeqKv seq{q.block_table.data(), int(q.block_table.size())};
    be_.kv_store(kv, seq, s.k + sg.begin * kvd, s.v + sg.begin * kvd, s.pos + sg.begin, sg.n);
    be_.attention(s.qg + sg.begin * q_row_stride, q_row_stride, q_head_stride, sg.n, s.pos + sg.begin, H, kv, seq,
                  1.0f / std::sqrt(float(D)), s.attn + sg.begin * hd);
  }
  if (gated) be_.mul_sigmoid(s.attn, size_t(D), s.qg + D, q_head_stride, R, H, D);
  const Weight* wo = &L.wo;
  products(&wo, &s.tmp, 1, s.attn);
}

void TargetModel::deltanet_layer(const LayerWeights& L, const Batch& batch, SequenceStore& st) {
  Scratch& s = *s_;
  const int R = int(batch.rows.size());
  const GdnShape g = gdn_shape();
  const size_t CD = size_t(g.conv_dim()), VD = size_t(g.n_v) * g.d_v;
  const Weight* in_w[] = {&L.wqkv, &L.wz, &L.wbeta, &L.walpha};
  float* in_y[] = {s.qkv, s.z, s.beta, s.alpha};
  products(in_w, in_y, 4, s.u);
  RecurrentPool& rec = *st.recurrent();
  const int hist = hp_.ssm_conv_kernel - 1;
  for (const auto& sg : s.segs) {
    const int slot = st.get(sg.seq).recurrent_slot;
    if (sg.speculative)  // after the window before (keep_conv_windows): the segment's inputs
      be_.copy(rec.conv_history(slot, L.gdn_index) + size_t(hist) * CD, s.qkv + sg.begin * CD,
               size_t(sg.n) * CD * sizeof(float));
    // Conv, q/k norms and gates of the segment's rows: per row the same math as over the whole
    // batch, so the results do not depend on how a batch splits into segments. A speculative
    // segment's q | k | v go straight to its replay record, its gates after them (one copy).
    float* conv_out = sg.speculative ? rec.replay_qkv(slot, L.gdn_index) : s.conv + sg.begin * CD;
    be_.gdn_conv_norm_gates(g, s.qkv + sg.begin * CD, CD, sg.n, L.conv_w, hp_.ssm_conv_kernel,
                            rec.conv(slot, L.gdn_index), conv_out, CD, hp_.rms_eps, 1.0f / std::sqrt(float(g.d_k)),
                            s.beta + sg.begin * g.n_v, s.alpha + sg.begin * g.n_v, L.ssm_a, L.dt_bias);
    if (sg.speculative)
      be_.copy_2d(rec.replay_gates(slot, L.gdn_index), size_t(rec.spec_capacity()) * g.n_v * sizeof(float),
                  s.alpha + sg.begin * g.n_v, size_t(s.beta - s.alpha) * sizeof(float),
                  size_t(sg.n) * g.n_v * sizeof(float), 2);
  }
  for (const auto& sg : s.segs) {
    const int slot = st.get(sg.seq).recurrent_slot;
    // A speculative segment leaves the state as it was: commit replays the kept rows.
    const float* qkv = sg.speculative ? rec.replay_qkv(slot, L.gdn_index) : s.conv + sg.begin * CD;
    be_.gdn_delta_rule(g, qkv, CD, s.alpha + sg.begin * g.n_v, s.beta + sg.begin * g.n_v, sg.n,
                       rec.state(slot, L.gdn_index), s.gdn + sg.begin * VD, sg.prefill(), sg.speculative);
  }
  be_.gated_rms_norm(s.gdn, s.z, L.ssm_norm, R, g.n_v, g.d_v, hp_.rms_eps);
  const Weight* out_w = &L.ssm_out;
  products(&out_w, &s.tmp, 1, s.gdn);
}

// Speculative segments keep [window before ; segment inputs] per DeltaNet layer so commit can
// rebuild the window after any kept prefix. The windows before are copied for every layer at
// once, before any layer's conv moves them: one strided copy per segment, not one per layer.
void TargetModel::keep_conv_windows(SequenceStore& st) {
  if (n_gdn_ == 0) return;
  RecurrentPool& rec = *st.recurrent();
  for (const auto& sg : s_->segs) {
    if (!sg.speculative) continue;
    const int slot = st.get(sg.seq).recurrent_slot;
    be_.copy_2d(rec.conv_history(slot, 0), rec.spec_layer_stride() * sizeof(float), rec.conv(slot, 0),
                rec.layer_stride() * sizeof(float), rec.conv_floats() * sizeof(float), n_gdn_);
  }
}

void TargetModel::ffn(const LayerWeights& L, int rows) {
  Scratch& s = *s_;
  const Weight* gate_up_w[] = {&L.ffn_gate, &L.ffn_up};
  float* gate_up_y[] = {s.gate, s.up};
  products(gate_up_w, gate_up_y, 2, s.u);
  be_.swiglu(s.gate, s.up, rows, hp_.n_ff, s.gate);
  const Weight* down = &L.ffn_down;
  products(&down, &s.tmp, 1, s.gate);
}

void TargetModel::products(const Weight* const* ws, float* const* ys, int n, const float* x) {
  const std::vector<Scratch::RowRun>& runs = s_->runs;
  constexpr int kMax = 4;  // the most products that share an input above
  if (n > kMax) fail("products: {} weights share one input (at most {})", n, kMax);
  for (const Scratch::RowRun& run : runs) {
    float* y[kMax];
    for (int i = 0; i < n; ++i) y[i] = ys[i] + size_t(run.begin) * size_t(ws[i]->n_out);
    const float* xr = x + size_t(run.begin) * size_t(ws[0]->n_in);
    if (run.prompt) be_.prompt_matmul_shared_input(ws, y, n, xr, run.n);
    else be_.matmul_shared_input(ws, y, n, xr, run.n);
  }
}

void TargetModel::commit(SequenceStore& st, int seq, int n_keep) {
  Sequence& q = st.get(seq);
  if (q.spec_rows <= 0) fail("sequence {} has no speculative segment to commit", seq);
  if (n_keep < 1 || n_keep > q.spec_rows)
    fail("commit of {} rows: the speculative segment has {}", n_keep, q.spec_rows);
  if (n_gdn_ > 0) {
    // Per DeltaNet layer, the delta rule over the kept rows from the state the verify pass left
    // unchanged (the same kernel on the same inputs, so the same bits as if those rows alone
    // had run), then one strided copy of every layer's conv window. n_keep is read from device
    // memory by both, so the step is the same whatever n_keep: one CUDA graph replays every
    // commit, and callers may put the drafter's ingest of the kept rows in the same step.
    StepScope step(be_);
    RecurrentPool& rec = *st.recurrent();
    const int slot = q.recurrent_slot;
    const GdnShape g = gdn_shape();
    const size_t CD = size_t(g.conv_dim()), gates_rows = size_t(rec.spec_capacity()) * g.n_v;
    const int32_t row = n_keep;
    be_.upload(s_->commit_rows, &row, sizeof(row));
    for (int l = 0; l < n_gdn_; ++l) {
      const float* gates = rec.replay_gates(slot, l);
      be_.gdn_delta_rule(g, rec.replay_qkv(slot, l), CD, gates, gates + gates_rows, q.spec_rows, rec.state(slot, l),
                         s_->gdn, /*chunked=*/false, /*keep_state=*/false, s_->commit_rows);
    }
    const size_t pitch = rec.layer_stride() * sizeof(float), ck_pitch = rec.spec_layer_stride() * sizeof(float);
    // The window after row n_keep-1 is rows [n_keep, n_keep + K-1) of [old window ; inputs].
    be_.copy_2d_indexed(rec.conv(slot, 0), pitch, rec.conv_history(slot, 0), ck_pitch, rec.conv_floats() * sizeof(float),
                        n_gdn_, s_->commit_rows, CD * sizeof(float));
  }
  q.n_past = q.spec_begin + n_keep;
  q.spec_begin = -1;
  q.spec_rows = 0;
}

void TargetModel::set_feature_layers(const std::vector<int>& layer_ids) {
  for (int id : layer_ids)
    if (id < 0 || id >= hp_.n_layer) fail("feature layer {} is outside the model's {} layers", id, hp_.n_layer);
  feature_layers_ = layer_ids;
  Scratch& s = *s_;
  if (s.features) {
    s.release(s.features);
    s.features = nullptr;
  }
  if (!layer_ids.empty()) s.features = s.make<float>(size_t(opt_.max_batch_rows) * size_t(feature_width()));
}

const float* TargetModel::features() const { return s_->features; }

int TargetModel::feature_width() const { return int(feature_layers_.size()) * hp_.n_embd; }

void TargetModel::capture_features(int layer, int rows) {
  for (size_t j = 0; j < feature_layers_.size(); ++j) {
    if (feature_layers_[j] != layer) continue;
    const size_t E = size_t(hp_.n_embd);
    be_.copy_2d(s_->features + j * E, size_t(feature_width()) * sizeof(float), s_->x, E * sizeof(float),
                E * sizeof(float), rows);
  }
}

}  // namespace df
