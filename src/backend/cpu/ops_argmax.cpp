// argmax_rows: the greedy choice per row, ties to the lowest index, NaN below every number.
#include "backend/cpu/cpu_backend.h"

namespace df {

void CpuBackend::argmax_rows(const float* x, int rows, int n, size_t stride, int32_t* out_host) {
  pool_.parallel_for(rows, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r) {
      const float* v = x + r * int64_t(stride);
      int32_t best_i = 0;
      float best = 0.0f;
      bool found = false;  // a non-NaN value seen
      for (int i = 0; i < n; ++i) {
        // Strictly greater: an equal later value keeps the lower index; NaN compares false.
        if (!found ? v[i] == v[i] : v[i] > best) {
          best = v[i];
          best_i = i;
          found = true;
        }
      }
      out_host[r] = best_i;
    }
  });
}

}  // namespace df
