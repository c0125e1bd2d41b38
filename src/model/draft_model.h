// The DFlash drafter: a few Qwen3-style decoder layers that propose a whole block of tokens in
// one forward, conditioned on hidden states captured from the target.
//
//   context feature of token t: f_t = RMSNorm(fc · [h_l1(t) | … | h_ln(t)]) ⊙ hidden_norm
//   block rows: [anchor, MASK × (B-1)], embedded with the target's embedding
//   per layer: x_n = RMSNorm(x) ⊙ attn_norm; Q from the block rows; K, V from the context
//   features (not normed again) and the block rows; per-head q/k RMSNorm; NeoX RoPE at absolute
//   positions; no mask (block rows see every context row and each other); o_proj, residual,
//   SwiGLU MLP, residual. Output: RMSNorm ⊙ output_norm, then the target's LM head.
//
// Context K/V live in the drafter's own paged KV cache: ingest() appends committed rows, draft()
// writes the block's K/V after them without committing it, so the next ingest overwrites them.
// With a context window W the cache is a ring of W + B slots (slot = position mod (W + B)): the
// block then sees the last W context rows. Keys are rotated at their absolute positions before
// they are stored and attention does not depend on the order of keys, so the ring needs no
// reordering; window 0 keeps the whole context.
#pragma once
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/draft_hparams.h"
#include "state/sequences.h"

namespace df {

namespace gguf {
class File;
}
class TargetModel;

struct DraftLayerWeights {
  const float* attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  Weight wq, wk, wv, wo, ffn_gate, ffn_up, ffn_down;
};

class DraftModel {
 public:
  // Binds the drafter's weights on the target's backend; validates the drafter against the
  // target (hidden size, vocabulary, layer ids, mask token). block_size 0 = the file's value;
  // otherwise 2..the file's value. Sets the target's feature layers.
  DraftModel(const gguf::File& file, TargetModel& target, int block_size = 0, int window = 0);
  ~DraftModel();

  const DraftHParams& hparams() const { return hp_; }
  int block_size() const { return block_; }
  int window() const { return window_; }
  int32_t mask_token() const { return hp_.mask_token_id; }

  // Context storage for n_seqs sequences of up to ctx tokens.
  std::unique_ptr<SequenceStore> make_state(int n_seqs, int ctx) const;

  // Appends the context features of `rows` target rows at positions n_past.. of seq. features
  // is backend memory, rows × n_target_layers·n_embd (TargetModel::features()).
  void ingest(SequenceStore& st, int seq, const float* features, int rows);
  // The same for the kept rows of a verify block (1 <= rows <= compute_rows <= block size, all
  // in one step): the rows past `rows` are computed too, from whatever features follow, and
  // their K/V land in the slots the next block overwrites, so the step's ops do not depend on
  // how many rows were kept and CUDA replays one graph for every count. features must hold
  // compute_rows rows.
  void ingest_padded(SequenceStore& st, int seq, const float* features, int rows, int compute_rows);
  // Drafts a block after the committed context: row 0 is `anchor` at position n_past, rows
  // 1..B-1 are mask tokens. logits receives (B-1) × n_vocab floats: row i predicts the token at
  // position n_past + i.
  void draft(SequenceStore& st, int seq, int32_t anchor, std::vector<float>& logits);
  // The same block, greedy: ids receives B-1 ids, row i's argmax among ids < limit, computed on
  // the backend (no logits download).
  void draft_greedy(SequenceStore& st, int seq, int32_t anchor, int limit, std::vector<int32_t>& ids);
  // The same ids left in backend memory (ids: B-1 int32, Backend::argmax_rows_to), without
  // waiting for the block: a verify step may read them there (Batch::add_speculative_from).
  void draft_greedy_to(SequenceStore& st, int seq, int32_t anchor, int limit, int32_t* ids);
  // The same block's rows as their k largest logits among ids < limit (Backend::top_k_rows):
  // (B-1) x k ids and logits, row-major.
  void draft_top_k(SequenceStore& st, int seq, int32_t anchor, int k, int limit, std::vector<int32_t>& ids,
                   std::vector<float>& logits);

 private:
  void run_block(SequenceStore& st, int seq, int32_t anchor);  // block logits into the scratch
  // One step of ingest: computes `compute` rows at positions n_past.., commits the first `keep`.
  void ingest_step(SequenceStore& st, int seq, const float* features, int keep, int compute);
  struct Scratch;
  void bind(const gguf::File& f);
  void layer(const DraftLayerWeights& L, int rows, const SeqKv& seq, const KvLayerView& kv);
  void store_context_kv(const DraftLayerWeights& L, int rows, const SeqKv& seq, const KvLayerView& kv);

  DraftHParams hp_;
  TargetModel& target_;
  Backend& be_;
  int block_ = 16;
  int window_ = 0;  // context rows the block sees; 0 = all
  // Storage slot of a position: itself, or its place in the ring when windowed.
  int slot(int pos) const { return window_ ? pos % (window_ + block_) : pos; }
  int max_ingest_rows_ = 0;
  Weight fc_;
  const float* hidden_norm_ = nullptr;
  const float* output_norm_ = nullptr;
  std::vector<DraftLayerWeights> layers_;
  std::vector<void*> owned_;
  std::unique_ptr<Scratch> s_;
};

}  // namespace df
