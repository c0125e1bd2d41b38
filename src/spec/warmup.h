// Which steps the speculation policies do not time. With CUDA graphs a step that captures a
// graph or runs op by op is several times slower than the replays that follow (on the demo
// pair, timing them made plain steps look 2.5x dearer than they are, so speculation that did
// not pay was never turned off; later in a run, captures at new verify widths and block-table
// lengths made speculative steps look dearer, so it turned off where it paid). So: the first
// kWarmupRuns runs of each kind, and any step during which the backend captured or ran op by
// op (Backend::step_replay_counts; StepTimer tells).
#pragma once

#include "backend/backend.h"

namespace df {

constexpr int kWarmupRuns = 2;

// Whether the steps since construction (or the last restart()) only replayed CUDA graphs (or
// ran where steps are not replayed at all, e.g. on the CPU).
class StepTimer {
 public:
  explicit StepTimer(const Backend& be) : be_(be), at_(be.step_replay_counts()) {}
  void restart() { at_ = be_.step_replay_counts(); }
  bool representative() const {
    const Backend::StepReplayCounts now = be_.step_replay_counts();
    return now.direct == at_.direct && now.captured == at_.captured;
  }

 private:
  const Backend& be_;
  Backend::StepReplayCounts at_;
};

}  // namespace df
