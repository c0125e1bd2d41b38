// make-model: writes GGUF files with random weights but exactly the tensor names, shapes and
// metadata llama.cpp writes for the qwen35 and qwen3 architectures, so tests and benchmarks have
// models without downloading any. Output is a pure function of the options (seed included),
// whatever the thread count.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/hparams.h"
#include "quant/types.h"

namespace df {

// Every dimension a named shape fixes can be overridden; unset fields keep the shape's value.
struct ShapeOverrides {
  std::optional<int> n_layer;        // main layers (MTP layers come on top)
  std::optional<int> n_embd;
  std::optional<int> n_ff;
  std::optional<int> n_head;
  std::optional<int> n_head_kv;
  std::optional<int> head_dim;
  std::optional<int> n_rot;          // qwen35 only (qwen3 rotates the whole head)
  std::optional<int> n_k_heads;      // Gated DeltaNet: key heads (ssm.group_count)
  std::optional<int> n_v_heads;      // value heads (ssm.time_step_rank)
  std::optional<int> d_k;            // key head size (ssm.state_size); also d_v unless given
  std::optional<int> d_v;            // value head size (ssm.inner_size = n_v_heads * d_v)
  std::optional<int> conv_kernel;
  std::optional<int> full_attn_interval;
  std::optional<bool> tied;          // output.weight absent (true) or present (false)
  std::optional<int> n_nextn;        // MTP blocks written as blk.{n_layer + j}.nextn.*
  std::optional<int64_t> vocab_size; // token_embd rows; extra rows get "[PAD<i>]" tokens
};

struct MakeModelOptions {
  std::string arch = "qwen35";   // qwen35 | qwen3
  std::string shape = "tiny";    // qwen35: tiny | 0.8b | 27b; qwen3: tiny | 0.6b
  ShapeOverrides overrides;
  // A ggml type name (f32, f16, bf16, q8_0, q4_k, q6_k, iq4_xs, ...) used for every matrix, or a
  // per-tensor recipe: mix-q4_k_m (llama.cpp's Q4_K_M), mix-iq4_xs (IQ4_XS as unsloth's Qwen3.5
  // UD files use it). Norms, biases, ssm_a and ssm_conv1d stay F32 as in converted files.
  std::string type = "q8_0";
  std::string vocab = "toy";     // toy | FILE.gguf (tokenizer.* keys copied) | DIR with tokenizer.json
  uint64_t seed = 0;
  std::string output;
  int threads = 0;               // 0 = all hardware threads
  std::function<void(size_t done, size_t total)> progress;  // bytes written so far
  std::function<void(const std::string&)> log;              // notices (type fallbacks); default stderr
};

struct PlannedTensorInfo {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;
};

// What a run would write: hyperparameters, vocabulary size and every tensor with its type.
struct ModelPlan {
  HParams hparams;
  bool tied = true;
  int64_t n_vocab = 0;
  std::vector<PlannedTensorInfo> tensors;
};

// Resolves shape, overrides, vocabulary and types without writing anything. Throws df::Error
// for invalid combinations.
ModelPlan plan_model(const MakeModelOptions& opt);

// Writes the file (via a temporary name). Throws df::Error.
void make_model(const MakeModelOptions& opt);

}  // namespace df
