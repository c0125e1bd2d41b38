#include "support/model_runs.h"

#include <algorithm>

namespace df::test {

std::vector<float> logits_of_all_positions(TargetModel& tm, const std::vector<int32_t>& tokens, int batch) {
  auto state = tm.make_state(1, int(tokens.size()));
  const int seq = state->create();
  std::vector<float> all;
  Batch b;
  ForwardOutput out;
  for (size_t i0 = 0; i0 < tokens.size(); i0 += size_t(batch)) {
    b.clear();
    for (size_t i = i0; i < std::min(tokens.size(), i0 + size_t(batch)); ++i) b.add(seq, int(i), tokens[i], true);
    tm.forward(b, *state, out);
    all.insert(all.end(), out.logits.begin(), out.logits.end());
  }
  return all;
}

}  // namespace df::test
