// A Backend wrapper that counts the structure of the work a model issues, as a CUDA graph
// backend would see it, without a GPU: steps (StepScopes), the graphs they would launch (a
// step's ops up to each host synchronisation inside it, or its end), ops recorded into those
// graphs, ops issued outside any step (each a direct launch on CUDA), host synchronisations
// (download, argmax_rows, top_k_rows, synchronize) and backend allocations. Tests use it to pin down what
// one decode or speculative step costs in launches and round trips.
#pragma once
#include <array>
#include <cstdint>

#include "backend/forwarding_backend.h"

namespace df::test {

struct StepCounts {
  int64_t steps = 0;        // outermost begin_step .. end_step pairs
  int64_t graphs = 0;       // graph launches: non-empty step segments ended by a sync or the step's end
  int64_t ops_in_steps = 0;  // ops (kernels, copies, staged uploads) recorded inside steps
  int64_t ops_outside = 0;  // ops outside every step: direct launches
  int64_t syncs = 0;        // host waits: download, argmax_rows, top_k_rows, synchronize
  int64_t allocs = 0;       // alloc, release, weight_data
  int64_t host_news = 0;    // host heap allocations outside the backend (see count_host_new)
  StepCounts operator-(const StepCounts& o) const {
    return {steps - o.steps, graphs - o.graphs, ops_in_steps - o.ops_in_steps, ops_outside - o.ops_outside,
            syncs - o.syncs, allocs - o.allocs, host_news - o.host_news};
  }
};

// A test that replaces operator new calls this on each allocation: it is counted in
// StepCounts::host_news unless it happens inside the wrapped backend (the CPU backend's own
// allocations are not what a GPU step makes). Without a replaced operator new, host_news is 0.
void count_host_new();

class StepCensusBackend final : public ForwardingBackend {
 public:
  explicit StepCensusBackend(Backend& inner) : ForwardingBackend(inner) {}
  StepCounts counts() const;
  int depth() const { return depth_; }
  // Ops in the graphs launched last, oldest first (up to kRecent).
  static constexpr int kRecent = 8;
  std::array<int64_t, kRecent> recent_graph_ops() const;

  // Counted as the ops of Backend's default, one by one (as this census always has, though the
  // CUDA backend launches each as one kernel).
  void qk_norm_rope(float* q, size_t q_head_stride, int n_head, const float* q_norm, float* k, int n_head_kv,
                    const float* k_norm, int rows, int head_dim, float eps, const int32_t* pos, int n_rot,
                    float theta) override;
  void gdn_conv_norm_gates(const GdnShape& shape, const float* x, size_t x_stride, int rows, const float* conv_w,
                           int kernel, float* conv_state, float* out, size_t out_stride, float eps, float q_scale,
                           float* beta, float* alpha, const float* a_coef, const float* dt_bias) override;
  void begin_step() override;
  void end_step() override;

 private:
  void around(const OpCall& call, OpBody body) override;  // counts the op, then runs it
  void op();        // one launchable op: recorded into the open step, or a direct launch
  void sync();      // a host wait: ends the open step's segment (a graph launch), then waits
  void flush();     // ends the open segment, if it has ops
  StepCounts c_;
  int depth_ = 0;
  int64_t segment_ops_ = 0;  // ops recorded since the last flush of the open step
  std::array<int64_t, kRecent> recent_{};  // a ring: graph i's ops at recent_[i % kRecent]
};

}  // namespace df::test
