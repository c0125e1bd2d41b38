// Backend::top_k_rows on the CPU backend against a full sort with plain float comparisons: the
// k largest by value, equal values (+0 and -0 too) by lower id, NaN after every number, values
// returned bit for bit. (The CUDA backend is checked against the CPU one in test_cuda_ops.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "util/error.h"

namespace df {
namespace {

// The expected ids of a row: every id sorted by the documented order, the first k kept.
std::vector<int32_t> sorted_ids(const float* v, int n, int k) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    const bool na = std::isnan(v[a]), nb = std::isnan(v[b]);
    if (na != nb) return nb;  // the number first
    if (!na && v[a] != v[b]) return v[a] > v[b];
    return a < b;
  });
  ids.resize(size_t(k));
  return ids;
}

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// Rows of hard cases: planted ties (the top value several times), NaN among them, -inf rows,
// +0 / -0 mixes, few distinct values (ties everywhere), all NaN, random.
std::vector<float> hard_rows(int rows, int n, size_t stride, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::uniform_int_distribution<int> pick(0, n - 1);
  std::vector<float> x(size_t(rows) * stride, 1e30f);  // the padding past n would win if read
  for (int r = 0; r < rows; ++r) {
    float* v = x.data() + size_t(r) * stride;
    for (int i = 0; i < n; ++i) v[i] = nd(rng);
    switch (r % 7) {
      case 0:
        for (int t = 0; t < 5; ++t) v[pick(rng)] = 20.0f;  // ties at the top
        break;
      case 1:
        for (int t = 0; t < n / 3 + 1; ++t) v[pick(rng)] = std::nanf("");
        v[pick(rng)] = 25.0f;
        break;
      case 2:
        for (int i = 0; i < n; ++i) v[i] = (i % 5 == 0) ? v[i] : -INFINITY;
        break;
      case 3:
        for (int i = 0; i < n; ++i) v[i] = (i % 2) ? 0.0f : -0.0f;
        v[pick(rng)] = -1.0f;
        break;
      case 4:
        for (int i = 0; i < n; ++i) v[i] = std::round(v[i]);  // a handful of distinct values
        break;
      case 5:
        for (int i = 0; i < n; ++i) v[i] = std::nanf("");
        break;
      default:
        v[pick(rng)] = INFINITY;
        break;
    }
  }
  return x;
}

void check_rows(Backend& be, int rows, int n, size_t stride, int k, uint32_t seed) {
  const std::vector<float> x = hard_rows(rows, n, stride, seed);
  std::vector<int32_t> ids(size_t(rows) * k, -7);
  std::vector<float> vals(size_t(rows) * k, 12345.0f);
  be.top_k_rows(x.data(), rows, n, stride, k, ids.data(), vals.data());
  for (int r = 0; r < rows; ++r) {
    const float* v = x.data() + size_t(r) * stride;
    const std::vector<int32_t> want = sorted_ids(v, n, k);
    for (int j = 0; j < k; ++j) {
      const size_t o = size_t(r) * k + size_t(j);
      ASSERT_EQ(ids[o], want[size_t(j)]) << "row " << r << " rank " << j << ", n = " << n << ", k = " << k;
      ASSERT_EQ(bits(vals[o]), bits(v[want[size_t(j)]])) << "row " << r << " rank " << j;
    }
  }
}

TEST(TopK, CpuRowsMatchAFullSort) {
  auto be = make_cpu_backend(2);
  uint32_t seed = 1;
  for (int n : {1, 2, 7, 257, 4097, 30001}) {
    for (int k : {1, 2, 40, 255, 256}) {
      if (k > n) continue;
      check_rows(*be, 7, n, size_t(n), k, seed++);
    }
    if (n <= 256) check_rows(*be, 7, n, size_t(n), n, seed++);  // k = n: the whole row sorted
  }
}

TEST(TopK, CpuStridedRowsIgnoreThePadding) {
  auto be = make_cpu_backend(2);
  check_rows(*be, 9, 4105, 4160, 40, 77);
  check_rows(*be, 3, 255, 300, 255, 78);
}

TEST(TopK, CpuSpotChecks) {
  auto be = make_cpu_backend(1);
  const float x[] = {1.0f, 3.0f, std::nanf(""), 3.0f, -0.0f, 0.0f, -INFINITY, 2.0f};
  int32_t ids[8];
  float vals[8];
  be->top_k_rows(x, 1, 8, 8, 8, ids, vals);
  const std::vector<int32_t> want = {1, 3, 7, 0, 4, 5, 6, 2};
  EXPECT_EQ(std::vector<int32_t>(ids, ids + 8), want);
  EXPECT_TRUE(std::signbit(vals[4]));  // -0 comes back as -0
  EXPECT_TRUE(std::isnan(vals[7]));
}

TEST(TopK, BadArgumentsAreErrors) {
  auto be = make_cpu_backend(1);
  std::vector<float> x(300, 1.0f);
  std::vector<int32_t> ids(300);
  std::vector<float> vals(300);
  EXPECT_THROW(be->top_k_rows(x.data(), 1, 10, 10, 11, ids.data(), vals.data()), Error);  // k > n
  EXPECT_THROW(be->top_k_rows(x.data(), 1, 10, 10, 0, ids.data(), vals.data()), Error);
  EXPECT_THROW(be->top_k_rows(x.data(), 1, 300, 300, kMaxDeviceTopK + 1, ids.data(), vals.data()), Error);
  EXPECT_THROW(be->top_k_rows(x.data(), 1, 20, 10, 5, ids.data(), vals.data()), Error);  // n > stride
}

}  // namespace
}  // namespace df
