// Causal depthwise conv1d + SiLU for Gated DeltaNet, with the K-1 previous inputs as state.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace df {

void CpuBackend::conv1d_silu(const float* x, size_t x_stride, int rows, int channels, const float* w, int kernel,
                             float* state, float* out, size_t out_stride) {
  const int hist = kernel - 1;
  // Input at time t (t < 0 reads the state: t = -1 is its newest row).
  auto input = [&](int t, int c) { return t < 0 ? state[size_t(hist + t) * channels + c] : x[size_t(t) * x_stride + c]; };
  pool_.parallel_for(channels, 64, [&](int64_t cb, int64_t ce, int) {
    for (int64_t c = cb; c < ce; ++c) {
      const float* wc = w + c * kernel;
      for (int t = 0; t < rows; ++t) {
        float s = 0;
        for (int j = 0; j < kernel; ++j) s += wc[j] * input(t - hist + j, int(c));
        out[size_t(t) * out_stride + c] = s / (1.0f + std::exp(-s));
      }
      // New state: the last K-1 inputs of [state | x], oldest first. Read before overwriting:
      // when rows < K-1 the new state still contains old state entries, which shift left.
      float keep[16];  // kernel <= 16 is validated at load
      for (int i = 0; i < hist; ++i) keep[i] = input(rows - hist + i, int(c));
      for (int i = 0; i < hist; ++i) state[size_t(i) * channels + c] = keep[i];
    }
  });
}

}  // namespace df
