// Hyperparameters of the target architectures, read from (and written to) GGUF metadata.
// One struct for qwen35 and qwen3: qwen3 is the case with no DeltaNet layers, no output gate
// and full RoPE. The metadata key names live here and nowhere else.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace df::gguf {
class File;
class Writer;
}

namespace df {

enum class Arch { Qwen35, Qwen3 };
const char* arch_name(Arch a);  // "qwen35", "qwen3"

struct HParams {
  Arch arch = Arch::Qwen35;
  int n_layer = 0;             // main layers (block_count minus nextn/MTP layers)
  int n_nextn = 0;             // MTP layers stored after the main ones (ignored by the forward)
  int n_embd = 0;
  int n_ff = 0;
  int n_ctx_train = 0;
  int n_head = 0, n_head_kv = 0;
  int head_dim = 0;            // attention.key_length (== value_length)
  int n_rot = 0;               // rope.dimension_count
  float rope_theta = 0;
  float rms_eps = 1e-6f;
  std::vector<int32_t> rope_sections;  // qwen35: [11,11,10,0]
  int full_attn_interval = 4;  // qwen35 only
  // Gated DeltaNet (qwen35 only)
  int ssm_conv_kernel = 4;
  int ssm_d_state = 128;       // d_k (== d_v)
  int ssm_n_group = 0;         // n_k heads
  int ssm_dt_rank = 0;         // n_v heads
  int ssm_d_inner = 0;         // n_v * d_v
  int n_vocab = 0;             // rows of token_embd

  bool is_recurrent(int layer) const {  // a Gated DeltaNet layer?
    return arch == Arch::Qwen35 && (layer + 1) % full_attn_interval != 0;
  }
  int d_v() const { return ssm_dt_rank ? ssm_d_inner / ssm_dt_rank : 0; }
  int conv_dim() const { return 2 * ssm_n_group * ssm_d_state + ssm_d_inner; }

  // Reads `<arch>.*` keys; throws df::Error naming the key and file. n_vocab is left for the
  // loader (it comes from the token_embd shape).
  static HParams from_gguf(const gguf::File& f);
  // Writes the same keys (make-model, convert).
  void to_gguf(gguf::Writer& w) const;
  // Checks internal consistency (head counts divide, dims positive); throws df::Error.
  void validate(const std::string& where) const;
};

}  // namespace df
