// top_k_rows: per row a partial sort of (order key, id) pairs, the order of top_k_order.h.
#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/top_k_order.h"
#include "util/error.h"

namespace df {

void CpuBackend::top_k_rows(const float* x, int rows, int n, size_t stride, int k, int32_t* ids_host,
                            float* vals_host) {
  if (rows <= 0) return;
  if (n <= 0 || size_t(n) > stride) fail("top_k_rows: bad row (n = {}, stride = {})", n, stride);
  if (k < 1 || k > n || k > kMaxDeviceTopK) fail("top_k_rows: k = {} outside 1..min(n = {}, {})", k, n, kMaxDeviceTopK);
  pool_.parallel_for(rows, 1, [&](int64_t b, int64_t e, int) {
    struct Entry {
      uint32_t key;
      int32_t id;
    };
    thread_local std::vector<Entry> row;  // reused: no allocation per call once grown
    row.resize(static_cast<size_t>(n));
    for (int64_t r = b; r < e; ++r) {
      const float* v = x + r * int64_t(stride);
      for (int i = 0; i < n; ++i) row[size_t(i)] = {top_k_key(v[i]), i};
      std::partial_sort(row.begin(), row.begin() + k, row.end(), [](const Entry& p, const Entry& q) {
        return p.key > q.key || (p.key == q.key && p.id < q.id);
      });
      for (int j = 0; j < k; ++j) {
        const int32_t id = row[size_t(j)].id;
        ids_host[r * k + j] = id;
        vals_host[r * k + j] = v[id];
      }
    }
  });
}

}  // namespace df
