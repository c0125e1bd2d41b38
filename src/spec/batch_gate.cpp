#include "spec/batch_gate.h"

#include "spec/warmup.h"

namespace df {

bool BatchSpecGate::allow() {
  if (samples_[1] < kWarmup) return true;  // speculation measured first, then plain steps
  if (samples_[0] < kWarmup) return false;
  if (next_probe_ < 0) next_probe_ = steps_ + reprobe_steps_;  // both measured: judged from here on
  if (steps_ < probe_until_) return probing_mode_;
  const bool best = rate_[1] >= rate_[0];
  if (steps_ >= next_probe_) {  // re-measure the mode not in use
    probing_mode_ = !best;
    probe_until_ = steps_ + kProbe;
    next_probe_ = steps_ + reprobe_steps_;
    return probing_mode_;
  }
  return best;
}

void BatchSpecGate::record(bool speculated, double seconds, int committed, bool timed) {
  if (seconds <= 0 || committed <= 0) return;
  const int m = speculated ? 1 : 0;
  ++steps_;
  if (runs_[m]++ < kWarmupRuns || !timed) return;  // a new step's first runs (spec/warmup.h)
  const double r = double(committed) / seconds;
  rate_[m] = samples_[m] == 0 ? r : (1 - kEma) * rate_[m] + kEma * r;
  ++samples_[m];
}

}  // namespace df
