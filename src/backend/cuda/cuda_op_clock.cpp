// The profiler's clock over the CUDA backend: events recorded on the backend's stream, so ops are
// timed on the device without host synchronisation (backend/profiling_backend.h).
#include <cuda_runtime.h>

#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/profiling_backend.h"
#include "util/error.h"

namespace df {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA error in {}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

class CudaOpClock final : public OpClock {
 public:
  explicit CudaOpClock(CudaBackend& be) : be_(be) {}
  ~CudaOpClock() override {
    cudaSetDevice(be_.device());
    for (cudaEvent_t e : ev_) cudaEventDestroy(e);
  }
  int mark() override {
    // Events are made in batches, always one ahead: creating one between an op's launch and
    // its end mark would add host time to the op.
    if (used_ + 2 > ev_.size()) {
      check(cudaSetDevice(be_.device()), "cudaSetDevice");
      for (int i = 0; i < 1024; ++i) {
        cudaEvent_t e = nullptr;
        check(cudaEventCreate(&e), "cudaEventCreate");
        ev_.push_back(e);
      }
    }
    check(cudaEventRecord(ev_[used_], be_.stream()), "cudaEventRecord");
    return int(used_++);
  }
  double seconds(int a, int b) override {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, ev_[size_t(a)], ev_[size_t(b)]), "cudaEventElapsedTime");
    return double(ms) * 1e-3;
  }
  void clear() override { used_ = 0; }

 private:
  CudaBackend& be_;
  std::vector<cudaEvent_t> ev_;
  size_t used_ = 0;
};

}  // namespace

std::unique_ptr<OpClock> make_cuda_op_clock(Backend& be) {
  auto* cuda = dynamic_cast<CudaBackend*>(&be);
  if (cuda == nullptr) return nullptr;
  return std::make_unique<CudaOpClock>(*cuda);
}

}  // namespace df
