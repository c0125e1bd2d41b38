// Hugging Face config.json -> HParams for the architectures convert supports:
//   Qwen3_5ForCausalLM               (model_type qwen3_5_text; flat config; tensors model.*)
//   Qwen3_5ForConditionalGeneration  (model_type qwen3_5; text_config nested; tensors
//                                     model.language_model.*; the vision tower is not converted)
//   Qwen3ForCausalLM                 (model_type qwen3)
// Anything else (MoE variants, Qwen3-Next, other families) is a df::Error listing these.
#pragma once
#include <string>
#include <vector>

#include "model/hparams.h"

namespace df::convert {

struct HfModelConfig {
  std::string hf_arch;       // "Qwen3_5ForCausalLM", ...
  HParams hp;                // n_vocab = vocab_size; n_nextn = mtp_num_hidden_layers (0 if absent)
  bool tie_word_embeddings = false;
  std::string text_prefix;   // "model." or "model.language_model."
  bool has_vision = false;   // ConditionalGeneration: model.visual.* tensors are skipped
  std::vector<std::string> notes;  // facts worth telling the user (e.g. llama.cpp cannot run d_k != d_v)
};

// Throws df::Error naming the file and the field.
HfModelConfig read_hf_config(const std::string& config_json_path);
// The same from JSON text; `where` names the source in messages.
HfModelConfig parse_hf_config(const std::string& json_text, const std::string& where);

}  // namespace df::convert
