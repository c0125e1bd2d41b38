// A Backend that wraps another and forwards every op (ForwardingBackend), counting calls and the
// weight bytes each matmul reads, and (while timing is on) the time each op takes. Used by `deltaflash bench
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

#include "backend/forwarding_backend.h"

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

class ProfilingBackend final : public ForwardingBackend {
 public:
  explicit ProfilingBackend(std::unique_ptr<Backend> inner);
  ~ProfilingBackend() override;

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

  // Unprofiled: the inner backend's (fused) product; while counting or timing, one matmul per
  // weight, so each keeps its own line (the profile then shows the unfused cost). The other
  // fused ops run fused in every mode, each counted and timed as one op of its own.
  void matmul_shared_input(const Weight* const* ws, float* const* ys, int n, const float* x, int rows) override;
  // Likewise, one prompt product per weight (its own "prompt" rows class in the table).
  void prompt_matmul_shared_input(const Weight* const* ws, float* const* ys, int n, const float* x, int rows) override;
  // Steps reach the inner backend (CUDA graphs) unless timing is on: per-op times need each op
  // launched on its own, between its two events.
  void begin_step() override;
  void end_step() override;

 private:
  // Table rows: the fixed ops (BackendOp values below kMatmul), then matmul kinds (weight type
  // id x rows bucket).
  static constexpr int kFixedOps = int(BackendOp::kMatmul);
  static constexpr int kTypeIds = 40;  // ggml type ids are < 40
  static constexpr int kBuckets = 12;  // rows 1, 2..16, > 16, prompt x weight size < 4 MiB, < 64 MiB, larger
  static constexpr int kOps = kFixedOps + kTypeIds * kBuckets;
  static int matmul_op(const Weight& w, int rows, bool prompt);

  struct Slot {
    int64_t calls = 0;
    double seconds = 0, bytes = 0;
  };
  struct Pending {
    int op, a, b;
  };
  // Runs the op, counting it (and timing it while timing is on).
  void around(const OpCall& call, OpBody body) override;
  void fold_pending();  // after a synchronize: event times into the slots

  std::unique_ptr<Backend> owned_;  // inner()
  std::unique_ptr<OpClock> clock_;  // null: host clock around synchronous ops
  Mode mode_ = Mode::kOff;
  std::array<Slot, kOps> slots_{};
  std::vector<Pending> pending_;
  std::vector<bool> steps_;  // open steps: whether each was forwarded to inner_
};

}  // namespace df
