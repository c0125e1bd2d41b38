// The target model (qwen35 hybrid, or qwen3 dense as the case without DeltaNet layers):
// weights bound from a GGUF file and a forward pass over Batches, written as plain code over
// the Backend op set.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/batch.h"
#include "model/hparams.h"
#include "state/sequences.h"

namespace df::gguf {
class File;
}

namespace df {

struct LayerWeights {
  bool recurrent = false;
  const float* attn_norm = nullptr;
  const float* post_norm = nullptr;  // post_attention_norm (qwen35) or ffn_norm (qwen3)
  Weight ffn_gate, ffn_up, ffn_down;
  // attention layers
  Weight wq, wk, wv, wo;  // wq is [q_h | gate_h] per head for qwen35
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  // Gated DeltaNet layers
  Weight wqkv, wz, wbeta, walpha, ssm_out;
  const float* conv_w = nullptr;   // [conv_dim][K]
  const float* ssm_a = nullptr;    // -exp(A_log) per value head
  const float* dt_bias = nullptr;
  const float* ssm_norm = nullptr;
  int attn_index = -1;  // index among attention layers (KV pool layer)
  int gdn_index = -1;   // index among recurrent layers
};

struct ModelOptions {
  int max_batch_rows = 512;  // largest Batch a forward accepts (prefill chunk size)
  int max_logit_rows = 32;   // rows of logits computed per LM-head product (scratch size, not a limit)
  GgmlType kv_type = GgmlType::F16;  // KV cache storage: F16 (default), F32 (exact) or Q8_0
};

class TargetModel {
 public:
  // Binds weights (validated against hparams: presence, types, shapes) for the given backend.
  TargetModel(const gguf::File& file, Backend& be, const ModelOptions& opt);
  ~TargetModel();

  const HParams& hparams() const { return hp_; }
  Backend& backend() { return be_; }
  GdnShape gdn_shape() const;
  int n_attention_layers() const { return n_attn_; }
  int n_recurrent_layers() const { return n_gdn_; }
  const ModelOptions& options() const { return opt_; }

  // State pools sized for n_seqs sequences of up to ctx tokens each; spec_capacity > 0 makes
  // room for speculative segments of up to that many rows per sequence.
  std::unique_ptr<SequenceStore> make_state(int n_seqs, int ctx, int spec_capacity = 0) const;

  // Runs the batch, advancing each sequence's state. Throws df::Error on invalid batches.
  // A sequence's speculative rows (BatchRow::speculative) must be the whole segment and leave
  // it provisional: the next forward of that sequence requires a commit first.
  void forward(const Batch& batch, SequenceStore& state, ForwardOutput& out);
  // Keeps the first n_keep rows (1..rows) of the sequence's speculative segment: the recurrent
  // state and conv window become those after row n_keep-1 (the kept rows' delta rule replayed
  // from their kept inputs, the window copied) and later KV rows are left uncommitted. The
  // replays and copies are one step (StepScope);
  // a caller may open an outer step around the commit and the drafter's ingest of the kept rows,
  // so that CUDA replays both as one graph.
  void commit(SequenceStore& state, int seq, int n_keep);

  // Hidden-state capture for a drafter: after set_feature_layers(ids), every forward writes, for
  // each batch row r, the outputs of decoder layers ids[0..n) side by side into
  // features() + r * feature_width() (backend memory, valid until the next forward).
  void set_feature_layers(const std::vector<int>& layer_ids);
  const float* features() const;
  int feature_width() const;

  // Shared with a drafter: the token embedding and the LM head (the embedding when tied).
  const Weight& token_embedding() const { return tok_embd_; }
  const Weight& lm_head() const { return output_; }

 private:
  struct Scratch;
  void bind(const gguf::File& f);
  void attention_layer(const LayerWeights& L, const Batch& b, SequenceStore& st);
  void deltanet_layer(const LayerWeights& L, const Batch& b, SequenceStore& st);
  void keep_conv_windows(SequenceStore& st);
  void ffn(const LayerWeights& L, int rows);
  // ys[i] = x ws[i]^T over the batch's rows, run by run (Scratch::runs): prompt rows of
  // prefill-form segments through Backend::prompt_matmul_shared_input, the others through
  // matmul_shared_input.
  void products(const Weight* const* ws, float* const* ys, int n, const float* x);
  void capture_features(int layer, int rows);

  HParams hp_;
  Backend& be_;
  ModelOptions opt_;
  Weight tok_embd_, output_;
  const float* output_norm_ = nullptr;
  std::vector<LayerWeights> layers_;
  std::vector<int> feature_layers_;
  int n_attn_ = 0, n_gdn_ = 0;
  std::vector<void*> owned_;  // backend buffers owned by the model (converted small tensors)
  std::unique_ptr<Scratch> s_;
};

}  // namespace df
