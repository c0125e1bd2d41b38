#include "support/step_census.h"

#include <atomic>

#include "util/error.h"

namespace df::test {

namespace {

std::atomic<int64_t> g_host_news{0};
thread_local int t_in_backend = 0;

// Marks the inner backend's code, so its host allocations are left out.
struct InBackend {
  InBackend() { ++t_in_backend; }
  ~InBackend() { --t_in_backend; }
};

}  // namespace

void count_host_new() {
  if (t_in_backend == 0) g_host_news.fetch_add(1, std::memory_order_relaxed);
}

StepCounts StepCensusBackend::counts() const {
  StepCounts c = c_;
  c.host_news = g_host_news.load(std::memory_order_relaxed);
  return c;
}

void StepCensusBackend::op() {
  if (depth_ > 0) {
    ++c_.ops_in_steps;
    ++segment_ops_;
  } else {
    ++c_.ops_outside;
  }
}

void StepCensusBackend::flush() {
  if (segment_ops_ > 0) recent_[size_t(c_.graphs++ % kRecent)] = segment_ops_;
  segment_ops_ = 0;
}

std::array<int64_t, StepCensusBackend::kRecent> StepCensusBackend::recent_graph_ops() const {
  std::array<int64_t, kRecent> r{};
  for (int i = 0; i < kRecent; ++i) r[size_t(i)] = recent_[size_t((c_.graphs + i) % kRecent)];
  return r;
}

void StepCensusBackend::sync() {
  flush();
  ++c_.syncs;
}

void StepCensusBackend::begin_step() {
  if (depth_++ == 0) ++c_.steps;
  InBackend g;
  inner().begin_step();
}

void StepCensusBackend::end_step() {
  if (depth_ == 0) fail("step census: end_step without begin_step");
  if (--depth_ == 0) flush();
  InBackend g;
  inner().end_step();
}

void StepCensusBackend::around(const OpCall& call, OpBody body) {
  switch (call.op) {
    // Allocation inside a step runs what the step queued so far (as a sync would, without a wait).
    case BackendOp::kAlloc:
    case BackendOp::kRelease:
    case BackendOp::kWeightData:
      flush();
      ++c_.allocs;
      break;
    case BackendOp::kDownload:
    case BackendOp::kSynchronize:
      sync();
      break;
    // The argmax and top-k kernels join the open segment; the results' download then waits for them.
    case BackendOp::kArgmax:
    case BackendOp::kTopK:
      op();
      sync();
      break;
    // Everything else is one op; matmul_shared_input too: the CUDA backend launches it as one kernel.
    default:
      op();
      break;
  }
  InBackend g;
  body();
}

void StepCensusBackend::qk_norm_rope(float* q, size_t q_head_stride, int n_head, const float* q_norm, float* k,
                                     int n_head_kv, const float* k_norm, int rows, int head_dim, float eps,
                                     const int32_t* pos, int n_rot, float theta) {
  Backend::qk_norm_rope(q, q_head_stride, n_head, q_norm, k, n_head_kv, k_norm, rows, head_dim, eps, pos, n_rot,
                        theta);
}

void StepCensusBackend::gdn_conv_norm_gates(const GdnShape& shape, const float* x, size_t x_stride, int rows,
                                            const float* conv_w, int kernel, float* conv_state, float* out,
                                            size_t out_stride, float eps, float q_scale, float* beta, float* alpha,
                                            const float* a_coef, const float* dt_bias) {
  Backend::gdn_conv_norm_gates(shape, x, x_stride, rows, conv_w, kernel, conv_state, out, out_stride, eps, q_scale,
                               beta, alpha, a_coef, dt_bias);
}

}  // namespace df::test
