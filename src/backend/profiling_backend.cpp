// ProfilingBackend: forwarding, counting and timing (see the header).
#include "backend/profiling_backend.h"

#include <algorithm>
#include <chrono>

#include "quant/types.h"

namespace df {

namespace {

constexpr size_t kMaxPending = size_t(1) << 16;  // fold event times in before this many ops pile up

struct FixedName {
  const char* op;
  const char* group;
};

// Indexed by ProfilingBackend::Op (same order).
constexpr FixedName kFixed[] = {
    {"alloc", "memory"},           {"release", "memory"},       {"upload", "copies"},
    {"download", "copies"},        {"copy", "copies"},          {"copy_2d", "copies"},
    {"synchronize", "sync"},       {"weight_data", "memory"},   {"embed", "elementwise"},
    {"rms_norm", "norms"},         {"add", "elementwise"},      {"swiglu", "elementwise"},
    {"mul_sigmoid", "elementwise"}, {"rope_neox", "elementwise"}, {"kv_store", "attention"},
    {"attention", "attention"},    {"conv1d_silu", "conv"},     {"l2_norm_heads", "norms"},
    {"gdn_gates", "elementwise"},  {"gdn_delta_rule", "gdn_delta_rule"}, {"gated_rms_norm", "norms"},
    {"argmax_rows", "argmax"},     {"add_rms_norm", "norms"},   {"qk_norm_rope", "norms"},
    {"gdn_conv_norm_gates", "conv"}, {"top_k_rows", "argmax"},
};

// Row-count class x weight-size class: small matrices pay fixed launch costs, big ones show
// the bandwidth.
const char* kRowClassNames[] = {"r1", "r2-16", "r>16"};
const char* kSizeClassNames[] = {"w<4MiB", "w<64MiB", "w>=64MiB"};

}  // namespace

ProfilingBackend::ProfilingBackend(std::unique_ptr<Backend> inner)
    : inner_(std::move(inner)), clock_(make_cuda_op_clock(*inner_)) {
  static_assert(sizeof(kFixed) / sizeof(kFixed[0]) == kFixedOps, "one name per fixed op");
}

ProfilingBackend::~ProfilingBackend() = default;

int ProfilingBackend::matmul_op(const Weight& w, int rows) {
  const int id = std::clamp(int(w.type), 0, kTypeIds - 1);
  const int row_class = rows <= 1 ? 0 : rows <= 16 ? 1 : 2;
  const double bytes = double(w.n_out) * double(w.row_bytes);
  const int size_class = bytes < 4.0 * (1 << 20) ? 0 : bytes < 64.0 * (1 << 20) ? 1 : 2;
  return kFixedOps + id * kBuckets + row_class * 3 + size_class;
}

template <class F>
void ProfilingBackend::run(int op, double bytes, F&& f) {
  if (mode_ == Mode::kOff) {
    f();
    return;
  }
  Slot& s = slots_[size_t(op)];
  s.calls += 1;
  s.bytes += bytes;
  if (mode_ == Mode::kCount) {
    f();
    return;
  }
  if (clock_) {
    const int a = clock_->mark();
    f();
    const int b = clock_->mark();
    pending_.push_back(Pending{op, a, b});
    if (pending_.size() >= kMaxPending) {
      inner_->synchronize();
      fold_pending();
    }
    return;
  }
  inner_->synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  f();
  inner_->synchronize();
  s.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void ProfilingBackend::fold_pending() {
  if (!clock_) return;
  for (const Pending& p : pending_) slots_[size_t(p.op)].seconds += clock_->seconds(p.a, p.b);
  pending_.clear();
  clock_->clear();
}

void ProfilingBackend::reset() {
  inner_->synchronize();
  fold_pending();
  slots_.fill(Slot{});
}

std::vector<ProfilingBackend::Entry> ProfilingBackend::entries() {
  inner_->synchronize();
  fold_pending();
  std::vector<Entry> out;
  for (int op = 0; op < kOps; ++op) {
    const Slot& s = slots_[size_t(op)];
    if (s.calls == 0) continue;
    Entry e;
    if (op < kFixedOps) {
      e.op = kFixed[op].op;
      e.group = kFixed[op].group;
    } else {
      const int id = (op - kFixedOps) / kBuckets, bucket = (op - kFixedOps) % kBuckets;
      const TypeTraits* tr = find_type_traits(uint32_t(id));
      e.op = std::string("matmul ") + (tr ? tr->name : "?") + " " + kRowClassNames[bucket / 3] + " " +
             kSizeClassNames[bucket % 3];
      e.group = "matmul";
    }
    e.calls = s.calls;
    e.seconds = s.seconds;
    e.weight_bytes = s.bytes;
    out.push_back(std::move(e));
  }
  std::stable_sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
    return a.seconds != b.seconds ? a.seconds > b.seconds : a.calls > b.calls;
  });
  return out;
}

