// A host emulation of the CUDA argmax (argmax.cu): the chunks of argmax_split.h, each thread's
// tile walk, the warp butterflies and block merges of beats(), against the CPU backend's
// left-to-right scan. It checks the split and the merge rule on a CPU; test_cuda_ops.cpp checks
// the kernels themselves on a GPU (CudaOps.ArgmaxRows*).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/argmax_split.h"

namespace df {
namespace {

namespace as = cuda::argmax_split;
using as::Pick;

// __shfl_xor_sync butterfly of warp_best, on 32 lanes at once.
void warp_best(Pick* lane) {
  for (int o = 16; o > 0; o >>= 1) {
    Pick next[32];
    for (int l = 0; l < 32; ++l) {
      const Pick& other = lane[l ^ o];
      next[l] = as::beats(other.v, other.i, lane[l]) ? other : lane[l];
    }
    for (int l = 0; l < 32; ++l) lane[l] = next[l];
  }
}

// block_best: each warp's butterfly, lane 0s into part[], warp 0's butterfly over them.
Pick block_best(std::vector<Pick> t) {
  const int warps = int(t.size() / 32);
  Pick part[32];
  for (int w = 0; w < warps; ++w) {
    warp_best(&t[size_t(w) * 32]);
    part[w] = t[size_t(w) * 32];
  }
  for (int l = warps; l < 32; ++l) part[l] = as::no_pick();
  warp_best(part);
  return part[0];
}

int32_t emulate(const float* row, int n) {
  const int chunk = as::chunk(n), parts = as::parts(n);
  std::vector<Pick> merge(as::kMaxParts, as::no_pick());
  for (int c = 0; c < parts; ++c) {
    const int64_t lo = int64_t(c) * chunk, hi = std::min<int64_t>(lo + chunk, n);
    std::vector<Pick> t(as::kThreads, as::no_pick());
    for (int tid = 0; tid < as::kThreads; ++tid)
      for (int64_t base = lo; base < hi; base += as::kTile)
        for (int j = 0; j < as::kPer; ++j) {
          const int64_t i = base + j * as::kThreads + tid;
          const float v = i < hi ? row[i] : std::nanf("");
          if (as::beats(v, int(i), t[size_t(tid)])) t[size_t(tid)] = Pick{v, int(i)};
        }
    merge[size_t(c)] = block_best(t);
  }
  const Pick b = block_best(merge);
  return b.i == INT_MAX ? 0 : b.i;
}

TEST(ArgmaxSplit, LayoutCoversEveryRow) {
  for (int n : {1, 2, 2047, 2048, 2049, 262144, 262145, 248320, 1 << 24, (1 << 24) + 1, INT_MAX - 5, INT_MAX}) {
    const int chunk = as::chunk(n), parts = as::parts(n);
    EXPECT_EQ(chunk % as::kTile, 0) << n;
    EXPECT_GE(parts, 1) << n;
    EXPECT_LE(parts, as::kMaxParts) << n;
    EXPECT_LT(int64_t(parts - 1) * chunk, n) << n;   // no empty chunk
    EXPECT_GE(int64_t(parts) * chunk, n) << n;       // every value in one
  }
  EXPECT_EQ(as::parts(248320), 122);
  EXPECT_EQ(as::chunk(248320), as::kTile);
}

// Hard rows at widths around the chunk and tile sizes: a max planted in the last chunk, equal
// maxima on both sides of each chunk boundary and at the ends of two chunks (lowest index
// wins), NaN rows, -inf rows, +0 / -0 ties.
TEST(ArgmaxSplit, EmulationEqualsCpuScan) {
  auto be = make_cpu_backend(2);
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int n : {1, 5, 2047, 2049, 5000, 248320, 262145, 300001}) {
    const int chunk = as::chunk(n), parts = as::parts(n);
    const int rows = 10;
    std::vector<float> x(size_t(rows) * n);
    for (auto& f : x) f = nd(rng);
    auto row = [&](int r) { return x.data() + size_t(r) * n; };
    row(0)[n - 1] = 1e30f;                                             // last value, last chunk
    row(1)[int64_t(parts - 1) * chunk] = 50.0f;                          // first value of the last chunk
    for (int c = 1; c < parts; ++c) row(2)[int64_t(c) * chunk] = row(2)[int64_t(c) * chunk - 1] = 60.0f;
    for (int c = parts - 1; c >= 0; --c) row(3)[std::min<int64_t>(int64_t(c + 1) * chunk, n) - 1] = 70.0f;
    for (int i = 0; i < n; ++i) row(4)[i] = std::nanf("");              // only NaN: 0
    for (int i = 0; i < n; ++i) row(5)[i] = -INFINITY;                  // index 0
    for (int i = 0; i < n; ++i) row(6)[i] = (i % 2) ? -0.0f : 0.0f;    // all equal: index 0
    for (int i = 0; i < n; i += 2) row(7)[i] = std::nanf("");
    row(7)[n - 1] = std::nanf("");
    for (int i = 0; i < n; ++i) row(8)[i] = float(i % 7);               // many ties
    for (int i = 0; i + 1 < n; ++i) row(9)[i] = std::nanf("");          // one number, at the end
    std::vector<int32_t> want(size_t(rows), -1);
    be->argmax_rows(x.data(), rows, n, size_t(n), want.data());
    for (int r = 0; r < rows; ++r) EXPECT_EQ(emulate(row(r), n), want[size_t(r)]) << "row " << r << ", n = " << n;
  }
}

}  // namespace
}  // namespace df
