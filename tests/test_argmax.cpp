// Backend::argmax_rows on the CPU backend against a plain scan: the largest value, ties to the
// lowest index, NaN below every number, a row of only NaN gives 0. (The CUDA backend is checked
// against the same rules in test_cuda_ops.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"

namespace df {
namespace {

int32_t scan(const float* v, int n) {
  int best = -1;
  for (int i = 0; i < n; ++i)
    if (!std::isnan(v[i]) && (best < 0 || v[i] > v[best])) best = i;
  return best < 0 ? 0 : best;
}

TEST(Argmax, CpuRowsTiesAndNan) {
  auto be = make_cpu_backend(2);
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int n : {1, 2, 17, 4096, 248320}) {
    const int rows = 8;
    std::vector<float> x(size_t(rows) * n);
    for (auto& f : x) f = nd(rng);
    auto row = [&](int r) { return x.data() + size_t(r) * n; };
    if (n > 1) {
      row(0)[n / 2] = 40.0f, row(0)[n - 1] = 40.0f;  // tie: the lower index
      row(1)[0] = std::nanf(""), row(1)[n - 1] = 41.0f;
      for (int i = 0; i < n; ++i) row(2)[i] = -INFINITY;
      for (int i = 0; i < n; ++i) row(3)[i] = float(i % 3);
      row(4)[0] = 0.0f;
      for (int i = 1; i < n; ++i) row(4)[i] = -0.0f;  // +0 and -0 are equal: index 0
    }
    for (int i = 0; i < n; ++i) row(5)[i] = std::nanf("");
    for (int i = 0; i < n; i += 2) row(6)[i] = std::nanf("");
    std::vector<int32_t> got(size_t(rows), -1);
    be->argmax_rows(x.data(), rows, n, size_t(n), got.data());
    for (int r = 0; r < rows; ++r) EXPECT_EQ(got[size_t(r)], scan(row(r), n)) << "row " << r << ", n = " << n;
    if (n > 2) {
      EXPECT_EQ(got[0], n / 2);
      EXPECT_EQ(got[2], 0);
      EXPECT_EQ(got[3], 2);
    }
    EXPECT_EQ(got[5], 0);
  }
}

// Rows with a stride past n (a vocabulary's padding ids): the values past n never win.
TEST(Argmax, CpuStridedRowsIgnoreThePadding) {
  auto be = make_cpu_backend(2);
  std::mt19937 rng(12);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const int rows = 5, n = 4106;
  const size_t stride = 4160;
  std::vector<float> x(size_t(rows) * stride);
  for (auto& f : x) f = nd(rng);
  for (int r = 0; r < rows; ++r)
    for (size_t i = size_t(n); i < stride; ++i) x[size_t(r) * stride + i] = 1e30f;
  std::vector<int32_t> got(size_t(rows), -1);
  be->argmax_rows(x.data(), rows, n, stride, got.data());
  for (int r = 0; r < rows; ++r) EXPECT_EQ(got[size_t(r)], scan(x.data() + size_t(r) * stride, n)) << "row " << r;
}

// argmax_rows_to: the same ids written to backend memory (the CPU's is host memory), only the
// rows' entries; the values around them are left as they were.
TEST(Argmax, CpuRowsToBackendMemoryEqualRows) {
  auto be = make_cpu_backend(2);
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int rows : {1, 7, 16}) {
    const int n = 3001;
    const size_t stride = 3008;
    std::vector<float> x(size_t(rows) * stride);
    for (auto& f : x) f = nd(rng);
    for (int r = 0; r < rows; r += 3) x[size_t(r) * stride + size_t(r)] = 50.0f;  // a planted max
    float* xd = static_cast<float*>(be->alloc(x.size() * sizeof(float)));
    be->upload(xd, x.data(), x.size() * sizeof(float));
    std::vector<int32_t> want(static_cast<size_t>(rows));
    be->argmax_rows(xd, rows, n, stride, want.data());
    auto* out = static_cast<int32_t*>(be->alloc(size_t(rows + 8) * sizeof(int32_t)));
    const std::vector<int32_t> poison(size_t(rows + 8), -3);
    be->upload(out, poison.data(), poison.size() * sizeof(int32_t));
    be->argmax_rows_to(xd, rows, n, stride, out + 4);
    std::vector<int32_t> got(poison.size());
    be->download(got.data(), out, got.size() * sizeof(int32_t));
    EXPECT_EQ(std::vector<int32_t>(got.begin() + 4, got.begin() + 4 + rows), want) << rows << " rows";
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got[size_t(i)], -3) << "entry " << i << " before the rows";
    for (int i = rows + 4; i < rows + 8; ++i) EXPECT_EQ(got[size_t(i)], -3) << "entry " << i << " after the rows";
    for (int r = 0; r < rows; r += 3) EXPECT_EQ(want[size_t(r)], r);
    be->release(out);
    be->release(xd);
  }
}

}  // namespace
}  // namespace df
