// Whether requests that share a step (continuous batching) may speculate, from measured
// throughput rather than constants: the committed tokens per second of shared steps with
// speculation allowed and of shared steps without it. Each request's own policy (SpecPolicy)
// still picks its width when speculation is allowed; this gate answers the question a single
// request cannot, since a shared step's time belongs to all of its requests: does speculating
// together beat decoding together? On a CPU, where verify rows cost nearly what they would one
// by one, it does not; on a GPU, where 16 rows cost little more than one, it can.
//
// Both modes are measured first (kWarmup steps each, after kWarmupRuns untimed ones); then the faster one is used and the other
// re-measured for kProbe steps after every `reprobe_steps` shared steps, as the balance moves
// with the batch's makeup and context lengths.
#pragma once

namespace df {

class BatchSpecGate {
 public:
  explicit BatchSpecGate(int reprobe_steps = 64) : reprobe_steps_(reprobe_steps) {}
  // Whether the next shared step lets its requests speculate.
  bool allow();
  // A finished shared step: whether any request speculated in it, its wall time, and the tokens
  // it committed (one per plain decode row, the kept rows of each verified block); timed =
  // false for a step that captured a CUDA graph or ran op by op (spec/warmup.h): not timed.
  void record(bool speculated, double seconds, int committed, bool timed = true);
  // Measured committed tokens per second (0 until measured) without / with speculation.
  double rate(bool speculated) const { return rate_[speculated ? 1 : 0]; }

 private:
  static constexpr int kWarmup = 4;   // steps measured in each mode before judging
  static constexpr int kProbe = 4;    // steps of the other mode at each re-measurement
  static constexpr double kEma = 0.25;
  int reprobe_steps_;
  double rate_[2] = {0, 0};
  int samples_[2] = {0, 0};
  int runs_[2] = {0, 0};     // steps per mode, untimed warm-up runs included
  long steps_ = 0;           // shared steps recorded
  long probe_until_ = -1;    // the other mode is measured until this step
  long next_probe_ = -1;     // when the next re-measurement starts (-1: still warming up)
  bool probing_mode_ = false;
};

}  // namespace df
