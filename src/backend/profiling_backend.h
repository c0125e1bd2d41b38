// A Backend that wraps another and forwards every op, counting calls and the weight bytes each
// matmul reads, and (while timing is on) the time each op takes. Used by `deltaflash bench
// --profile` to show where a forward's time goes; works over any backend.
//
// Modes: off (forwarding only), count (calls and bytes: an array update per op), time (count,
// and time each op; steps then run op by op, without CUDA graphs). Timing over the CUDA backend brackets each op with two CUDA events on its
// stream (no host synchronisation, so the queue of work runs as it would unprofiled, and launch
// gaps show up as the difference between a step's wall time and the sum of its op times); over
// a synchronous backend (CPU) it reads the host clock around each op.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace df {

// Timestamps taken in the order of a backend's queued work.
class OpClock {
 public:
  virtual ~OpClock() = default;
  virtual int mark() = 0;                    // a point after all work queued so far; returns its id
  virtual double seconds(int a, int b) = 0;  // between marks a and b, after the work is done
  virtual void clear() = 0;                  // forget every mark (their storage is reused)
};

// CUDA events on the CUDA backend's stream when `be` is the CUDA backend; null otherwise (and
// always in builds without CUDA).
std::unique_ptr<OpClock> make_cuda_op_clock(Backend& be);

class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(std::unique_ptr<Backend> inner);
  ~ProfilingBackend() override;

  Backend& inner() { return *inner_; }

  // One line of the profile: an op kind (matmul split by weight type and rows bucket).
  struct Entry {
    std::string op;     // "matmul q4_K r1", "attention", ...
    std::string group;  // matmul, attention, gdn_delta_rule, conv, norms, elementwise, copies, ...
    int64_t calls = 0;
    double seconds = 0;      // only while timing was on
    double weight_bytes = 0;  // matmul: n_out * row_bytes per call; embed: rows read
  };

  enum class Mode { kOff, kCount, kTime };
  void set_mode(Mode m) { mode_ = m; }
  Mode mode() const { return mode_; }
  // Clears every count and time.
  void reset();
  // Waits for queued work and folds pending timings in; then the entries with calls > 0, sorted
  // by time (then calls), descending.
  std::vector<Entry> entries();
  // Sum of the op times in entries() (seconds), and of the weight bytes read by matmul/embed.
  double total_seconds();
  double total_weight_bytes();

  const char* name() const override { return inner_->name(); }
  void* alloc(size_t bytes) override;
  void release(void* p) override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, int rows) override;
  void synchronize() override;
  const void* weight_data(const void* host, size_t bytes) override;
  void matmul(const Weight& w, const float* x, int rows, float* y) override;
  // Unprofiled: the inner backend's (fused) product; while counting or timing, one matmul per
  // weight, so each keeps its own line (the profile then shows the unfused cost).
  void matmul_shared_input(const Weight* const* ws, float* const* ys, int n, const float* x, int rows) override;
  void embed(const Weight& table, const int32_t* tokens, int rows, float* out) override;
  void rms_norm(const float* x, size_t x_stride, const float* w, int n, int dim, float eps, float* out,
                size_t out_stride) override;
  void add(float* x, const float* y, int64_t n) override;
  // The fused ops run fused in every mode, each counted and timed as one op of its own.
  void add_rms_norm(float* x, const float* y, const float* w, int n, int dim, float eps, float* out,
                    size_t out_stride) override;
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override;
  void mul_sigmoid(float* x, size_t x_stride, const float* g, size_t g_stride, int rows, int n) override;
  void rope_neox(float* x, size_t row_stride, size_t head_stride, int rows, int n_heads, const int32_t* pos,
                 int n_rot, float theta) override;
  void qk_norm_rope(float* q, size_t q_head_stride, int n_head, const float* q_norm, float* k, int n_head_kv,
                    const float* k_norm, int rows, int head_dim, float eps, const int32_t* pos, int n_rot,
                    float theta) override;
  void kv_store(const KvLayerView& kv, const SeqKv& seq, const float* k, const float* v, const int32_t* pos,
                int rows) override;
  void attention(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos,
                 int n_head, const KvLayerView& kv, const SeqKv& seq, float scale, float* out) override;
  void conv1d_silu(const float* x, size_t x_stride, int rows, int channels, const float* w, int kernel,
                   float* state, float* out, size_t out_stride) override;
  void l2_norm_heads(float* x, size_t row_stride, int rows, int n_heads, int dim, float eps, float scale) override;
  void gdn_gates(float* b, float* a, const float* a_coef, const float* dt_bias, int rows, int n_v) override;
  void gdn_conv_norm_gates(const GdnShape& shape, const float* x, size_t x_stride, int rows, const float* conv_w,
                           int kernel, float* conv_state, float* out, size_t out_stride, float eps, float q_scale,
                           float* beta, float* alpha, const float* a_coef, const float* dt_bias) override;
  void gdn_delta_rule(const GdnShape& shape, const float* qkv, size_t qkv_stride, const float* g,
                      const float* beta, int rows, float* S, float* out, bool chunked, float* row_states) override;
  void gated_rms_norm(float* x, const float* z, const float* w, int rows, int n_heads, int dim,
                      float eps) override;
  void argmax_rows(const float* x, int rows, int n, size_t stride, int32_t* out_host) override;
  void top_k_rows(const float* x, int rows, int n, size_t stride, int k, int32_t* ids_host, float* vals_host) override;
  // Steps reach the inner backend (CUDA graphs) unless timing is on: per-op times need each op
  // launched on its own, between its two events.
  void begin_step() override;
  void end_step() override;

 private:
  // Fixed op kinds, then matmul kinds (weight type id x rows bucket).
  enum Op : int {
    kAlloc, kRelease, kUpload, kDownload, kCopy, kCopy2d, kSynchronize, kWeightData, kEmbed, kRmsNorm, kAdd,
    kSwiglu, kMulSigmoid, kRope, kKvStore, kAttention, kConv1d, kL2Norm, kGdnGates, kGdnDeltaRule,
    kGatedRmsNorm, kArgmax, kAddRmsNorm, kQkNormRope, kGdnConvNormGates, kTopK, kFixedOps
  };
  static constexpr int kTypeIds = 40;  // ggml type ids are < 40
  static constexpr int kBuckets = 9;   // rows 1, 2..16, > 16 x weight size < 4 MiB, < 64 MiB, larger
  static constexpr int kOps = kFixedOps + kTypeIds * kBuckets;
  static int matmul_op(const Weight& w, int rows);

  struct Slot {
    int64_t calls = 0;
    double seconds = 0, bytes = 0;
  };
  struct Pending {
    int op, a, b;
  };
  // Runs f() as op `op`, counting it (and timing it while timing is on).
  template <class F>
  void run(int op, double bytes, F&& f);
  void fold_pending();  // after a synchronize: event times into the slots

  std::unique_ptr<Backend> inner_;
  std::unique_ptr<OpClock> clock_;  // null: host clock around synchronous ops
  Mode mode_ = Mode::kOff;
  std::array<Slot, kOps> slots_{};
  std::vector<Pending> pending_;
  std::vector<bool> steps_;  // open steps: whether each was forwarded to inner_
};

}  // namespace df
