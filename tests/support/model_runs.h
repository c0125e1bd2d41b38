// Running a model over a token list in tests: the logits of every position, with the tokens
// fed `batch` at a time through the Batch API (batch 1 = pure incremental decode).
#pragma once
#include <cstdint>
#include <vector>

#include "model/target_model.h"

namespace df::test {

std::vector<float> logits_of_all_positions(TargetModel& tm, const std::vector<int32_t>& tokens, int batch);

}  // namespace df::test
