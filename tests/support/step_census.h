// A Backend wrapper that counts the structure of the work a model issues, as a CUDA graph
// backend would see it, without a GPU: steps (StepScopes), the graphs they would launch (a
// step's ops up to each host synchronisation inside it, or its end), ops recorded into those
// graphs, ops issued outside any step (each a direct launch on CUDA), host synchronisations
// (download, argmax_rows, top_k_rows, synchronize) and backend allocations. Tests use it to pin
// down what one decode or speculative step costs in launches and round trips.
#pragma once
#include <array>
#include <cstdint>

#include "backend/backend.h"

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

class StepCensusBackend final : public Backend {
 public:
  explicit StepCensusBackend(Backend& inner) : inner_(inner) {}
  StepCounts counts() const;
  int depth() const { return depth_; }
  // Ops in the graphs launched last, oldest first (up to kRecent).
  static constexpr int kRecent = 8;
  std::array<int64_t, kRecent> recent_graph_ops() const;

  const char* name() const override { return inner_.name(); }
  void* alloc(size_t bytes) override;
  void release(void* p) override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, int rows) override;
  void synchronize() override;
  const void* weight_data(const void* host, size_t bytes) override;
  void matmul(const Weight& w, const float* x, int rows, float* y) override;
  void matmul_shared_input(const Weight* const* ws, float* const* ys, int n, const float* x, int rows) override;
  void embed(const Weight& table, const int32_t* tokens, int rows, float* out) override;
  void rms_norm(const float* x, size_t x_stride, const float* w, int n, int dim, float eps, float* out,
                size_t out_stride) override;
  void add(float* x, const float* y, int64_t n) override;
  void add_rms_norm(float* x, const float* y, const float* w, int n, int dim, float eps, float* out,
                    size_t out_stride) override;
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override;
  void mul_sigmoid(float* x, size_t x_stride, const float* g, size_t g_stride, int rows, int n) override;
  void rope_neox(float* x, size_t row_stride, size_t head_stride, int rows, int n_heads, const int32_t* pos,
                 int n_rot, float theta) override;
  void kv_store(const KvLayerView& kv, const SeqKv& seq, const float* k, const float* v, const int32_t* pos,
                int rows) override;
  void attention(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos,
                 int n_head, const KvLayerView& kv, const SeqKv& seq, float scale, float* out) override;
  void conv1d_silu(const float* x, size_t x_stride, int rows, int channels, const float* w, int kernel,
                   float* state, float* out, size_t out_stride) override;
  void l2_norm_heads(float* x, size_t row_stride, int rows, int n_heads, int dim, float eps, float scale) override;
  void gdn_gates(float* b, float* a, const float* a_coef, const float* dt_bias, int rows, int n_v) override;
  void gdn_delta_rule(const GdnShape& shape, const float* qkv, size_t qkv_stride, const float* g,
                      const float* beta, int rows, float* S, float* out, bool chunked, float* row_states) override;
  void gated_rms_norm(float* x, const float* z, const float* w, int rows, int n_heads, int dim,
                      float eps) override;
  void argmax_rows(const float* x, int rows, int n, size_t stride, int32_t* out_host) override;
  void top_k_rows(const float* x, int rows, int n, size_t stride, int k, int32_t* ids_host, float* vals_host) override;
  void begin_step() override;
  void end_step() override;

 private:
  void op();        // one launchable op: recorded into the open step, or a direct launch
  void sync();      // a host wait: ends the open step's segment (a graph launch), then waits
  void flush();     // ends the open segment, if it has ops
  Backend& inner_;
  StepCounts c_;
  int depth_ = 0;
  int64_t segment_ops_ = 0;  // ops recorded since the last flush of the open step
  std::array<int64_t, kRecent> recent_{};  // a ring: graph i's ops at recent_[i % kRecent]
};

}  // namespace df::test
