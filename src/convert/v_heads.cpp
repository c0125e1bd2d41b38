#include "convert/v_heads.h"

#include "util/error.h"

namespace df::convert {

std::vector<int64_t> v_head_source_index(int64_t length, int64_t offset, int64_t block, int n_k, int n_v) {
  if (n_k <= 0 || n_v <= 0 || n_v % n_k != 0 || block <= 0 || offset < 0 || offset + int64_t(n_v) * block > length)
    fail("internal: value-head reorder of {} heads ({} key heads) x {} at {} does not fit an axis of {}", n_v, n_k,
         block, offset, length);
  const int r = n_v / n_k;
  std::vector<int64_t> src(static_cast<size_t>(length));
  for (int64_t i = 0; i < length; ++i) src[size_t(i)] = i;
  for (int tiled = 0; tiled < n_v; ++tiled) {
    const int m = tiled / n_k, kh = tiled % n_k;
    const int grouped = kh * r + m;
    for (int64_t b = 0; b < block; ++b) src[size_t(offset + tiled * block + b)] = offset + grouped * block + b;
  }
  return src;
}

}  // namespace df::convert
