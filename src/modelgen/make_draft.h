// make-model for DFlash drafters: a random-weight drafter GGUF in the published layout, shaped
// to fit a given target file (its hidden size, vocabulary and layer count), for the
// speculative-decoding tests and benchmarks.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace df {

struct MakeDraftOptions {
  std::string target;  // the target GGUF the drafter is for
  std::string output;
  std::string type = "q8_0";  // type of every matrix (ggml type name)
  uint64_t seed = 0;
  int threads = 0;
  // Unset: the published shape rule (5 layers for targets of 8+ layers, else 2; head size 128
  // from a hidden size of 1024, else 32; q width 4/5 of the hidden size; 4 query heads per KV
  // head; the target's FFN size; block 16; up to 5 target layers spread evenly).
  std::optional<int> n_layer, n_head, n_head_kv, head_dim, n_ff, block_size, n_target_layers;
  std::function<void(size_t done, size_t total)> progress;
};

void make_draft_model(const MakeDraftOptions& opt);

}  // namespace df
