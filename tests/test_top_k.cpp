// Backend::top_k_rows on the CPU backend against a full sort with plain float comparisons: the
// k largest by value, equal values (+0 and -0 too) by lower id, NaN after every number, values
// returned bit for bit. (The CUDA backend is checked against the CPU one in test_cuda_ops.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
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

// A host emulation of the CUDA algorithm (backend/cuda/top_k.cu): per chunk of 4096 values a
// radix select on the order keys (four 8-bit histogram passes from the top byte), the keys
// above the k-th gathered in scrambled order (the kernel's atomics) and the ties in index order,
// a sort on (key, ~index); then the same select over the chunks' lists padded with key 0. Its
// result must be the CPU backend's, so the two-stage scheme (ties across chunks in id order,
// padding never chosen) is right independently of the kernel code.
std::vector<uint64_t> emulated_block_top_k(const std::vector<uint32_t>& keys, int k) {
  const int m = int(keys.size());
  uint32_t prefix = 0, mask = 0, left = uint32_t(k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    uint32_t hist[256] = {};
    for (uint32_t key : keys)
      if ((key & mask) == prefix) hist[(key >> shift) & 255u]++;
    uint32_t cum = 0;
    int bin = 255;
    while (cum + hist[bin] < left) cum += hist[bin--];
    prefix |= uint32_t(bin) << shift;
    mask |= 255u << shift;
    left -= cum;
  }
  std::vector<uint64_t> cand(size_t(k), 0);
  size_t above = 0;
  const size_t n_above = size_t(k) - left;
  for (int i = m - 1; i >= 0; --i)  // scrambled: the kernel's atomic slots come in any order
    if (keys[size_t(i)] > prefix) cand[above++] = (uint64_t(keys[size_t(i)]) << 32) | uint32_t(~uint32_t(i));
  EXPECT_EQ(above, n_above);
  uint32_t ties = 0;
  for (int i = 0; i < m && ties < left; ++i)
    if (keys[size_t(i)] == prefix) cand[n_above + ties++] = (uint64_t(prefix) << 32) | uint32_t(~uint32_t(i));
  std::sort(cand.begin(), cand.end(), std::greater<uint64_t>());
  return cand;
}

void emulated_top_k(const float* v, int n, int k, int32_t* ids) {
  constexpr int kChunk = 4096;
  const int chunks = (n + kChunk - 1) / kChunk;
  std::vector<uint32_t> list_keys(size_t(chunks) * k, 0);
  std::vector<int32_t> list_ids(size_t(chunks) * k, -1);
  for (int c = 0; c < chunks; ++c) {
    const int begin = c * kChunk, m = std::min(kChunk, n - begin), kc = std::min(k, m);
    std::vector<uint32_t> keys(static_cast<size_t>(m));
    for (int i = 0; i < m; ++i) keys[size_t(i)] = top_k_key(v[begin + i]);
    const std::vector<uint64_t> top = emulated_block_top_k(keys, kc);
    for (int j = 0; j < kc; ++j) {
      list_keys[size_t(c) * k + j] = uint32_t(top[size_t(j)] >> 32);
      list_ids[size_t(c) * k + j] = begin + int32_t(~uint32_t(top[size_t(j)]));
    }
  }
  const std::vector<uint64_t> top = emulated_block_top_k(list_keys, k);
  for (int j = 0; j < k; ++j) ids[j] = list_ids[~uint32_t(top[size_t(j)])];
}

TEST(TopK, TwoStageEmulationMatchesTheCpu) {
  auto be = make_cpu_backend(2);
  uint32_t seed = 500;
  for (int n : {1, 300, 4096, 4097, 20000, 248320}) {
    for (int k : {1, 40, 256}) {
      if (k > n) continue;
      const int rows = 7;
      const std::vector<float> x = hard_rows(rows, n, size_t(n), seed++);
      std::vector<int32_t> want(size_t(rows) * k), got(size_t(rows) * k, -7);
      std::vector<float> vals(size_t(rows) * k);
      be->top_k_rows(x.data(), rows, n, size_t(n), k, want.data(), vals.data());
      for (int r = 0; r < rows; ++r) emulated_top_k(x.data() + size_t(r) * n, n, k, got.data() + size_t(r) * k);
      ASSERT_EQ(got, want) << "n = " << n << ", k = " << k;
    }
  }
}

}  // namespace
}  // namespace df