double ProfilingBackend::total_seconds() {
  double t = 0;
  for (const Entry& e : entries()) t += e.seconds;
  return t;
}

double ProfilingBackend::total_weight_bytes() {
  double b = 0;
  for (const Entry& e : entries()) b += e.weight_bytes;
  return b;
}

// --- forwarding ---

void* ProfilingBackend::alloc(size_t bytes) {
  void* p = nullptr;
  run(kAlloc, 0, [&] { p = inner_->alloc(bytes); });
  return p;
}
void ProfilingBackend::release(void* p) {
  run(kRelease, 0, [&] { inner_->release(p); });
}
void ProfilingBackend::upload(void* dst, const void* src, size_t bytes) {
  run(kUpload, 0, [&] { inner_->upload(dst, src, bytes); });
}
void ProfilingBackend::download(void* dst, const void* src, size_t bytes) {
  run(kDownload, 0, [&] { inner_->download(dst, src, bytes); });
}
void ProfilingBackend::copy(void* dst, const void* src, size_t bytes) {
  run(kCopy, 0, [&] { inner_->copy(dst, src, bytes); });
}
void ProfilingBackend::copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                               int rows) {
  run(kCopy2d, 0, [&] { inner_->copy_2d(dst, dst_pitch, src, src_pitch, row_bytes, rows); });
}
void ProfilingBackend::synchronize() {
  run(kSynchronize, 0, [&] { inner_->synchronize(); });
}
const void* ProfilingBackend::weight_data(const void* host, size_t bytes) {
  const void* p = nullptr;
  run(kWeightData, 0, [&] { p = inner_->weight_data(host, bytes); });
  return p;
}
void ProfilingBackend::matmul(const Weight& w, const float* x, int rows, float* y) {
  run(matmul_op(w, rows), double(w.n_out) * double(w.row_bytes), [&] { inner_->matmul(w, x, rows, y); });
}
void ProfilingBackend::matmul_shared_input(const Weight* const* ws, float* const* ys, int n, const float* x, int rows) {
  if (mode_ == Mode::kOff) return inner_->matmul_shared_input(ws, ys, n, x, rows);
  Backend::matmul_shared_input(ws, ys, n, x, rows);
}
void ProfilingBackend::embed(const Weight& table, const int32_t* tokens, int rows, float* out) {
  run(kEmbed, double(rows) * double(table.row_bytes), [&] { inner_->embed(table, tokens, rows, out); });
}
void ProfilingBackend::rms_norm(const float* x, size_t x_stride, const float* w, int n, int dim, float eps,
                                float* out, size_t out_stride) {
  run(kRmsNorm, 0, [&] { inner_->rms_norm(x, x_stride, w, n, dim, eps, out, out_stride); });
}
void ProfilingBackend::add(float* x, const float* y, int64_t n) {
  run(kAdd, 0, [&] { inner_->add(x, y, n); });
}
void ProfilingBackend::add_rms_norm(float* x, const float* y, const float* w, int n, int dim, float eps, float* out,
                                    size_t out_stride) {
  run(kAddRmsNorm, 0, [&] { inner_->add_rms_norm(x, y, w, n, dim, eps, out, out_stride); });
}
void ProfilingBackend::swiglu(const float* gate, const float* up, int64_t n, float* out) {
  run(kSwiglu, 0, [&] { inner_->swiglu(gate, up, n, out); });
}
void ProfilingBackend::mul_sigmoid(float* x, size_t x_stride, const float* g, size_t g_stride, int rows, int n) {
  run(kMulSigmoid, 0, [&] { inner_->mul_sigmoid(x, x_stride, g, g_stride, rows, n); });
}
void ProfilingBackend::rope_neox(float* x, size_t row_stride, size_t head_stride, int rows, int n_heads,
                                 const int32_t* pos, int n_rot, float theta) {
  run(kRope, 0, [&] { inner_->rope_neox(x, row_stride, head_stride, rows, n_heads, pos, n_rot, theta); });
}
void ProfilingBackend::qk_norm_rope(float* q, size_t q_head_stride, int n_head, const float* q_norm, float* k,
                                    int n_head_kv, const float* k_norm, int rows, int head_dim, float eps,
                                    const int32_t* pos, int n_rot, float theta) {
  run(kQkNormRope, 0, [&] {
    inner_->qk_norm_rope(q, q_head_stride, n_head, q_norm, k, n_head_kv, k_norm, rows, head_dim, eps, pos, n_rot, theta);
  });
}
void ProfilingBackend::kv_store(const KvLayerView& kv, const SeqKv& seq, const float* k, const float* v,
                                const int32_t* pos, int rows) {
  run(kKvStore, 0, [&] { inner_->kv_store(kv, seq, k, v, pos, rows); });
}
void ProfilingBackend::attention(const float* q, size_t q_row_stride, size_t q_head_stride, int rows,
                                 const int32_t* pos, int n_head, const KvLayerView& kv, const SeqKv& seq, float scale,
                                 float* out) {
  run(kAttention, 0,
      [&] { inner_->attention(q, q_row_stride, q_head_stride, rows, pos, n_head, kv, seq, scale, out); });
}
void ProfilingBackend::conv1d_silu(const float* x, size_t x_stride, int rows, int channels, const float* w,
                                   int kernel, float* state, float* out, size_t out_stride) {
  run(kConv1d, 0, [&] { inner_->conv1d_silu(x, x_stride, rows, channels, w, kernel, state, out, out_stride); });
}
void ProfilingBackend::l2_norm_heads(float* x, size_t row_stride, int rows, int n_heads, int dim, float eps,
                                     float scale) {
  run(kL2Norm, 0, [&] { inner_->l2_norm_heads(x, row_stride, rows, n_heads, dim, eps, scale); });
}
void ProfilingBackend::gdn_gates(float* b, float* a, const float* a_coef, const float* dt_bias, int rows, int n_v) {
  run(kGdnGates, 0, [&] { inner_->gdn_gates(b, a, a_coef, dt_bias, rows, n_v); });
}
void ProfilingBackend::gdn_conv_norm_gates(const GdnShape& shape, const float* x, size_t x_stride, int rows,
                                           const float* conv_w, int kernel, float* conv_state, float* out,
                                           size_t out_stride, float eps, float q_scale, float* beta, float* alpha,
                                           const float* a_coef, const float* dt_bias) {
  run(kGdnConvNormGates, 0, [&] {
    inner_->gdn_conv_norm_gates(shape, x, x_stride, rows, conv_w, kernel, conv_state, out, out_stride, eps, q_scale,
                                beta, alpha, a_coef, dt_bias);
  });
}
void ProfilingBackend::gdn_delta_rule(const GdnShape& shape, const float* qkv, size_t qkv_stride, const float* g,
                                      const float* beta, int rows, float* S, float* out, bool chunked,
                                      float* row_states) {
  run(kGdnDeltaRule, 0,
      [&] { inner_->gdn_delta_rule(shape, qkv, qkv_stride, g, beta, rows, S, out, chunked, row_states); });
}
void ProfilingBackend::gated_rms_norm(float* x, const float* z, const float* w, int rows, int n_heads, int dim,
                                      float eps) {
  run(kGatedRmsNorm, 0, [&] { inner_->gated_rms_norm(x, z, w, rows, n_heads, dim, eps); });
}
void ProfilingBackend::argmax_rows(const float* x, int rows, int n, size_t stride, int32_t* out_host) {
  run(kArgmax, 0, [&] { inner_->argmax_rows(x, rows, n, stride, out_host); });
}
void ProfilingBackend::top_k_rows(const float* x, int rows, int n, size_t stride, int k, int32_t* ids_host,
                                  float* vals_host) {
  run(kTopK, 0, [&] { inner_->top_k_rows(x, rows, n, stride, k, ids_host, vals_host); });
}

void ProfilingBackend::begin_step() {
  const bool forward = mode_ != Mode::kTime;
  steps_.push_back(forward);
  if (forward) inner_->begin_step();
}

void ProfilingBackend::end_step() {
  if (steps_.empty()) return;
  const bool forwarded = steps_.back();
  steps_.pop_back();
  if (forwarded) inner_->end_step();
}

}  // namespace df
