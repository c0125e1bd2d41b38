// Hyperparameters of a DFlash drafter GGUF (arch `qwen35-dflash-draft`, the layout published
// drafters are converted to; docs/design.md "DFlash drafter"): a few Qwen3-style decoder layers
// without embedding or LM head (both are the target's), a fusion `fc` over the hidden states of
// `target_layer_ids`, the block size it was trained with, and the mask token that fills a block.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace df {

namespace gguf {
class File;
class Writer;
}  // namespace gguf

struct HParams;

inline constexpr const char* kDraftArch = "qwen35-dflash-draft";

struct DraftHParams {
  int n_layer = 0;
  int n_embd = 0;  // must equal the target's hidden size
  int n_ff = 0;
  int n_head = 0, n_head_kv = 0;
  int head_dim = 0;  // attention.key_length (== value_length)
  int n_ctx_train = 0;
  float rms_eps = 1e-6f;
  float rope_theta = 1e6f;
  int64_t n_vocab = 0;  // informational: the target's vocabulary size
  int block_size = 16;
  int32_t mask_token_id = -1;
  std::vector<int> target_layer_ids;  // decoder layers of the target whose outputs are fused

  int n_target_layers() const { return int(target_layer_ids.size()); }

  // Reads `qwen35-dflash-draft.*`; throws df::Error naming the file and key.
  static DraftHParams from_gguf(const gguf::File& f);
  void to_gguf(gguf::Writer& w) const;
  void validate(const std::string& where) const;
  // Checks the drafter fits the target: hidden size, vocabulary, layer ids, mask token.
  void validate_against(const HParams& target, const std::string& where) const;
  // The published default when a file has no explicit ids: n layers spread from layer 1 to
  // layer n_target_layer - 2 in equal integer steps.
  static std::vector<int> default_layer_ids(int n_target_layer, int n);
};

}  // namespace df
