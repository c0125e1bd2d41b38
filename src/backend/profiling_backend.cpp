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

// Indexed by BackendOp (same order), up to kMatmul.
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
    {"copy_2d_indexed", "copies"}, {"argmax_rows_to", "argmax"},
};

// Row-count class x weight-size class: small matrices pay fixed launch costs, big ones show
// the bandwidth.
const char* kRowClassNames[] = {"r1", "r2-16", "r>16", "prompt"};
const char* kSizeClassNames[] = {"w<4MiB", "w<64MiB", "w>=64MiB"};

}  // namespace

ProfilingBackend::ProfilingBackend(std::unique_ptr<Backend> inner)
    : ForwardingBackend(*inner), owned_(std::move(inner)), clock_(make_cuda_op_clock(*owned_)) {
  static_assert(sizeof(kFixed) / sizeof(kFixed[0]) == kFixedOps, "one name per fixed op");
}

ProfilingBackend::~ProfilingBackend() = default;

int ProfilingBackend::matmul_op(const Weight& w, int rows, bool prompt) {
  const int id = std::clamp(int(w.type), 0, kTypeIds - 1);
  const int row_class = prompt ? 3 : rows <= 1 ? 0 : rows <= 16 ? 1 : 2;
  const double bytes = double(w.n_out) * double(w.row_bytes);
  const int size_class = bytes < 4.0 * (1 << 20) ? 0 : bytes < 64.0 * (1 << 20) ? 1 : 2;
  return kFixedOps + id * kBuckets + row_class * 3 + size_class;
}

void ProfilingBackend::around(const OpCall& call, OpBody f) {
  if (mode_ == Mode::kOff) {
    f();
    return;
  }
  // matmul_shared_input never comes here while counting: it runs as its matmuls.
  const bool product = call.op == BackendOp::kMatmul || call.op == BackendOp::kPromptMatmul;
  const int op = product ? matmul_op(*call.weight, call.rows, call.op == BackendOp::kPromptMatmul) : int(call.op);
  const double bytes = product ? double(call.weight->n_out) * double(call.weight->row_bytes)
                       : call.op == BackendOp::kEmbed ? double(call.rows) * double(call.weight->row_bytes)
                                                       : 0;
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
      inner().synchronize();
      fold_pending();
    }
    return;
  }
  inner().synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  f();
  inner().synchronize();
  s.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void ProfilingBackend::fold_pending() {
  if (!clock_) return;
  for (const Pending& p : pending_) slots_[size_t(p.op)].seconds += clock_->seconds(p.a, p.b);
  pending_.clear();
  clock_->clear();
}

void ProfilingBackend::reset() {
  inner().synchronize();
  fold_pending();
  slots_.fill(Slot{});
}

std::vector<ProfilingBackend::Entry> ProfilingBackend::entries() {
  inner().synchronize();
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

void ProfilingBackend::matmul_shared_input(const Weight* const* ws, float* const* ys, int n, const float* x,
                                           int rows) {
  if (mode_ == Mode::kOff) return inner().matmul_shared_input(ws, ys, n, x, rows);
  Backend::matmul_shared_input(ws, ys, n, x, rows);
}

void ProfilingBackend::prompt_matmul_shared_input(const Weight* const* ws, float* const* ys, int n, const float* x,
                                                  int rows) {
  if (mode_ == Mode::kOff) return inner().prompt_matmul_shared_input(ws, ys, n, x, rows);
  for (int i = 0; i < n; ++i) {
    auto body = [&] { inner().prompt_matmul_shared_input(ws + i, ys + i, 1, x, rows); };
    around({BackendOp::kPromptMatmul, ws[i], rows}, OpBody(body));
  }
}

void ProfilingBackend::begin_step() {
  const bool forward = mode_ != Mode::kTime;
  steps_.push_back(forward);
  if (forward) inner().begin_step();
}

void ProfilingBackend::end_step() {
  if (steps_.empty()) return;
  const bool forwarded = steps_.back();
  steps_.pop_back();
  if (forwarded) inner().end_step();
}

}  // namespace df
