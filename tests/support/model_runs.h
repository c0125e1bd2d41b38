// Running a model over a token list in tests: the logits of every position, with the tokens
// fed `batch` at a time through the Batch API (batch 1 = pure incremental decode).
#pragma once
#include <cstdint>
#include <vector>

#include "model/target_model.h"

namespace df::test {

std::vector<float> logits_of_all_positions(TargetModel& tm, const std::vector<int32_t>& tokens, int batch);

// The prompt in one batch (every row wants logits), then greedy decoding one token a forward.
struct GreedyRun {
  std::vector<float> prompt_logits;             // every prompt row
  std::vector<int32_t> gen;                     // greedy continuation
  std::vector<std::vector<float>> step_logits;  // the logits that chose gen[i]
  size_t kv_bytes = 0;                          // the sequence store's KV cache
};
GreedyRun run_greedy(TargetModel& tm, const std::vector<int32_t>& prompt, int n_gen);

}  // namespace df::test
