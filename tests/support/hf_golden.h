// The Hugging Face golden fixtures (tests/data/hf-golden, see train/golden/README.md): tiny
// checkpoints with token sequences and the float64 logits transformers computed for them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace df::test {

struct GoldenSequence {
  std::vector<int32_t> tokens;
  std::vector<double> logits;  // [tokens.size() x n_vocab], row-major
};

struct GoldenVariant {
  std::string name;
  std::string dir;              // the checkpoint directory
  std::string hf_class;         // "Qwen3_5ForCausalLM" / "Qwen3ForCausalLM"
  int n_vocab = 0;
  bool llama_cpp_can_run = false;  // qwen3, or qwen35 with linear key head dim == value head dim
  double max_abs_logit = 0;     // over all sequences
  std::vector<GoldenSequence> sequences;
};

// Variant names in manifest order.
std::vector<std::string> golden_variant_names(const std::string& data_dir);
GoldenVariant load_golden_variant(const std::string& data_dir, const std::string& name);

// max |ours[i] - golden[i]|; the sizes must match.
double max_abs_diff(const std::vector<float>& ours, const std::vector<double>& golden);

}  // namespace df::test
