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

GreedyRun run_greedy(TargetModel& tm, const std::vector<int32_t>& prompt, int n_gen) {
  const size_t V = size_t(tm.hparams().n_vocab);
  auto st = tm.make_state(1, int(prompt.size()) + n_gen + 1);
  const int seq = st->create();
  GreedyRun run;
  run.kv_bytes = st->kv()->bytes();
  Batch b;
  ForwardOutput out;
  for (size_t i = 0; i < prompt.size(); ++i) b.add(seq, int(i), prompt[i], true);
  tm.forward(b, *st, out);
  run.prompt_logits = out.logits;
  std::vector<float> last(out.logits.end() - ptrdiff_t(V), out.logits.end());
  for (int i = 0; i < n_gen; ++i) {
    const int32_t next = int32_t(std::max_element(last.begin(), last.end()) - last.begin());
    run.gen.push_back(next);
    run.step_logits.push_back(last);
    b.clear();
    b.add(seq, int(prompt.size()) + i, next, true);
    tm.forward(b, *st, out);
    last = out.logits;
  }
  return run;
}

}  // namespace df::test
