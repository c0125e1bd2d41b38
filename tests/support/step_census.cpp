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
  inner_.begin_step();
}

void StepCensusBackend::end_step() {
  if (depth_ == 0) fail("step census: end_step without begin_step");
  if (--depth_ == 0) flush();
  InBackend g;
  inner_.end_step();
}

// Allocation inside a step runs what the step queued so far (as a sync would, without a wait).
void* StepCensusBackend::alloc(size_t bytes) {
  flush();
  ++c_.allocs;
  InBackend g;
  return inner_.alloc(bytes);
}

void StepCensusBackend::release(void* p) {
  flush();
  ++c_.allocs;
  InBackend g;
  inner_.release(p);
}

const void* StepCensusBackend::weight_data(const void* host, size_t bytes) {
  flush();
  ++c_.allocs;
  InBackend g;
  return inner_.weight_data(host, bytes);
}

void StepCensusBackend::download(void* dst, const void* src, size_t bytes) {
  sync();
  InBackend g;
  inner_.download(dst, src, bytes);
}

void StepCensusBackend::synchronize() {
  sync();
  InBackend g;
  inner_.synchronize();
}

// The argmax kernel joins the open segment; the ids' download then waits for it.
void StepCensusBackend::argmax_rows(const float* x, int rows, int n, size_t stride, int32_t* out_host) {
  op();
  sync();
  InBackend g;
  inner_.argmax_rows(x, rows, n, stride, out_host);
}

// The same for the top-k kernels: one op in the segment, then the wait for the candidates.
void StepCensusBackend::top_k_rows(const float* x, int rows, int n, size_t stride, int k, int32_t* ids_host,
                                   float* vals_host) {
  op();
  sync();
  InBackend g;
  inner_.top_k_rows(x, rows, n, stride, k, ids_host, vals_host);
}

void StepCensusBackend::upload(void* dst, const void* src, size_t bytes) {
  op();
  InBackend g;
  inner_.upload(dst, src, bytes);
}

void StepCensusBackend::copy(void* dst, const void* src, size_t bytes) {
  op();
  InBackend g;
  inner_.copy(dst, src, bytes);
}

void StepCensusBackend::copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                                int rows) {
  op();
  InBackend g;
  inner_.copy_2d(dst, dst_pitch, src, src_pitch, row_bytes, rows);
}

void StepCensusBackend::matmul(const Weight& w, const float* x, int rows, float* y) {
  op();
  InBackend g;
  inner_.matmul(w, x, rows, y);
}

// One op: the CUDA backend launches a shared-input product as one kernel.
void StepCensusBackend::matmul_shared_input(const Weight* const* ws, float* const* ys, int n, const float* x,
                                            int rows) {
  op();
  InBackend g;
  inner_.matmul_shared_input(ws, ys, n, x, rows);
}

void StepCensusBackend::embed(const Weight& table, const int32_t* tokens, int rows, float* out) {
  op();
  InBackend g;
  inner_.embed(table, tokens, rows, out);
}

void StepCensusBackend::rms_norm(const float* x, size_t x_stride, const float* w, int n, int dim, float eps,
                                 float* out, size_t out_stride) {
  op();
  InBackend g;
  inner_.rms_norm(x, x_stride, w, n, dim, eps, out, out_stride);
}

void StepCensusBackend::add(float* x, const float* y, int64_t n) {
  op();
  InBackend g;
  inner_.add(x, y, n);
}

void StepCensusBackend::add_rms_norm(float* x, const float* y, const float* w, int n, int dim, float eps, float* out,
                                     size_t out_stride) {
  op();
  InBackend g;
  inner_.add_rms_norm(x, y, w, n, dim, eps, out, out_stride);
}

void StepCensusBackend::swiglu(const float* gate, const float* up, int64_t n, float* out) {
  op();
  InBackend g;
  inner_.swiglu(gate, up, n, out);
}

void StepCensusBackend::mul_sigmoid(float* x, size_t x_stride, const float* gt, size_t g_stride, int rows, int n) {
  op();
  InBackend g;
  inner_.mul_sigmoid(x, x_stride, gt, g_stride, rows, n);
}

void StepCensusBackend::rope_neox(float* x, size_t row_stride, size_t head_stride, int rows, int n_heads,
                                  const int32_t* pos, int n_rot, float theta) {
  op();
  InBackend g;
  inner_.rope_neox(x, row_stride, head_stride, rows, n_heads, pos, n_rot, theta);
}

void StepCensusBackend::kv_store(const KvLayerView& kv, const SeqKv& seq, const float* k, const float* v,
                                 const int32_t* pos, int rows) {
  op();
  InBackend g;
  inner_.kv_store(kv, seq, k, v, pos, rows);
}

void StepCensusBackend::attention(const float* q, size_t q_row_stride, size_t q_head_stride, int rows,
                                  const int32_t* pos, int n_head, const KvLayerView& kv, const SeqKv& seq,
                                  float scale, float* out) {
  op();
  InBackend g;
  inner_.attention(q, q_row_stride, q_head_stride, rows, pos, n_head, kv, seq, scale, out);
}

void StepCensusBackend::conv1d_silu(const float* x, size_t x_stride, int rows, int channels, const float* w,
                                    int kernel, float* state, float* out, size_t out_stride) {
  op();
  InBackend g;
  inner_.conv1d_silu(x, x_stride, rows, channels, w, kernel, state, out, out_stride);
}

void StepCensusBackend::l2_norm_heads(float* x, size_t row_stride, int rows, int n_heads, int dim, float eps,
                                      float scale) {
  op();
  InBackend g;
  inner_.l2_norm_heads(x, row_stride, rows, n_heads, dim, eps, scale);
}

void StepCensusBackend::gdn_gates(float* b, float* a, const float* a_coef, const float* dt_bias, int rows, int n_v) {
  op();
  InBackend g;
  inner_.gdn_gates(b, a, a_coef, dt_bias, rows, n_v);
}

void StepCensusBackend::gdn_delta_rule(const GdnShape& shape, const float* qkv, size_t qkv_stride, const float* gt,
                                       const float* beta, int rows, float* S, float* out, bool chunked,
                                       float* row_states) {
  op();
  InBackend g;
  inner_.gdn_delta_rule(shape, qkv, qkv_stride, gt, beta, rows, S, out, chunked, row_states);
}

void StepCensusBackend::gated_rms_norm(float* x, const float* z, const float* w, int rows, int n_heads, int dim,
                                       float eps) {
  op();
  InBackend g;
  inner_.gated_rms_norm(x, z, w, rows, n_heads, dim, eps);
}

}  // namespace df::test
