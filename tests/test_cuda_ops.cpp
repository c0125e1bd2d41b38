// The CUDA backend against the CPU backend, op by op on fresh random inputs, and whole models.
// Skips (GTEST_SKIP) when no GPU is present or the build has no CUDA backend, so it passes on
// GPU-less CI machines; tools/gpu-check.sh runs it on a GPU.
//
// Method. Every buffer is uploaded with the same contents to both backends; elements an op must
// write start as a quiet NaN (poison), gaps between strided rows as a NaN with a payload
// (sentinel) that must come back bit-for-bit. Each check prints one "[cuda-err]" line (largest
// error, relative L2 error, and the largest error/tolerance ratio) so runs show their margins.
//
// Tolerances, with u = 2^-24 (fp32 unit roundoff) and red_tol(n) = (4 sqrt(n) + 8) u for an
// fp32 sum of n terms relative to the sum of their magnitudes (a random walk of roundings with
// a 4x margin, as tests/test_cpu_ops.cpp argues):
//   bit-exact      embed (both decode the same blocks with ggml's rounding), add, kv_store
//                  (f32, f16, and q8_0: the kernel mirrors quantize_row's rounding step by step),
//                  copy_2d; argmax_rows exact (ties: lowest index; NaN never wins).
//   batch          a matmul row is bit-identical whether computed alone or among 1..40 rows
//                  (the fast kernels of matvec.cu and the generic ones alike), and for Q4_K
//                  and Q6_K among up to 2500 (the decode and prefill GEMM kernels agree bit for bit).
//   few ulp        swiglu, mul_sigmoid, gdn_gates: CUDA's expf/log1pf are within 2 ulp of
//                  glibc's; rtol 4e-6 (~32 ulp).
//   reductions     rms_norm, l2_norm_heads, gated_rms_norm: the norm differs by summation order,
//                  rtol 2 red_tol(dim) + 16 u per element.
//   matmul         vs the exact product (dequantized W, f32 x, double sums): red_tol(n_in) of
//                  sum|W x| for the fp32 kernels. The tensor-core kernel (mma_matmul.cu: the
//                  quantized types and F16) rounds W and x to f16 (2^-11 relative each, 2^-25
//                  absolute in the subnormal range) and accumulates in the tensor core, whose fp32
//                  additions may truncate: 2^-10 sum|W x| + 2^-25 sum(|W| + |x|) + (n_in/16 + 16)
//                  2^-23 sum|W x| (a linear, not random-walk, accumulation bound). vs the CPU backend: the CPU rounds activations to its dot format
//                  (Q8_0/Q8_1/Q8_K blocks, or f16/bf16) and this CUDA kernel does not, so the
//                  bound adds sum_k |W_k| e_k with e_k the rounding bound of x_k: amax(block) *
//                  (0.5/127 + 2^-11) for Q8 formats (half a step, plus the f16 scale), and
//                  |x_k| 2^-11 + 2^-25 (f16) or |x_k| 2^-8 (bf16); for Q4_1/Q5_1 also the f16
//                  rounding of the block sum s that multiplies the min. Bounds, not statistics.
//                  The integer tensor-core kernels (imma_matmul.cu, imma_gemm.cu, imma_q6k.cu,
//                  imma_iq4xs.cu: Q4_K, Q6_K rows of an even block count, and IQ4_XS, which
//                  they take as tiles: product_weight) use the CPU's Q8_K activations:
//                  vs the CPU, the float summation order alone (see AgainstExactAndCpu).
//   attention      fp32 softmax and dot products in another order: 2e-5 of max|V| + 2e-5 rel
//                  (q8_0 too: both sides dequantize the same bytes exactly, q * d in fp32).
//   flash attn     calls of > 32 rows on an f16 cache (tensor cores, q and P rounded to f16):
//                  2e-3 of max|V| + 2e-3 rel, relative L2 < 2e-3 (see FlashAttentionPrefill);
//                  a row bit-identical whatever the other rows of the call.
//   conv1d_silu    K products and expf: 1e-6 + 1e-5 relative.
//   fused ops      add_rms_norm, qk_norm_rope, gdn_conv_norm_gates: bit-exact against the
//                  separate CUDA ops they replace; against the CPU, those ops' bounds combined.
//                  The norms' Q8_K output: its bytes exactly the products' own quantizers'.
//   delta rule     d_k-term dots per token, over many tokens, through a contraction (|k| = 1,
//                  0 < beta < 1, decay < 1); and the CPU's chunked form for chunked = true:
//                  1e-4 of max|out| + 1e-4 relative; with keep_state the state unchanged and
//                  the outputs those of the same call without it, bit for bit.
// Models: logits against the CPU backend run with the same weights dequantized to f32 (so both
// compute in fp32 with the same math; where the CUDA backend multiplies on tensor cores, that
// reference rounds the weights and activations of the product to f16 as the kernel does): max
// |d| / (1 + |ref|) < 2e-3 with an f32 KV cache (the bound the CPU's own chunked-vs-recurrent
// model test uses), < 5e-3 with the default f16 cache (f16 rounding flips, see the test); 5e-2
// and a relative L2 error < 5e-3 for models with quantized weights (tensor cores, see the test);
// with a q8_0 cache, 0.2 more (q8_0 step flips, see the test); greedy 64-token continuations (f16 cache) identical
// unless the first divergence is at a near-tie (top-2 gap < 1e-2 (1 + |top|), twice the logit
// bound). Against the plain CPU backend (8-bit activations for quantized weights) the relative
// L2 error of the logits is reported, and must stay < 0.1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/argmax_split.h"
#include "backend/cuda/cuda_graphs.h"
#include "backend/cuda/kernels.h"
#include "gguf/gguf.h"
#include "model/target_model.h"
#include "engine/generator.h"
#include "model/draft_model.h"
#include "modelgen/make_draft.h"
#include "spec/draft_source.h"
#include "spec/spec_decoder.h"
#include "tokenizer/tokenizer.h"
#include "modelgen/make_model.h"
#include "quant/dequant.h"
#include "quant/blocks.h"
#include "quant/q4k_tiles.h"
#include "quant/quantize.h"
#include "quant/types.h"
#include "quant/vec_dot.h"
#include "support/model_runs.h"
#include "support/subprocess.h"
#include "backend/cuda/mv_units.cuh"
#include "util/half.h"

namespace df {
namespace {

constexpr double kU = 0x1p-24;
double red_tol(int64_t n) { return (4.0 * std::sqrt(double(n)) + 8.0) * kU; }

const char* kNoGpu = "no CUDA device present (or this build has no CUDA backend): CUDA tests skipped";
bool have_gpu() {
  static const int n = cuda_device_count();
  return n > 0;
}

float bits_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t float_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
const float kPoison = bits_float(0x7fc00000u);    // outputs before the op
// Quiet NaNs: a signalling one would be quietened by any float <-> double conversion the
// compiler chooses to keep, which made the untouched-element check flaky.
const float kSentinel = bits_float(0x7fe5a5a5u);  // gaps the op must not touch

struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  double normal(double sd = 1.0) { return std::normal_distribution<double>(0.0, sd)(g); }
  double uniform(double a, double b) { return std::uniform_real_distribution<double>(a, b)(g); }
  int64_t integer(int64_t a, int64_t b) { return std::uniform_int_distribution<int64_t>(a, b)(g); }
  std::vector<float> normals(size_t n, double sd = 1.0) {
    std::vector<float> v(n);
    for (auto& x : v) x = float(normal(sd));
    return v;
  }
};

// Comparison of a CUDA result with a reference, element by element, with a report line.
class Check {
 public:
  explicit Check(std::string what) : what_(std::move(what)) {}
  // want NaN: an element nobody writes; got must keep its bits. Otherwise |got - want| <= tol.
  void add(float got, double want, double tol, size_t i) {
    ++n_;
    if (std::isnan(want)) {
      if (float_bits(got) != float_bits(float(want))) note(i, got, want, tol, "untouched element changed");
      return;
    }
    const double d = std::fabs(double(got) - want);
    if (!(d <= tol)) note(i, got, want, tol, std::isnan(got) ? "not written (NaN)" : "out of tolerance");
    if (std::isfinite(d)) {
      max_abs_ = std::max(max_abs_, d);
      sum_d2_ += d * d;
      worst_ = std::max(worst_, tol > 0 ? d / tol : (d > 0 ? INFINITY : 0.0));
    }
    sum_r2_ += want * want;
  }
  // Element-wise with tol = atol + rtol |want|.
  void all(const std::vector<float>& got, const std::vector<float>& want, double rtol, double atol) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) add(got[i], want[i], atol + rtol * std::fabs(double(want[i])), i);
  }
  void exact(const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ++n_;
      if (float_bits(got[i]) != float_bits(want[i])) note(i, got[i], want[i], 0, "bits differ");
      const double d = std::fabs(double(got[i]) - want[i]);
      if (std::isfinite(d)) max_abs_ = std::max(max_abs_, d), sum_d2_ += d * d;
      if (std::isfinite(want[i])) sum_r2_ += double(want[i]) * want[i];
    }
  }
  double max_abs() const { return max_abs_; }
  double rel_l2() const { return sum_r2_ > 0 ? std::sqrt(sum_d2_ / sum_r2_) : std::sqrt(sum_d2_); }
  double worst() const { return worst_; }
  ~Check() {
    std::cout << "[cuda-err] " << std::left << std::setw(58) << what_ << std::right << std::scientific
              << std::setprecision(2) << " n=" << n_ << " max_abs=" << max_abs_ << " rel_l2=" << rel_l2()
              << " err/tol=" << worst_ << (bad_ ? "  FAILED" : "") << std::defaultfloat << "\n";
    if (bad_ == 0) return;
    std::ostringstream os;
    os << what_ << ": " << bad_ << " of " << n_ << " elements failed; first:";
    for (auto& f : first_) os << "\n    " << f;
    ADD_FAILURE() << os.str();
  }

 private:
  void note(size_t i, double got, double want, double tol, const char* why) {
    if (bad_++ < 6) {
      std::ostringstream os;
      os << std::setprecision(9) << "[" << i << "] got " << got << " want " << want << " tol " << tol << " (" << why
         << ")";
      first_.push_back(os.str());
    }
  }
  std::string what_;
  int64_t n_ = 0, bad_ = 0;
  double max_abs_ = 0, sum_d2_ = 0, sum_r2_ = 0, worst_ = 0;
  std::vector<std::string> first_;
};

// One buffer with the same initial contents on the CPU (side 0) and the CUDA (side 1) backend.
template <class T>
class Twin {
 public:
  Twin(Backend* const be[2], const std::vector<T>& init) : n_(init.size()) {
    for (int s = 0; s < 2; ++s) {
      be_[s] = be[s];
      p_[s] = static_cast<T*>(be_[s]->alloc(std::max<size_t>(n_, 1) * sizeof(T)));
      be_[s]->upload(p_[s], init.data(), n_ * sizeof(T));
    }
  }
  ~Twin() {
    for (int s = 0; s < 2; ++s) be_[s]->release(p_[s]);
  }
  Twin(const Twin&) = delete;
  Twin& operator=(const Twin&) = delete;
  T* operator[](int side) { return p_[side]; }
  std::vector<T> get(int side) const {
    std::vector<T> h(n_);
    be_[side]->download(h.data(), p_[side], n_ * sizeof(T));
    return h;
  }

 private:
  Backend* be_[2];
  T* p_[2];
  size_t n_;
};

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << kNoGpu;
    cpu_ = make_cpu_backend(0);
    gpu_ = make_cuda_backend(0);
    be_[0] = cpu_.get();
    be_[1] = gpu_.get();
  }
  // Runs f(backend, side) on the CPU, then on CUDA.
  template <class F>
  void both(F&& f) {
    for (int s = 0; s < 2; ++s) f(*be_[s], s);
    be_[1]->synchronize();
  }
  Backend* const* be() const { return be_; }
  Backend& gpu() { return *gpu_; }
  std::unique_ptr<Backend> cpu_, gpu_;
  Backend* be_[2] = {nullptr, nullptr};
};

// A strided matrix: rows of `len` values (random or poison) separated by sentinel gaps.
std::vector<float> strided(Rng& rng, int rows, int len, size_t stride, bool poison, double sd = 1.0) {
  std::vector<float> v(size_t(rows) * stride, kSentinel);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < len; ++j) v[size_t(r) * stride + j] = poison ? kPoison : float(rng.normal(sd));
  return v;
}

// ---------------------------------------------------------------------------------------------
// Memory

TEST_F(CudaOps, MemoryOps) {
  Rng rng(1);
  EXPECT_STREQ(gpu().name(), "cuda");
  for (size_t bytes : {size_t(1), size_t(7), size_t(4096), size_t(3) << 20}) {
    void* p = gpu().alloc(bytes);
    std::vector<uint8_t> got(bytes, 0xee);
    gpu().download(got.data(), p, bytes);
    EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](uint8_t b) { return b == 0; })) << "alloc not zeroed, " << bytes;
    std::vector<uint8_t> src(bytes);
    for (auto& b : src) b = uint8_t(rng.integer(0, 255));
    {
      std::vector<uint8_t> tmp = src;  // freed right after upload: upload must not read it later
      gpu().upload(p, tmp.data(), bytes);
    }
    gpu().download(got.data(), p, bytes);
    EXPECT_EQ(got, src) << "upload/download round trip, " << bytes;
    if (bytes >= 8) {  // overlapping copy: memmove semantics, both directions
      std::vector<uint8_t> want = src;
      const size_t n = bytes / 2 + 1, sh = bytes / 4 + 1;
      std::memmove(want.data() + sh, want.data(), std::min(n, bytes - sh));
      gpu().copy(static_cast<uint8_t*>(p) + sh, p, std::min(n, bytes - sh));
      gpu().download(got.data(), p, bytes);
      EXPECT_EQ(got, want) << "overlapping copy forward, " << bytes;
      std::memmove(want.data(), want.data() + sh, std::min(n, bytes - sh));
      gpu().copy(p, static_cast<uint8_t*>(p) + sh, std::min(n, bytes - sh));
      gpu().download(got.data(), p, bytes);
      EXPECT_EQ(got, want) << "overlapping copy backward, " << bytes;
    }
    void* q = gpu().alloc(bytes);
    gpu().copy(q, p, bytes);
    std::vector<uint8_t> a(bytes), b(bytes);
    gpu().download(a.data(), p, bytes);
    gpu().download(b.data(), q, bytes);
    EXPECT_EQ(a, b) << "copy, " << bytes;
    const void* w = gpu().weight_data(src.data(), bytes);
    gpu().download(got.data(), w, bytes);
    EXPECT_EQ(got, src) << "weight_data, " << bytes;
    gpu().release(q);
    gpu().release(p);
  }
}

// copy_2d: strided rows, both ways, against the CPU backend; bytes outside the copied rows keep
// their (random) contents.
TEST_F(CudaOps, Copy2d) {
  Rng rng(2);
  struct Case {
    size_t dst_pitch, src_pitch, row_bytes;
    int rows;
  };
  const std::vector<Case> cases = {{64, 64, 64, 5},       {100, 36, 36, 7},     {36, 100, 36, 7},   {4096, 8, 3, 17},
                                   {7, 4096, 7, 2},       {128, 96, 96, 1},     {1000, 1000, 999, 33}};
  for (const Case& c : cases) {
    const size_t dst_bytes = c.dst_pitch * size_t(c.rows), src_bytes = c.src_pitch * size_t(c.rows);
    std::vector<uint8_t> src(src_bytes), dst0(dst_bytes);
    for (auto& b : src) b = uint8_t(rng.integer(0, 255));
    for (auto& b : dst0) b = uint8_t(rng.integer(0, 255));
    Twin<uint8_t> sd(be(), src), dd(be(), dst0);
    both([&](Backend& b, int s) { b.copy_2d(dd[s], c.dst_pitch, sd[s], c.src_pitch, c.row_bytes, c.rows); });
    const auto want = dd.get(0), got = dd.get(1);
    std::vector<uint8_t> ref = dst0;
    for (int r = 0; r < c.rows; ++r)
      std::memcpy(ref.data() + size_t(r) * c.dst_pitch, src.data() + size_t(r) * c.src_pitch, c.row_bytes);
    EXPECT_EQ(want, ref) << "CPU copy_2d, pitches " << c.dst_pitch << "/" << c.src_pitch;
    EXPECT_EQ(got, ref) << "CUDA copy_2d, pitches " << c.dst_pitch << "/" << c.src_pitch << " row " << c.row_bytes
                        << " x " << c.rows;
    std::cout << "[cuda-err] copy_2d " << std::left << std::setw(50)
              << (std::to_string(c.rows) + " rows of " + std::to_string(c.row_bytes) + " bytes") << std::right
              << (got == ref ? " bit-exact" : "  FAILED") << "\n";
  }
}

// argmax_rows: CUDA and CPU against a host scan; ties go to the lowest index, NaN never wins, a
// row of only NaN gives 0. Rows as long as a vocabulary (248320) and as short as 1.
TEST_F(CudaOps, ArgmaxRows) {
  Rng rng(3);
  for (int n : {1, 7, 1000, 33000, 248320}) {
    const int rows = 9;
    std::vector<float> x = rng.normals(size_t(rows) * n, 3.0);
    auto row = [&](int r) { return x.data() + size_t(r) * n; };
    if (n > 1) {
      const int a = int(rng.integer(0, n - 1)), b = int(rng.integer(0, n - 1));
      row(1)[a] = 100.0f, row(1)[b] = 100.0f;                               // a tie
      for (int i = 0; i < n; i += 3) row(2)[i] = std::nanf("");             // NaNs around the max
      row(2)[std::min(n - 1, 4)] = 50.0f;
      for (int i = 0; i < n; ++i) row(4)[i] = -INFINITY;                    // all -inf: index 0
      for (int i = 0; i < n; ++i) row(6)[i] = float(i % 5);                 // many ties: index 4
      row(7)[n - 1] = 1e30f;                                                // the max at the end
      row(8)[0] = std::nanf(""), row(8)[n - 1] = 1e30f;
    }
    for (int i = 0; i < n; ++i) row(3)[i] = std::nanf("");  // only NaN: 0
    std::vector<int32_t> want(static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r) {
      int best = -1;
      for (int i = 0; i < n; ++i)
        if (!std::isnan(row(r)[i]) && (best < 0 || row(r)[i] > row(r)[best])) best = i;
      want[size_t(r)] = best < 0 ? 0 : best;
    }
    Twin<float> xd(be(), x);
    std::vector<int32_t> got[2];
    for (int s = 0; s < 2; ++s) {
      got[s].assign(size_t(rows), -7);
      be_[s]->argmax_rows(xd[s], rows, n, size_t(n), got[s].data());
    }
    EXPECT_EQ(got[0], want) << "CPU argmax_rows, n = " << n;
    EXPECT_EQ(got[1], want) << "CUDA argmax_rows, n = " << n;
    std::cout << "[cuda-err] argmax_rows " << std::left << std::setw(46) << ("n=" + std::to_string(n)) << std::right
              << (got[1] == want ? " exact" : "  FAILED") << "\n";
  }
}

// Rows with a stride past n (a vocabulary's padding ids): the values past n never win.
TEST_F(CudaOps, ArgmaxRowsStrided) {
  Rng rng(4);
  const int rows = 6, n = 248000;
  const size_t stride = 248320;
  std::vector<float> x = rng.normals(size_t(rows) * stride, 3.0);
  for (int r = 0; r < rows; ++r)
    for (size_t i = size_t(n); i < stride; ++i) x[size_t(r) * stride + i] = 1e30f;
  std::vector<int32_t> want(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) {
    const float* v = x.data() + size_t(r) * stride;
    want[size_t(r)] = int32_t(std::max_element(v, v + n) - v);
  }
  Twin<float> xd(be(), x);
  std::vector<int32_t> got[2];
  for (int s = 0; s < 2; ++s) {
    got[s].assign(size_t(rows), -7);
    be_[s]->argmax_rows(xd[s], rows, n, stride, got[s].data());
  }
  EXPECT_EQ(got[0], want) << "CPU argmax_rows, strided";
  EXPECT_EQ(got[1], want) << "CUDA argmax_rows, strided";
}

// The split argmax (argmax.cu: contiguous chunks of argmax_split.h, a block each, merged by a
// second kernel) on rows that stress the split, against a host scan (and the CPU backend):
// vocabulary-wide rows, 16 rows at once and every count 1..32, the max in the last chunk, equal
// maxima on both sides of every chunk boundary and at every chunk's end (lowest index wins),
// NaN rows, -inf among NaN, n not a multiple of the chunk, rows strided past n (1e30 in the gap).
// Every row's answer is random, so ids left over from an earlier call do not pass.
TEST_F(CudaOps, ArgmaxRowsSplitChunks) {
  namespace as = cuda::argmax_split;
  struct Shape {
    int rows, n;
    size_t stride;
  };
  std::vector<Shape> shapes = {{16, 248320, 248320}, {16, 248000, 248320}, {1, 248320, 248320},
                               {5, 2049, 2049},      {32, 262145, 262147}, {3, 4096, 5000}};
  for (int rows = 1; rows <= 32; ++rows) shapes.push_back({rows, 33000 + 7 * rows, size_t(33000 + 8 * rows)});
  Rng rng(5);
  for (const Shape& sh : shapes) {
    const int n = sh.n, chunk = as::chunk(n), parts = as::parts(n);
    const int64_t last = int64_t(parts - 1) * chunk;  // the last chunk's first index
    std::vector<float> x = rng.normals(size_t(sh.rows) * sh.stride, 3.0);
    auto at = [&](int64_t lo, int64_t hi) { return size_t(rng.integer(lo, hi)); };
    for (int r = 0; r < sh.rows; ++r) {
      float* v = x.data() + size_t(r) * sh.stride;
      for (size_t i = size_t(n); i < sh.stride; ++i) v[i] = 1e30f;
      switch ((r + int(rng.integer(0, 7))) % 8) {
        case 0: v[n - 1] = 1e29f; break;                                   // the last value
        case 1: v[at(last, n - 1)] = 1e29f; break;                          // in the last chunk
        case 2:                                                             // both sides of each boundary
          for (int c = 1; c < parts; ++c) v[size_t(c) * chunk] = v[size_t(c) * chunk - 1] = 60.0f;
          v[at(0, n - 1)] = 60.0f;
          break;
        case 3:                                                             // every chunk's last value
          for (int c = 0; c < parts; ++c) v[size_t(std::min<int64_t>(int64_t(c + 1) * chunk, n) - 1)] = 70.0f;
          v[at(0, n - 1)] = 70.0f;
          break;
        case 4: std::fill(v, v + n, std::nanf("")); break;                  // only NaN: 0
        case 5:                                                             // -inf among NaN
          std::fill(v, v + n, std::nanf(""));
          v[at(0, n - 1)] = -INFINITY, v[at(0, n - 1)] = -INFINITY;
          break;
        case 6:                                                             // NaN on every even index
          for (int i = 0; i < n; i += 2) v[i] = std::nanf("");
          break;
        default: break;                                                     // the random max
      }
    }
    std::vector<int32_t> want(size_t(sh.rows));
    for (int r = 0; r < sh.rows; ++r) {
      const float* v = x.data() + size_t(r) * sh.stride;
      int best = -1;
      for (int i = 0; i < n; ++i)
        if (!std::isnan(v[i]) && (best < 0 || v[i] > v[best])) best = i;
      want[size_t(r)] = best < 0 ? 0 : best;
    }
    Twin<float> xd(be(), x);
    std::vector<int32_t> got[2];
    for (int s = 0; s < 2; ++s) {
      got[s].assign(size_t(sh.rows), -7);
      be_[s]->argmax_rows(xd[s], sh.rows, n, sh.stride, got[s].data());
    }
    const std::string tag = std::to_string(sh.rows) + " rows, n = " + std::to_string(n) + ", stride " +
                            std::to_string(sh.stride) + ", " + std::to_string(parts) + " chunks";
    EXPECT_EQ(got[0], want) << "CPU argmax_rows, " << tag;
    EXPECT_EQ(got[1], want) << "CUDA argmax_rows, " << tag;
    if (sh.rows >= 16 || sh.n > 200000)
      std::cout << "[cuda-err] argmax_rows split " << std::left << std::setw(40) << tag << std::right
                << (got[1] == want ? " exact" : "  FAILED") << "\n";
  }
}

// ---------------------------------------------------------------------------------------------
// matmul and embed over every weight type

const std::vector<GgmlType>& weight_types() {
  static const std::vector<GgmlType> v = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                                          GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                                          GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K,
                                          GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS};
  return v;
}

struct HostWeight {
  GgmlType type;
  int64_t n_in, n_out;
  size_t row_bytes;
  std::vector<uint8_t> bytes;
  std::vector<float> W;  // dequantized, n_out × n_in
};

HostWeight make_weight(GgmlType t, int64_t n_in, int64_t n_out, uint64_t seed) {
  Rng rng(seed);
  HostWeight hw{t, n_in, n_out, row_size(t, n_in), {}, {}};
  hw.bytes.resize(hw.row_bytes * size_t(n_out));
  hw.W.resize(size_t(n_in * n_out));
  std::vector<float> src(static_cast<size_t>(n_in));
  for (int64_t o = 0; o < n_out; ++o) {
    const double sd = 0.02 * double(1 + o % 3);
    for (auto& f : src) f = float(rng.normal(sd));
    if (o % 4 == 1) src[size_t(rng.integer(0, n_in - 1))] = float(8 * sd);  // an outlier
    uint8_t* row = hw.bytes.data() + size_t(o) * hw.row_bytes;
    quantize_row(t, src.data(), row, n_in);
    dequantize_row(t, row, hw.W.data() + o * n_in, n_in);
  }
  return hw;
}

// A test weight's copy for the products: Q5_K and IQ4_XS as the models bind them (upload_matrix:
// their tile layouts on CUDA, the only ones their integer kernels read; the CPU keeps the rows);
// other types as GGUF rows (weight_data), so that the GGUF-row kernels of Q4_K and Q6_K stay
// covered here (their tiles have tests of their own, Q4kTiledWeightsEqualRows, Q6kTiled*).
Weight product_weight(Backend& b, const HostWeight& hw) {
  const Weight host{hw.type, hw.n_in, hw.n_out, hw.bytes.data(), hw.row_bytes};
  if (hw.type == GgmlType::Q5_K || hw.type == GgmlType::IQ4_XS) return b.upload_matrix(host);
  return Weight{hw.type, hw.n_in, hw.n_out, b.weight_data(hw.bytes.data(), hw.bytes.size()), hw.row_bytes};
}

// Rows scaled by 10^((r % 5) - 2); row 2 is zero (a Q8 scale of 0 must give 0, not NaN).
std::vector<float> make_activations(int rows, int64_t n_in, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(size_t(rows) * size_t(n_in));
  for (int r = 0; r < rows; ++r) {
    const double s = std::pow(10.0, (r % 5) - 2);
    for (int64_t k = 0; k < n_in; ++k) x[size_t(r * n_in + k)] = r == 2 ? 0.0f : float(rng.normal(s));
  }
  return x;
}

// Bound on |x^_k - x_k| for the CPU's activation format (see the header comment).
std::vector<double> activation_rounding(GgmlType t, const std::vector<float>& x, int rows, int64_t n_in) {
  const GgmlType dot = type_traits(t).vec_dot_type;
  std::vector<double> e(x.size());
  const int blk = dot == GgmlType::Q8_K ? 256 : 32;
  for (int r = 0; r < rows; ++r) {
    const float* xr = x.data() + size_t(r) * n_in;
    double* er = e.data() + size_t(r) * n_in;
    if (dot == GgmlType::F32) {
      std::fill(er, er + n_in, 0.0);
    } else if (dot == GgmlType::F16 || dot == GgmlType::BF16) {
      // Half an ulp; f16 also has subnormals below 2^-14, spaced 2^-24.
      const double rel = dot == GgmlType::F16 ? 0x1p-11 : 0x1p-8, abs = dot == GgmlType::F16 ? 0x1p-25 : 0.0;
      for (int64_t k = 0; k < n_in; ++k) er[k] = std::fabs(double(xr[k])) * rel + abs;
    } else {
      for (int64_t b = 0; b < n_in; b += blk) {
        double amax = 0;
        for (int64_t k = b; k < b + blk; ++k) amax = std::max(amax, std::fabs(double(xr[k])));
        for (int64_t k = b; k < b + blk; ++k) er[k] = amax * (0.5 / 127 + 0x1p-11);
      }
    }
  }
  return e;
}

// An f16 field of a block (the min m of Q4_1/Q5_1).
double half_value(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  const int e = (h >> 10) & 31, m = h & 1023;
  const double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

struct MatmulCase {
  int64_t n_in, n_out;
  int rows;
};

class CudaMatmul : public CudaOps, public ::testing::WithParamInterface<GgmlType> {};

TEST_P(CudaMatmul, AgainstExactAndCpu) {
  const GgmlType t = GetParam();
  const bool fl = type_traits(t).block_size == 1;
  std::vector<MatmulCase> cases = {{256, 37, 1}, {1280, 130, 7}, {4096, 67, 17}, {512, 5, 40}, {256, 1, 16}, {768, 33, 2},
                                   {1280, 130, 33}, {5120, 70, 70},  // > 16 rows: the tiled prefill kernel
                                   // Shapes every fast kernel (matvec.cu) takes, at each row-count class
                                   // (1, 2, 3-4, 5-8, 9-16, > 16) and with output tails (n_out % 16 != 0):
                                   {1024, 129, 1}, {2048, 66, 2}, {3072, 35, 3}, {1024, 17, 8}, {2048, 40, 13},
                                   {1024, 9, 37},
                                   // Even block counts at each integer-kernel n-tile count (Q6_K takes
                                   // only those), and more than 32 super-blocks (3 a slot: slots
                                   // starting on odd ones):
                                   {1536, 45, 9}, {2560, 33, 16}, {1536, 50, 33}, {17408, 20, 3},
                                   // 17-24 rows: four n-tiles, the fourth empty
                                   {2048, 50, 23}};
  if (fl) cases.push_back({301, 37, 3}), cases.push_back({1, 5, 2}), cases.push_back({33, 9, 16});
  // Q4_K above 32 rows: the tiled prefill GEMM (imma_gemm.cu), with row tails (33, 100, 257 in
  // 64- or 128-row tiles) and output tails (37, 129, 300 in 128-output tiles); 8448 is 33
  // super-blocks, two per slot (the kernel's other variant). Q5_K (tiles, product_weight): the
  // same kernels' kQ5k variants at every row count. Q6_K: its own prefill GEMM
  // (imma_q6k_gemm.cu) where the block count is even (256, 2304, 8448: odd, the f16 kernel);
  // 9216: 36 super-blocks, two per slot, for both types' GEMMs. IQ4_XS (tiles): its decode
  // kernel (imma_iq4xs.cu) up to 32 rows, its GEMM (imma_iq4xs_gemm.cu) above, every case.
  // Q8_0 tiles (imma_q80.cu, imma_q80_gemm.cu): the same list, and 32 rows (four live n-tiles).
  if (mv::int8_tensor_core_type(t) || t == GgmlType::Q8_0)
    cases.insert(cases.end(), {{256, 37, 33}, {1024, 300, 64}, {6144, 37, 100}, {2304, 129, 257}, {512, 300, 512},
                               {8448, 37, 70}, {9216, 45, 100}, {2048, 40, 32}});
  const bool has_min = t == GgmlType::Q4_1 || t == GgmlType::Q5_1;
  uint64_t seed = 1000 + uint64_t(t) * 100;
  for (const auto& c : cases) {
    const HostWeight hw = make_weight(t, c.n_in, c.n_out, seed++);
    const std::vector<float> x = make_activations(c.rows, c.n_in, seed++);
    const std::vector<double> e = activation_rounding(t, x, c.rows, c.n_in);
    Weight w[2];
    for (int s = 0; s < 2; ++s)
      w[s] = Weight{t, c.n_in, c.n_out, be_[s]->weight_data(hw.bytes.data(), hw.bytes.size()), hw.row_bytes};
    // The CUDA side in GGUF rows, and as upload_matrix stores it where that is a tile layout
    // (Q4_K, Q6_K: the same kernels' bits; Q8_0: the integer kernels, which only read tiles).
    std::vector<Weight> gpu_ws = {w[1]};
    const Weight up = gpu().upload_matrix(Weight{t, c.n_in, c.n_out, hw.bytes.data(), hw.row_bytes});
    if (up.tiles) gpu_ws.push_back(up);
    for (const Weight& wg : gpu_ws) {
      Twin<float> xd(be(), x), yd(be(), std::vector<float>(size_t(c.rows) * c.n_out, kPoison));
      both([&](Backend& b, int s) { b.matmul(s == 0 ? w[0] : wg, xd[s], c.rows, yd[s]); });
      const auto cpu = yd.get(0), gpu = yd.get(1);
      std::ostringstream name;
      name << "matmul " << type_name(t) << (wg.tiles ? " tiles " : " ") << c.n_in << "x" << c.n_out
           << " rows=" << c.rows;
      Check vs_exact(name.str() + " vs exact"), vs_cpu(name.str() + " vs cpu");
      const bool int8 = cuda::imma_supports(wg);  // (device copies are 256-byte aligned)
      for (int r = 0; r < c.rows; ++r)
        for (int64_t o = 0; o < c.n_out; ++o) {
          double ref = 0, mag = 0, act = 0, abs_sum = 0;
          for (int64_t k = 0; k < c.n_in; ++k) {
            const double wk = hw.W[size_t(o * c.n_in + k)], xk = x[size_t(r * c.n_in + k)];
            ref += wk * xk;
            mag += std::fabs(wk * xk);
            abs_sum += std::fabs(wk) + std::fabs(xk);
            act += std::fabs(wk) * e[size_t(r * c.n_in + k)];
            // Q4_1/Q5_1 add m * s per block, s = f16(d_x sum q_x): 2^-11 of sum |x^|, doubled.
            if (has_min && k % 32 == 0) {
              const uint8_t* blk = hw.bytes.data() + size_t(o) * hw.row_bytes + size_t(k / 32) * type_traits(t).type_size;
              double xs = 0;
              for (int64_t j = k; j < k + 32; ++j) xs += std::fabs(double(x[size_t(r * c.n_in + j)]));
              act += std::fabs(half_value(blk + 2)) * 0x1p-10 * xs;
            }
          }
          const size_t i = size_t(r) * c.n_out + o;
          double tol = red_tol(c.n_in) * mag + 1e-30;
          // Types the tensor-core kernel takes (other shapes of them get the fp32 kernels and
          // meet this looser bound all the same).
          if (mv::tensor_core_type(t)) tol = mag * (0x1p-10 + (double(c.n_in) / 16 + 16) * 0x1p-23) + 0x1p-25 * abs_sum + 1e-30;
          if (int8) {
            // 8-bit activations as the CPU's (Q8_K; Q8_0 for Q8_0): vs exact, their rounding plus
            // float sums of scaled integer terms (each up to ~4x the |w x| it stands for, so 8
            // red_tol); vs the CPU, which has the same integers, the float summation order alone.
            const double sums = 8 * red_tol(c.n_in) * (mag + act) + 1e-30;
            vs_exact.add(gpu[i], ref, sums + act * 1.01, i);
            vs_cpu.add(gpu[i], cpu[i], 2 * sums, i);
            continue;
          }
          vs_exact.add(gpu[i], ref, tol, i);
          vs_cpu.add(gpu[i], cpu[i], 2 * tol + act * 1.01, i);
        }
    }
  }
}

TEST_P(CudaMatmul, EmbedIsExact) {
  const GgmlType t = GetParam();
  const bool fl = type_traits(t).block_size == 1;
  const int64_t n_in = fl ? 301 : 512, n_vocab = 50;
  const HostWeight hw = make_weight(t, n_in, n_vocab, 77 + uint64_t(t));
  const std::vector<int32_t> toks = {0, 49, 7, 7, 23, 1, 48};
  const int rows = int(toks.size());
  Weight w[2];
  for (int s = 0; s < 2; ++s) w[s] = Weight{t, n_in, n_vocab, be_[s]->weight_data(hw.bytes.data(), hw.bytes.size()), hw.row_bytes};
  Twin<int32_t> td(be(), toks);
  Twin<float> out(be(), std::vector<float>(size_t(rows) * n_in, kPoison));
  both([&](Backend& b, int s) { b.embed(w[s], td[s], rows, out[s]); });
  Check c(std::string("embed ") + type_name(t));
  c.exact(out.get(1), out.get(0));
}

// A row's product must not depend on the other rows of the call (the model's batch-invariance
// test relies on it): each row of a 40-row product, computed within calls of 1, 2, 3, 5, 8, 16,
// 17, 33 and 40 rows (every kernel shape and row-group split; for the integer kernels' types, 33
// and 40 rows take the prefill GEMMs and the rest the decode kernels), is bit-identical; in GGUF
// rows and, where upload_matrix makes one, the tile layout (the integer kernels of Q5_K, IQ4_XS and
// Q8_0 only read tiles).
TEST_P(CudaMatmul, RowsAreBatchInvariant) {
  const GgmlType t = GetParam();
  const bool fl = type_traits(t).block_size == 1;
  // 1024: fast kernels where the type has one; 8192: the tensor-core kernel's 16-warp K split;
  // 17408: the integer kernels' slots of 3 super-blocks.
  for (int64_t n_in : {int64_t(1024), int64_t(768), int64_t(8192), int64_t(17408)}) {
    if (fl && n_in % 1024 != 0) continue;
    const int64_t n_out = 45;
    const int rows = 40;
    const HostWeight hw = make_weight(t, n_in, n_out, 4242 + uint64_t(t));
    const std::vector<float> x = make_activations(rows, n_in, 99 + uint64_t(t));
    std::vector<Weight> layouts = {Weight{t, n_in, n_out, gpu().weight_data(hw.bytes.data(), hw.bytes.size()), hw.row_bytes}};
    const Weight up = gpu().upload_matrix(Weight{t, n_in, n_out, hw.bytes.data(), hw.row_bytes});
    if (up.tiles) layouts.push_back(up);
    for (const Weight& w : layouts) {
      float* xd = static_cast<float*>(gpu().alloc(x.size() * sizeof(float)));
      float* yd = static_cast<float*>(gpu().alloc(size_t(rows) * n_out * sizeof(float)));
      gpu().upload(xd, x.data(), x.size() * sizeof(float));
      const std::vector<float> poison(size_t(rows) * n_out, kPoison);
      gpu().upload(yd, poison.data(), poison.size() * sizeof(float));
      gpu().matmul(w, xd, rows, yd);
      std::vector<float> all(poison.size()), part(poison.size());
      gpu().download(all.data(), yd, all.size() * sizeof(float));
      for (int width : {1, 2, 3, 5, 8, 16, 17, 33}) {
        gpu().upload(yd, poison.data(), poison.size() * sizeof(float));
        for (int r0 = 0; r0 < rows; r0 += width)
          gpu().matmul(w, xd + size_t(r0) * n_in, std::min(width, rows - r0), yd + size_t(r0) * n_out);
        gpu().download(part.data(), yd, part.size() * sizeof(float));
        std::ostringstream name;
        name << "matmul " << type_name(t) << (w.tiles ? " tiles " : " ") << n_in << "x" << n_out
             << " rows in calls of " << width << " vs one call of " << rows;
        Check(name.str()).exact(part, all);
      }
      gpu().release(yd);
      gpu().release(xd);
    }
  }
}

// Projections that share an input (matmul_shared_input: one quantization of x and shared
// launches for each group of Q4_K, Q5_K (tiles), Q6_K or IQ4_XS (tiles) ones of one n_in) give
// each output bit for bit what its own matmul gives, with the four types, other n_in and a weight
// off the integer kernels (Q6_K with an odd block count) mixed in, more weights than one launch
// takes, and row counts of every kernel shape.
TEST_F(CudaOps, SharedInputMatmulEqualsSeparateProducts) {
  struct Spec {
    GgmlType t;
    int64_t n_in, n_out;
  };
  const std::vector<Spec> specs = {{GgmlType::Q4_K, 1024, 45}, {GgmlType::Q4_K, 1024, 130}, {GgmlType::Q6_K, 1024, 37},
                                   {GgmlType::Q4_K, 1024, 16}, {GgmlType::Q4_K, 2048, 20}, {GgmlType::Q6_K, 1024, 50},
                                   {GgmlType::Q4_K, 1024, 3},  {GgmlType::Q6_K, 2048, 9},  {GgmlType::Q4_K, 1024, 7},
                                   {GgmlType::Q6_K, 768, 10},  {GgmlType::Q6_K, 1024, 5},  {GgmlType::Q5_K, 1024, 33},
                                   {GgmlType::Q5_K, 2048, 17}, {GgmlType::Q5_K, 1024, 20}, {GgmlType::Q5_K, 1024, 9},
                                   {GgmlType::Q5_K, 1024, 16}, {GgmlType::Q5_K, 1024, 40}, {GgmlType::Q5_K, 1024, 3},
                                   {GgmlType::IQ4_XS, 1024, 45}, {GgmlType::IQ4_XS, 2048, 20},
                                   {GgmlType::IQ4_XS, 1024, 130}, {GgmlType::IQ4_XS, 1024, 3}};
  std::vector<HostWeight> hws;
  std::vector<Weight> ws;
  for (size_t i = 0; i < specs.size(); ++i) {
    hws.push_back(make_weight(specs[i].t, specs[i].n_in, specs[i].n_out, 5150 + i));
    ws.push_back(product_weight(gpu(), hws.back()));
  }
  for (int rows : {1, 3, 5, 9, 16, 17, 40, 100, 300}) {  // 40, 100, 300: the prefill GEMMs
    const std::vector<float> x = make_activations(rows, 2048, 77 + uint64_t(rows));
    float* xd = static_cast<float*>(gpu().alloc(x.size() * sizeof(float)));
    gpu().upload(xd, x.data(), x.size() * sizeof(float));
    std::vector<float*> sep, grp;
    std::vector<const Weight*> wp;
    for (const Weight& w : ws) {
      const std::vector<float> poison(size_t(rows) * size_t(w.n_out), kPoison);
      for (auto* v : {&sep, &grp}) {
        v->push_back(static_cast<float*>(gpu().alloc(poison.size() * sizeof(float))));
        gpu().upload(v->back(), poison.data(), poison.size() * sizeof(float));
      }
      wp.push_back(&w);
      gpu().matmul(w, xd, rows, sep.back());
    }
    gpu().matmul_shared_input(wp.data(), grp.data(), int(ws.size()), xd, rows);
    for (size_t i = 0; i < ws.size(); ++i) {
      std::vector<float> a(size_t(rows) * size_t(ws[i].n_out)), b(a.size());
      gpu().download(a.data(), sep[i], a.size() * sizeof(float));
      gpu().download(b.data(), grp[i], b.size() * sizeof(float));
      std::ostringstream name;
      name << "matmul_shared_input " << type_name(ws[i].type) << " " << ws[i].n_in << "x" << ws[i].n_out
           << " rows=" << rows << " vs its own matmul";
      Check(name.str()).exact(b, a);
      gpu().release(sep[i]);
      gpu().release(grp[i]);
    }
    gpu().release(xd);
  }
}

struct GemmCase {
  int64_t n_in, n_out;
  int rows;
};

// Chosen rows of one call of c.rows rows of a t weight (the prefill GEMM above 32 rows) equal,
// memcmp-equal, the same rows in calls of their own: 1 row and 33 rows starting there (the
// decode kernel, and the GEMM at another tile alignment). Outputs start as NaN. A weight of at
// most cuda::kFewOutputBlocks blocks of 16 outputs (37 outputs below) takes the decode kernel at
// every row count (Q6_K excepted), so there the check is of its 32-row groups against single rows.
void expect_gemm_rows_equal_decode_rows(Backend& gpu, GgmlType t, const GemmCase& c, uint64_t seed,
                                        bool upload_matrix = false) {
  const HostWeight hw = make_weight(t, c.n_in, c.n_out, seed);
  const std::vector<float> x = make_activations(c.rows, c.n_in, seed + 100);
  const Weight w = upload_matrix
                       ? gpu.upload_matrix(Weight{t, c.n_in, c.n_out, hw.bytes.data(), hw.row_bytes})
                       : product_weight(gpu, hw);
  EXPECT_TRUE(!upload_matrix || w.tiles) << "upload_matrix kept " << type_name(t) << " in rows";
  const size_t n_out = size_t(c.n_out);
  const std::vector<float> poison(size_t(c.rows) * n_out, kPoison);
  float* xd = static_cast<float*>(gpu.alloc(x.size() * sizeof(float)));
  float* yd = static_cast<float*>(gpu.alloc(size_t(c.rows) * n_out * sizeof(float)));
  float* yp = static_cast<float*>(gpu.alloc(33 * n_out * sizeof(float)));
  gpu.upload(xd, x.data(), x.size() * sizeof(float));
  gpu.upload(yd, poison.data(), size_t(c.rows) * n_out * sizeof(float));
  gpu.matmul(w, xd, c.rows, yd);
  std::vector<float> all(size_t(c.rows) * n_out), part(33 * n_out);
  gpu.download(all.data(), yd, all.size() * sizeof(float));
  for (int r : {0, 1, 2, 63, 64, 127, 128, 255, 266, c.rows - 1}) {
    const float* want = all.data() + size_t(r) * n_out;
    for (int width : {1, 33}) {
      if (r + width > c.rows) continue;
      gpu.upload(yp, poison.data(), size_t(width) * n_out * sizeof(float));
      gpu.matmul(w, xd + size_t(r) * size_t(c.n_in), width, yp);
      gpu.download(part.data(), yp, size_t(width) * n_out * sizeof(float));
      EXPECT_EQ(std::memcmp(part.data(), want, size_t(width) * n_out * sizeof(float)), 0)
          << "matmul " << type_name(t) << " " << c.n_in << "x" << c.n_out << ": rows " << r << ".." << r + width - 1
          << " in a call of their own differ from the same rows in one call of " << c.rows;
    }
  }
  gpu.release(yp);
  gpu.release(yd);
  gpu.release(xd);
}

// The Q4_K prefill GEMM (imma_gemm.cu, calls of more than 32 rows) gives each row the bits the
// decode kernel (imma_matmul.cu) gives it in a call of its own. n_in 1024 and 5120: one
// super-block per slot; 8448 and 17408: two and three per slot (the running totals in shared
// memory). Calls of 300 rows here take the 128 x 64 blocks; 600 x 12000 and 2500 x 3000 the
// 128 x 128 ones (grids of 3 waves or more on up to 156 SMs).
TEST_F(CudaOps, Q4kGemmRowsEqualDecodeRows) {
  for (const GemmCase& c : {GemmCase{5120, 300, 300}, GemmCase{8448, 37, 300}, GemmCase{17408, 130, 300},
                            GemmCase{1024, 12000, 600}, GemmCase{8448, 3000, 2500}})
    expect_gemm_rows_equal_decode_rows(gpu(), GgmlType::Q4_K, c, 7100 + uint64_t(c.n_in));
}

// The same for Q5_K tiles (the kQ5k variants of both kernels; product_weight tiles them), with
// the Q4_K cases' shapes: one, two and three super-blocks a slot, both GEMM block shapes.
TEST_F(CudaOps, Q5kGemmRowsEqualDecodeRows) {
  for (const GemmCase& c : {GemmCase{5120, 300, 300}, GemmCase{8448, 37, 300}, GemmCase{17408, 130, 300},
                            GemmCase{1024, 12000, 600}, GemmCase{8448, 3000, 2500}})
    expect_gemm_rows_equal_decode_rows(gpu(), GgmlType::Q5_K, c, 7200 + uint64_t(c.n_in));
}

// The same for IQ4_XS tiles: its prefill GEMM (imma_iq4xs_gemm.cu) against its decode kernel
// (imma_iq4xs.cu), the same shapes (block shapes, slots of one, two and three super-blocks, row
// and output tails).
TEST_F(CudaOps, Iq4xsGemmRowsEqualDecodeRows) {
  for (const GemmCase& c : {GemmCase{5120, 300, 300}, GemmCase{8448, 37, 300}, GemmCase{17408, 130, 300},
                            GemmCase{1024, 12000, 600}, GemmCase{8448, 3000, 2500}})
    expect_gemm_rows_equal_decode_rows(gpu(), GgmlType::IQ4_XS, c, 7300 + uint64_t(c.n_in));
}

// The Q8_0 prefill GEMM (imma_q80_gemm.cu) gives each row the bits the decode kernel
// (imma_q80.cu) gives it in a call of its own, on tiles (upload_matrix), in the same shapes as
// Q4kGemmRowsEqualDecodeRows: one, two and three super-blocks a slot, both default block shapes.
TEST_F(CudaOps, Q80GemmRowsEqualDecodeRows) {
  for (const GemmCase& c : {GemmCase{5120, 300, 300}, GemmCase{8448, 37, 300}, GemmCase{17408, 130, 300},
                            GemmCase{1024, 12000, 600}, GemmCase{8448, 3000, 2500}})
    expect_gemm_rows_equal_decode_rows(gpu(), GgmlType::Q8_0, c, 7300 + uint64_t(c.n_in), /*upload_matrix=*/true);
}

// The prompt GEMMs on dequantized tiles (deq_gemm.cu, deq_wgmma.cu: Q4_K; deq_wgmma_q6k.cu:
// Q6_K; deq_wgmma_iq4xs.cu, deq_wgmma_q5k.cu: IQ4_XS, Q5_K; fn), against exact double products of the dequantized weights: two weights of one input
// in one call (ffn gate/up style; output tails of 300 and 130 rows past the 128- and 256-output
// blocks), rows tails, a row scaled past f16's range and a zero row; the weights uploaded by
// upload_matrix, so as the tiles the kernels read. Bound per element: the f16 weight's error
// times |x|, plus the f16 activation (2^-11 |x|) and fp32 sums. Q4_K's weight (d sc and dmin m
// rounded once each, then one fused multiply-add): 3 roundings of at most 2^-11 of the
// sub-block's range 15 d sc + dmin m. Q6_K's, (q - 32) half(d sc) with one f16 multiply: two
// roundings, |w| (2^-10 + 2^-22) + 2^-19 (f16's subnormal half-spacing 2^-25 in each, times up
// to 33); IQ4_XS's and Q5_K's at their tests. Then batch invariance among fn's own calls: rows in calls of 33, 130 and 133 rows
// starting elsewhere give the same bits as in the full call. With vs_deq_gemm (Q4_K), also each
// output within the same bound of deq_gemm's (both multiply the same f16 bits; only the fp32
// summation order differs); with same_bits_as, every output the same bits as that function's.
using DeqGroupFn = void (*)(const Weight* const*, float* const*, int, const float*, int, void*, cudaStream_t);
void expect_deq_products(Backend& gpu, GgmlType type, DeqGroupFn fn, const std::string& name, bool vs_deq_gemm,
                         DeqGroupFn same_bits_as = nullptr) {
  const int64_t n_in = 2048;
  const int64_t n_outs[2] = {300, 130};
  const bool q6k = type == GgmlType::Q6_K, iq4 = type == GgmlType::IQ4_XS, q5k = type == GgmlType::Q5_K,
             q80 = type == GgmlType::Q8_0;
  std::vector<HostWeight> hws;
  std::vector<Weight> ws;
  for (int i = 0; i < 2; ++i) {
    hws.push_back(make_weight(type, n_in, n_outs[i], 8100 + uint64_t(i)));
    ws.push_back(gpu.upload_matrix(Weight{type, n_in, n_outs[i], hws.back().bytes.data(), hws.back().row_bytes}));
    ASSERT_TRUE(ws.back().tiles) << type_name(type) << ": upload_matrix stored GGUF rows";
    ASSERT_TRUE(q6k   ? cuda::deq_wgmma_q6k_supports(ws.back())
                : iq4 ? cuda::deq_wgmma_iq4xs_supports(ws.back())
                : q5k ? cuda::deq_wgmma_q5k_supports(ws.back())
                : q80 ? cuda::deq_wgmma_q80_supports(ws.back())
                      : cuda::deq_gemm_supports(ws.back()));
  }
  // Per weight element: the bound on its f16 form's error (above), from the block bytes.
  auto weight_tols = [&](const HostWeight& hw) {
    std::vector<double> r(hw.W.size());
    if (q6k) {
      for (size_t e = 0; e < r.size(); ++e) r[e] = (0x1p-10 + 0x1p-22) * std::fabs(double(hw.W[e])) + 0x1p-19;
      return r;
    }
    if (q80) {  // half(d) q, d f16 already, with one f16 multiply: one rounding
      for (size_t e = 0; e < r.size(); ++e) r[e] = 0x1p-11 * std::fabs(double(hw.W[e])) + 0x1p-25;
      return r;
    }
    if (iq4) {  // half(d (ls - 32)) v, |v| <= 127: the subnormal half-spacing 2^-25 times up to 128
      for (size_t e = 0; e < r.size(); ++e) r[e] = (0x1p-10 + 0x1p-22) * std::fabs(double(hw.W[e])) + 0x1p-18;
      return r;
    }
    const size_t sb_bytes = q5k ? 176 : 144;
    const double q_max = q5k ? 31.0 : 15.0;
    for (int64_t o = 0; o < hw.n_out; ++o)
      for (int64_t b = 0; b < n_in / 256; ++b) {
        const uint8_t* blk = hw.bytes.data() + size_t(o) * hw.row_bytes + size_t(b) * sb_bytes;
        uint16_t dh, mh;
        std::memcpy(&dh, blk, 2);
        std::memcpy(&mh, blk + 2, 2);
        for (int j = 0; j < 8; ++j) {
          uint8_t sc, mn;
          quant::k4_scale_min(blk + 4, j, sc, mn);
          const double range = q_max * double(f16_to_f32(dh)) * sc + double(f16_to_f32(mh)) * mn;
          for (int e = 0; e < 32; ++e) r[size_t(o * n_in + b * 256 + j * 32 + e)] = 3 * 0x1p-11 * range;
        }
      }
    return r;
  };
  const int rows = 300;  // a 256-row block and a tail
  std::vector<float> x = make_activations(rows, n_in, 8200);
  for (int64_t k = 0; k < n_in; ++k) x[size_t(5 * n_in + k)] *= 1e7f;  // |x| ~ 1e5..1e7: scaled into f16's range
  float* xd = static_cast<float*>(gpu.alloc(x.size() * sizeof(float)));
  gpu.upload(xd, x.data(), x.size() * sizeof(float));
  void* scratch = gpu.alloc(cuda::deq_gemm_scratch_bytes(n_in, rows));
  auto run = [&](DeqGroupFn f, int r0, int n, std::vector<std::vector<float>>& out) {
    std::vector<float*> yd(2);
    for (int i = 0; i < 2; ++i) {
      const std::vector<float> poison(size_t(n) * size_t(n_outs[i]), kPoison);
      yd[size_t(i)] = static_cast<float*>(gpu.alloc(poison.size() * sizeof(float)));
      gpu.upload(yd[size_t(i)], poison.data(), poison.size() * sizeof(float));
    }
    const Weight* wp[2] = {&ws[0], &ws[1]};
    gpu.synchronize();  // (the kernel runs on the default stream, the backend's copies on its own)
    f(wp, yd.data(), 2, xd + size_t(r0) * size_t(n_in), n, scratch, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    out.assign(2, {});
    for (int i = 0; i < 2; ++i) {
      out[size_t(i)].resize(size_t(n) * size_t(n_outs[i]));
      gpu.download(out[size_t(i)].data(), yd[size_t(i)], out[size_t(i)].size() * sizeof(float));
      gpu.release(yd[size_t(i)]);
    }
  };
  std::vector<std::vector<float>> all;
  run(fn, 0, rows, all);
  if (::testing::Test::HasFatalFailure()) return;  // (the launch failed: no outputs to check)
  std::vector<std::vector<double>> tols(2);
  for (int i = 0; i < 2; ++i) {
    const HostWeight& hw = hws[size_t(i)];
    const std::vector<double> wt = weight_tols(hw);
    Check c(name + " " + type_name(type) + " " + std::to_string(n_in) + "x" + std::to_string(n_outs[i]) + " vs exact");
    tols[size_t(i)].resize(size_t(rows) * size_t(hw.n_out));
    for (int r = 0; r < rows; ++r)
      for (int64_t o = 0; o < hw.n_out; ++o) {
        double ref = 0, mag = 0, wtol = 0;
        for (int64_t k = 0; k < n_in; ++k) {
          const double wk = hw.W[size_t(o * n_in + k)], xk = x[size_t(r) * n_in + k];
          ref += wk * xk;
          mag += std::fabs(wk * xk);
          wtol += wt[size_t(o * n_in + k)] * std::fabs(xk);
        }
        const double tol = wtol + mag * (0x1p-10 + double(n_in) * 0x1p-24) + 1e-30;
        tols[size_t(i)][size_t(r) * hw.n_out + o] = tol;
        c.add(all[size_t(i)][size_t(r) * hw.n_out + o], ref, tol, size_t(r) * hw.n_out + o);
      }
  }
  if (vs_deq_gemm) {
    std::vector<std::vector<float>> base;
    run(cuda::deq_gemm_group, 0, rows, base);
    if (::testing::Test::HasFatalFailure()) return;
    for (int i = 0; i < 2; ++i) {
      Check c(name + " q4_K " + std::to_string(n_in) + "x" + std::to_string(n_outs[i]) + " vs deq_gemm");
      for (size_t e = 0; e < base[size_t(i)].size(); ++e)
        c.add(all[size_t(i)][e], double(base[size_t(i)][e]), tols[size_t(i)][e], e);
    }
  }
  if (same_bits_as != nullptr) {
    std::vector<std::vector<float>> other;
    run(same_bits_as, 0, rows, other);
    if (::testing::Test::HasFatalFailure()) return;
    for (int i = 0; i < 2; ++i)
      EXPECT_EQ(std::memcmp(other[size_t(i)].data(), all[size_t(i)].data(), all[size_t(i)].size() * sizeof(float)), 0)
          << name << " weight " << i << ": not the same bits as the other block shape";
  }
  for (auto [r0, n] : {std::pair{0, 33}, std::pair{1, 130}, std::pair{167, 133}}) {
    std::vector<std::vector<float>> part;
    run(fn, r0, n, part);
    if (::testing::Test::HasFatalFailure()) return;
    for (int i = 0; i < 2; ++i)
      EXPECT_EQ(std::memcmp(part[size_t(i)].data(), all[size_t(i)].data() + size_t(r0) * size_t(n_outs[i]),
                            part[size_t(i)].size() * sizeof(float)),
                0)
          << name << " weight " << i << ": rows " << r0 << ".." << r0 + n - 1
          << " in a call of their own differ from the same rows in one call of " << rows;
  }
  gpu.release(scratch);
  gpu.release(xd);
}

TEST_F(CudaOps, DeqGemmQ4kAgainstExactAndBatchInvariant) {
  expect_deq_products(gpu(), GgmlType::Q4_K, cuda::deq_gemm_group, "deq_gemm", /*vs_deq_gemm=*/false);
}

// The same checks for the wgmma version (deq_wgmma.cu, sm_90a), plus its outputs against deq_gemm's;
// its one-warpgroup blocks give the same bits as the routed two-warpgroup ones.
TEST_F(CudaOps, DeqWgmmaQ4kAgainstExactAndBatchInvariant) {
  expect_deq_products(gpu(), GgmlType::Q4_K, cuda::deq_wgmma_group, "deq_wgmma", /*vs_deq_gemm=*/true);
  expect_deq_products(gpu(), GgmlType::Q4_K, cuda::deq_wgmma_narrow_group, "deq_wgmma narrow", /*vs_deq_gemm=*/true,
                      cuda::deq_wgmma_group);
}

// The Q6_K wgmma GEMM (deq_wgmma_q6k.cu, sm_90a): 8 super-blocks a row, so both parities of the
// tile layout's slot rotation.
TEST_F(CudaOps, DeqWgmmaQ6kAgainstExactAndBatchInvariant) {
  expect_deq_products(gpu(), GgmlType::Q6_K, cuda::deq_wgmma_q6k_group, "deq_wgmma_q6k", /*vs_deq_gemm=*/false);
}

// The IQ4_XS and Q5_K wgmma GEMMs (deq_wgmma_iq4xs.cu, deq_wgmma_q5k.cu, sm_90a) on their tile
// layouts (as upload_matrix stores them), the same checks. IQ4_XS's weight half(d (ls - 32)) v
// (two roundings, |v| <= 127): (2^-10 + 2^-22) |w| + 2^-18. Q5_K's, Q4_K's formula with 5-bit
// quants: 3 roundings of 2^-11 of the sub-block's range 31 d sc + dmin m.
TEST_F(CudaOps, DeqWgmmaIq4xsAgainstExactAndBatchInvariant) {
  if (!cuda::deq_wgmma_runs()) GTEST_SKIP() << "no Hopper GPU or no sm_90a machine code in this build";
  expect_deq_products(gpu(), GgmlType::IQ4_XS, cuda::deq_wgmma_iq4xs_group, "deq_wgmma_iq4xs", /*vs_deq_gemm=*/false);
}

TEST_F(CudaOps, DeqWgmmaQ5kAgainstExactAndBatchInvariant) {
  if (!cuda::deq_wgmma_runs()) GTEST_SKIP() << "no Hopper GPU or no sm_90a machine code in this build";
  expect_deq_products(gpu(), GgmlType::Q5_K, cuda::deq_wgmma_q5k_group, "deq_wgmma_q5k", /*vs_deq_gemm=*/false);
}

// The Q8_0 wgmma GEMM (deq_wgmma_q80.cu, sm_90a), the same checks: 8 super-blocks a row, each
// slice two Q8_0 blocks with a d of their own a row; the weight's bound 2^-11 |w| + 2^-25 (one
// f16 rounding of half(d) q, f16's subnormal half-spacing 2^-25).
TEST_F(CudaOps, DeqWgmmaQ80AgainstExactAndBatchInvariant) {
  if (!cuda::deq_wgmma_runs()) GTEST_SKIP() << "no Hopper GPU, or no sm_90a machine code in this build";
  expect_deq_products(gpu(), GgmlType::Q8_0, cuda::deq_wgmma_q80_group, "deq_wgmma_q80", /*vs_deq_gemm=*/false);
}

// Rows beyond f16's range (|x| >= 65504, as large models' SwiGLU outputs can be) on the f16
// tensor-core kernel: scaled by a power of two for the product, so they keep f16's relative
// precision instead of overflowing to inf; rows in range are untouched (bit for bit the same as
// when computed alone, which RowsAreBatchInvariant covers).
TEST_F(CudaOps, F16KernelKeepsLargeRowsFinite) {
  const int64_t n_in = 1024, n_out = 40;
  for (GgmlType t : {GgmlType::F16, GgmlType::Q5_K, GgmlType::Q8_0}) {  // (Q6_K takes the integer kernel)
    const HostWeight hw = make_weight(t, n_in, n_out, 6060 + uint64_t(t));
    Rng rng(61 + uint64_t(t));
    const std::vector<double> row_scale = {1.0, 3e4, 1e5, 1e9};
    const int rows = int(row_scale.size());
    std::vector<float> x(size_t(rows) * n_in);
    for (int r = 0; r < rows; ++r)
      for (int64_t k = 0; k < n_in; ++k) x[size_t(r) * n_in + k] = float(rng.normal(row_scale[size_t(r)]));
    const Weight w{t, n_in, n_out, gpu().weight_data(hw.bytes.data(), hw.bytes.size()), hw.row_bytes};
    float* xd = static_cast<float*>(gpu().alloc(x.size() * sizeof(float)));
    float* yd = static_cast<float*>(gpu().alloc(size_t(rows) * n_out * sizeof(float)));
    gpu().upload(xd, x.data(), x.size() * sizeof(float));
    gpu().matmul(w, xd, rows, yd);
    std::vector<float> y(size_t(rows) * n_out);
    gpu().download(y.data(), yd, y.size() * sizeof(float));
    Check c(std::string("matmul ") + type_name(t) + " rows of |x| up to 1e9 vs exact");
    for (int r = 0; r < rows; ++r)
      for (int64_t o = 0; o < n_out; ++o) {
        double ref = 0, mag = 0, abs_sum = 0;
        for (int64_t k = 0; k < n_in; ++k) {
          const double wk = hw.W[size_t(o * n_in + k)], xk = x[size_t(r) * n_in + k];
          ref += wk * xk;
          mag += std::fabs(wk * xk);
          abs_sum += std::fabs(wk) * row_scale[size_t(r)];
        }
        // The tensor-core bound of AgainstExactAndCpu, its absolute term in the row's scale.
        c.add(y[size_t(r) * n_out + o], ref, mag * (0x1p-10 + (double(n_in) / 16 + 16) * 0x1p-23) + 0x1p-25 * abs_sum + 1e-30,
              size_t(r) * n_out + o);
      }
    gpu().release(yd);
    gpu().release(xd);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, CudaMatmul, ::testing::ValuesIn(weight_types()),
                         [](const ::testing::TestParamInfo<GgmlType>& i) { return std::string(type_name(i.param)); });

// ---------------------------------------------------------------------------------------------
// Norms and element-wise ops

TEST_F(CudaOps, RmsNorm) {
  Rng rng(11);
  for (int dim : {1, 7, 64, 256, 1000, 4099}) {
    for (int n : {1, 5, 33}) {
      const std::vector<float> w = rng.normals(size_t(dim), 0.5);
      Twin<float> wd(be(), w);
      // out of place with gaps in both, then in place with the q/gate interleave stride.
      const size_t xs = size_t(dim) + 3, os = size_t(dim) + 5;
      Twin<float> x(be(), strided(rng, n, dim, xs, false)), out(be(), strided(rng, n, dim, os, true));
      both([&](Backend& b, int s) { b.rms_norm(x[s], xs, wd[s], n, dim, 1e-6f, out[s], os); });
      Check c("rms_norm dim=" + std::to_string(dim) + " n=" + std::to_string(n));
      c.all(out.get(1), out.get(0), 2 * red_tol(dim) + 16 * kU, 0);
      Twin<float> y(be(), strided(rng, n, dim, 2 * size_t(dim), false));
      both([&](Backend& b, int s) { b.rms_norm(y[s], 2 * size_t(dim), wd[s], n, dim, 1e-6f, y[s], 2 * size_t(dim)); });
      Check ci("rms_norm in place dim=" + std::to_string(dim) + " n=" + std::to_string(n));
      ci.all(y.get(1), y.get(0), 2 * red_tol(dim) + 16 * kU, 0);
    }
  }
}

TEST_F(CudaOps, AddSwigluMulSigmoid) {
  Rng rng(12);
  for (int64_t n : {int64_t(1), int64_t(777), int64_t(100003)}) {
    Twin<float> x(be(), rng.normals(size_t(n))), y(be(), rng.normals(size_t(n)));
    both([&](Backend& b, int s) { b.add(x[s], y[s], n); });
    Check("add n=" + std::to_string(n)).exact(x.get(1), x.get(0));

    Twin<float> g(be(), rng.normals(size_t(n), 3.0)), u(be(), rng.normals(size_t(n))),
        out(be(), std::vector<float>(size_t(n), kPoison));
    both([&](Backend& b, int s) { b.swiglu(g[s], u[s], 1, int(n), out[s]); });
    Check("swiglu n=" + std::to_string(n)).all(out.get(1), out.get(0), 4e-6, 0);
    both([&](Backend& b, int s) { b.swiglu(g[s], u[s], 1, int(n), g[s]); });  // in place, as the model does
    Check("swiglu in place n=" + std::to_string(n)).all(g.get(1), g.get(0), 4e-6, 0);
  }
  // Gated attention output: rows of n values, gate at offset D in rows of stride 2D.
  for (int n : {64, 129}) {
    const int rows = 7;
    const size_t xs = size_t(n) + 16, gs = 2 * size_t(n);
    Twin<float> x(be(), strided(rng, rows, n, xs, false)), g(be(), strided(rng, rows, int(gs), gs, false, 4.0));
    both([&](Backend& b, int s) { b.mul_sigmoid(x[s], xs, g[s] + n, gs, rows, 1, n); });
    Check("mul_sigmoid n=" + std::to_string(n)).all(x.get(1), x.get(0), 4e-6, 0);
  }
}

TEST_F(CudaOps, RopeNeox) {
  Rng rng(13);
  const std::vector<int32_t> pos = {0, 1, 17, 4095, 100000, 262143};
  const int rows = int(pos.size()), heads = 3, D = 64;
  for (int n_rot : {16, 64}) {
    for (float theta : {10000.0f, 10000000.0f}) {
      const size_t hs = D + 16, rs = hs * heads + 5;
      std::vector<float> init(size_t(rows) * rs, kSentinel);
      for (int r = 0; r < rows; ++r)
        for (int h = 0; h < heads; ++h)
          for (int j = 0; j < D; ++j) init[r * rs + h * hs + j] = float(rng.normal());
      Twin<float> x(be(), init);
      Twin<int32_t> p(be(), pos);
      both([&](Backend& b, int s) { b.rope_neox(x[s], rs, hs, rows, heads, p[s], n_rot, theta); });
      Check("rope_neox n_rot=" + std::to_string(n_rot) + " theta=" + std::to_string(int64_t(theta)))
          .all(x.get(1), x.get(0), 4e-6, 4e-6);
    }
  }
}

// The fused residual add + norm (one kernel on CUDA): against the CPU's add then rms_norm, and
// bit for bit against CUDA's own two launches (the model's numbers must not change with fusion).
TEST_F(CudaOps, AddRmsNorm) {
  Rng rng(12);
  for (int dim : {7, 64, 1000, 4099, 5120}) {
    for (int n : {1, 5}) {
      const size_t count = size_t(n) * size_t(dim), os = size_t(dim) + 5;
      const std::vector<float> w = rng.normals(size_t(dim), 0.5), x0 = rng.normals(count, 1.0),
                               y0 = rng.normals(count, 1.0);
      Twin<float> wd(be(), w), x(be(), x0), y(be(), y0), out(be(), strided(rng, n, dim, os, true));
      both([&](Backend& b, int s) { b.add_rms_norm(x[s], y[s], wd[s], n, dim, 1e-6f, out[s], os); });
      const std::string what = "dim=" + std::to_string(dim) + " n=" + std::to_string(n);
      Check("add_rms_norm sum " + what).all(x.get(1), x.get(0), 0, 0);
      Check("add_rms_norm " + what).all(out.get(1), out.get(0), 2 * red_tol(dim) + 16 * kU, 0);

      Twin<float> xs(be(), x0), outs(be(), strided(rng, n, dim, os, true));
      gpu().add(xs[1], y[1], int64_t(count));
      gpu().rms_norm(xs[1], size_t(dim), wd[1], n, dim, 1e-6f, outs[1], os);
      Check("add_rms_norm " + what + " vs add then rms_norm on CUDA").exact(out.get(1), outs.get(1));
      Check("add_rms_norm sum " + what + " vs add on CUDA").exact(x.get(1), xs.get(1));
    }
  }
}

TEST_F(CudaOps, L2NormHeadsGatesGatedRmsNorm) {
  Rng rng(14);
  for (int dim : {7, 64, 128}) {
    const int rows = 5, heads = 3;
    const size_t rs = size_t(heads) * dim + 11;
    std::vector<float> init = strided(rng, rows, heads * dim, rs, false);
    for (int j = 0; j < dim; ++j) init[rs + j] = 0.0f;  // a zero vector: the eps branch
    Twin<float> x(be(), init);
    both([&](Backend& b, int s) { b.l2_norm_heads(x[s], rs, rows, heads, dim, 1e-6f, 0.125f); });
    Check("l2_norm_heads dim=" + std::to_string(dim)).all(x.get(1), x.get(0), 2 * red_tol(dim) + 16 * kU, 0);
  }
  {
    const int rows = 7, n_v = 5;
    std::vector<float> b = rng.normals(size_t(rows * n_v), 3.0), a = rng.normals(size_t(rows * n_v), 8.0);
    a[0] = 30.0f;  // softplus's linear branch
    a[1] = -30.0f;
    std::vector<float> coef(n_v), bias(n_v);
    for (int h = 0; h < n_v; ++h) coef[h] = -float(std::exp(rng.normal())), bias[h] = float(rng.normal());
    Twin<float> bd(be(), b), ad(be(), a), cd(be(), coef), dd(be(), bias);
    both([&](Backend& bk, int s) { bk.gdn_gates(bd[s], ad[s], cd[s], dd[s], rows, n_v); });
    Check("gdn_gates beta").all(bd.get(1), bd.get(0), 4e-6, 0);
    Check("gdn_gates g").all(ad.get(1), ad.get(0), 4e-6, 0);
  }
  for (int dim : {33, 64, 128}) {
    const int rows = 5, heads = 4;
    const size_t n = size_t(rows) * heads * dim;
    Twin<float> x(be(), rng.normals(n)), z(be(), rng.normals(n, 2.0)), w(be(), rng.normals(size_t(dim), 0.5));
    both([&](Backend& b, int s) { b.gated_rms_norm(x[s], z[s], w[s], rows, heads, dim, 1e-6f); });
    Check("gated_rms_norm dim=" + std::to_string(dim)).all(x.get(1), x.get(0), 2 * red_tol(dim) + 32 * kU, 0);
  }
}

// ---------------------------------------------------------------------------------------------
// Paged KV cache and attention

struct AttnCase {
  int head_dim, n_head, n_head_kv;
  GgmlType kv_type;
  bool gated_q;  // q rows interleave [q_h | gate_h] like qwen35
};

TEST_F(CudaOps, KvStoreAndAttention) {
  const std::vector<AttnCase> cases = {{64, 8, 2, GgmlType::F16, true},   {128, 16, 8, GgmlType::F16, false},
                                       {256, 8, 2, GgmlType::F16, true},  {128, 4, 4, GgmlType::F32, false},
                                       {256, 8, 2, GgmlType::F32, true},  {80, 6, 3, GgmlType::F16, false},
                                       {64, 8, 2, GgmlType::Q8_0, true},  {128, 16, 8, GgmlType::Q8_0, false},
                                       {256, 8, 2, GgmlType::Q8_0, true}, {128, 4, 4, GgmlType::Q8_0, true}};
  Rng rng(15);
  for (const auto& c : cases) {
    const int bt = 16, pool_blocks = 48, D = c.head_dim;
    const size_t ts = size_t(c.n_head_kv) * D;
    const size_t pool_bytes = size_t(pool_blocks) * bt * row_size(c.kv_type, int64_t(ts));
    void* kp[2];
    void* vp[2];
    for (int s = 0; s < 2; ++s) kp[s] = be_[s]->alloc(pool_bytes), vp[s] = be_[s]->alloc(pool_bytes);
    // Two sequences with shuffled, interleaved blocks.
    std::vector<int32_t> ids(pool_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng.g);
    std::vector<int32_t> tab_a(ids.begin(), ids.begin() + 20), tab_b(ids.begin() + 20, ids.begin() + 30);
    const SeqKv seq_a{tab_a.data(), int(tab_a.size())}, seq_b{tab_b.data(), int(tab_b.size())};
    auto view = [&](int s) { return KvLayerView{kp[s], vp[s], bt, c.n_head_kv, D, c.kv_type}; };
    // Store a: positions 0..300 in two calls; b: 0..40 in between (table switches).
    auto store = [&](const SeqKv& seq, int p0, int n) {
      std::vector<int32_t> pos(n);
      std::iota(pos.begin(), pos.end(), p0);
      std::vector<float> kh = rng.normals(size_t(n) * ts), vh = rng.normals(size_t(n) * ts);
      if (c.kv_type == GgmlType::Q8_0 && p0 == 0) {
        // q8_0 rounding corner cases in the first row (tests/test_cpu_ops.cpp spells out their
        // bytes). K block 0: d = 1/32, exact halves of both signs (half away from zero), the
        // float just below a half. K block 1: d = 1/8, x / d = j - 16.5, a half for every j.
        // V block 0: all zero (d = 0). V block 1: d below the smallest f16 subnormal (its f16
        // is 0; the quants are not).
        const float ties[8] = {127.0f, 0.5f, -0.5f, 1.5f, -2.5f, 0.49999997f, 0.0f, -126.5f};
        for (int j = 0; j < 8; ++j) kh[size_t(j)] = ties[j] / 32;
        for (int j = 0; j < 32; ++j) kh[size_t(32 + j)] = j < 31 ? (float(j) - 16.5f) / 8 : 127.0f / 8;
        for (int j = 0; j < 32; ++j) vh[size_t(j)] = 0.0f, vh[size_t(32 + j)] = float(rng.normal(5e-7));
      }
      Twin<float> k(be(), kh), v(be(), vh);
      Twin<int32_t> p(be(), pos);
      both([&](Backend& b, int s) { b.kv_store(view(s), seq, k[s], v[s], p[s], n); });
    };
    store(seq_a, 0, 257);
    store(seq_b, 0, 41);
    store(seq_a, 257, 44);
    std::ostringstream tag;
    tag << "hd=" << D << " h=" << c.n_head << "/" << c.n_head_kv << " " << type_name(c.kv_type)
        << (c.gated_q ? " gated" : "");
    for (int s = 0; s < 2; ++s) be_[s]->synchronize();
    {
      std::vector<uint8_t> kc(pool_bytes), kg(pool_bytes), vc(pool_bytes), vg(pool_bytes);
      be_[0]->download(kc.data(), kp[0], pool_bytes);
      be_[1]->download(kg.data(), kp[1], pool_bytes);
      be_[0]->download(vc.data(), vp[0], pool_bytes);
      be_[1]->download(vg.data(), vp[1], pool_bytes);
      EXPECT_TRUE(kc == kg && vc == vg) << "kv_store: the caches differ, " << tag.str();
      std::cout << "[cuda-err] kv_store " << std::left << std::setw(49) << tag.str() << std::right
                << (kc == kg && vc == vg ? " bit-exact" : "  FAILED") << "\n";
    }
    // Queries: a prefill tail of 17 rows (positions 284..300), one decode row, and seq b.
    auto query = [&](const SeqKv& seq, int p0, int n, const char* what) {
      const size_t qhs = size_t(c.gated_q ? 2 : 1) * D, qrs = qhs * c.n_head;
      std::vector<int32_t> pos(n);
      std::iota(pos.begin(), pos.end(), p0);
      Twin<float> q(be(), rng.normals(size_t(n) * qrs)), out(be(), std::vector<float>(size_t(n) * c.n_head * D, kPoison));
      Twin<int32_t> p(be(), pos);
      both([&](Backend& b, int s) {
        b.attention(q[s], qrs, qhs, n, p[s], c.n_head, view(s), seq, 1.0f / std::sqrt(float(D)), out[s]);
      });
      Check("attention " + tag.str() + " " + what).all(out.get(1), out.get(0), 2e-5, 2e-5 * 4.5);  // |v| <~ 4.5
    };
    query(seq_a, 284, 17, "prefill");
    query(seq_b, 40, 1, "decode b");
    query(seq_a, 300, 1, "decode a");
    query(seq_a, 0, 3, "start");
    for (int s = 0; s < 2; ++s) be_[s]->release(kp[s]), be_[s]->release(vp[s]);
  }
}

// Decode and verify rows (at most kSplitMaxRows) take the split kernel (attention_decode.cu):
// chunks of 256 positions, merged in order. Long contexts against the CPU with positions at and
// around chunk edges; a row's bits alone vs among other rows and with a table padded by -1
// entries (as CUDA graphs pad it); a missing block in a late chunk gives NaN for the rows that
// need it and leaves the others' bits alone.
TEST_F(CudaOps, SplitAttentionLongContext) {
  Rng rng(18);
  for (GgmlType type : {GgmlType::F16, GgmlType::Q8_0}) {
    const int D = 128, H = 12, Hkv = 2, bt = 64, n_ctx = 1400, n_tab = (n_ctx + bt - 1) / bt;
    const size_t ts = size_t(Hkv) * D;
    const int pool_blocks = n_tab + 4;
    const size_t pool_bytes = size_t(pool_blocks) * bt * row_size(type, int64_t(ts));
    void* kp[2];
    void* vp[2];
    for (int s = 0; s < 2; ++s) kp[s] = be_[s]->alloc(pool_bytes), vp[s] = be_[s]->alloc(pool_bytes);
    std::vector<int32_t> tab(pool_blocks);
    std::iota(tab.begin(), tab.end(), 0);
    std::shuffle(tab.begin(), tab.end(), rng.g);
    tab.resize(size_t(n_tab));
    const SeqKv seq{tab.data(), n_tab};
    auto view = [&](int s) { return KvLayerView{kp[s], vp[s], bt, Hkv, D, type}; };
    {
      std::vector<int32_t> pos(n_ctx);
      std::iota(pos.begin(), pos.end(), 0);
      Twin<float> k(be(), rng.normals(size_t(n_ctx) * ts)), v(be(), rng.normals(size_t(n_ctx) * ts));
      Twin<int32_t> p(be(), pos);
      both([&](Backend& b, int s) { b.kv_store(view(s), seq, k[s], v[s], p[s], n_ctx); });
    }
    const std::string tag = std::string("split attention ") + type_name(type);
    const size_t qrs = size_t(H) * D, out_row = size_t(H) * D;
    const std::vector<int32_t> pos = {255, 256, 257, 511, 512, 1399, 0, 1000, 767, 1280, 3, 1100};
    const int n = int(pos.size());
    const std::vector<float> qh = rng.normals(size_t(n) * qrs);
    Twin<float> q(be(), qh), out(be(), std::vector<float>(size_t(n) * out_row, kPoison));
    Twin<int32_t> p(be(), pos);
    both([&](Backend& b, int s) { b.attention(q[s], qrs, size_t(D), n, p[s], H, view(s), seq, 0.088f, out[s]); });
    Check(tag + " vs cpu").all(out.get(1), out.get(0), 2e-5, 2e-5 * 4.5);
    const std::vector<float> all = out.get(1);
    // Row 5 (position 1399, six chunks) alone, and with the table padded to twice its length.
    std::vector<int32_t> padded = tab;
    padded.resize(2 * tab.size(), -1);
    float* q1 = static_cast<float*>(gpu().alloc(qrs * sizeof(float)));
    float* o1 = static_cast<float*>(gpu().alloc(out_row * sizeof(float)));
    int32_t* p1 = static_cast<int32_t*>(gpu().alloc(sizeof(int32_t)));
    gpu().upload(q1, qh.data() + 5 * qrs, qrs * sizeof(float));
    gpu().upload(p1, &pos[5], sizeof(int32_t));
    for (const SeqKv& t : {seq, SeqKv{padded.data(), int(padded.size())}}) {
      gpu().attention(q1, qrs, size_t(D), 1, p1, H, view(1), t, 0.088f, o1);
      std::vector<float> one(out_row);
      gpu().download(one.data(), o1, out_row * sizeof(float));
      EXPECT_EQ(std::memcmp(one.data(), all.data() + 5 * out_row, out_row * sizeof(float)), 0)
          << tag << ": row at position 1399 differs alone (table of " << t.n_blocks << " entries) and among " << n;
    }
    // A missing block at positions 1024..1087: rows at 1100, 1280, 1399 become NaN, the rest keep their bits.
    std::vector<int32_t> holed = tab;
    holed[1024 / bt] = -1;
    Twin<float> out2(be(), std::vector<float>(size_t(n) * out_row, kPoison));
    gpu().attention(q[1], qrs, size_t(D), n, p[1], H, view(1), SeqKv{holed.data(), n_tab}, 0.088f, out2[1]);
    const std::vector<float> got = out2.get(1);
    for (int r = 0; r < n; ++r) {
      const bool needs = pos[size_t(r)] >= 1024;
      for (size_t j = 0; j < out_row; ++j) {
        const float g = got[size_t(r) * out_row + j], w = all[size_t(r) * out_row + j];
        if (needs ? !std::isnan(g) : float_bits(g) != float_bits(w)) {
          ADD_FAILURE() << tag << ": missing block, row " << r << " (position " << pos[size_t(r)] << ") element " << j
                        << " got " << g << (needs ? ", want NaN" : ", want the bits without the hole");
          break;
        }
      }
    }
    gpu().release(p1), gpu().release(o1), gpu().release(q1);
    for (int s = 0; s < 2; ++s) be_[s]->release(kp[s]), be_[s]->release(vp[s]);
  }
}

// The split kernel's GQA group blocks (attention_group.cuh: one block per KV head, row and
// chunk for all the query heads of the group, more than 8 heads in several blocks) against the
// CPU: group ratios 1, 6, 8 and 12, head dims 64 and 256 (and 512 / 1024, whose K/V tiles are
// 16 and 4 positions), contexts of 33 and 4000 positions, f16 mostly, f32 and q8_0 once each, q
// rows gated (stride 2 D) or not. Rows at chunk edges, at 0, and several at one position (as the
// bidirectional drafter block has them). The last row alone, with the table padded by -1
// entries, gives the same bits as among the others.
TEST_F(CudaOps, SplitAttentionGqaGroups) {
  struct Case {
    int head_dim, ratio, n_ctx;
    GgmlType type;
    bool gated;
  };
  const std::vector<Case> cases = {
      {64, 1, 33, GgmlType::F16, false},     {64, 6, 33, GgmlType::F16, true},     {64, 8, 4000, GgmlType::F16, false},
      {256, 1, 4000, GgmlType::F16, true},   {256, 6, 4000, GgmlType::F16, true},  {256, 6, 33, GgmlType::F16, false},
      {256, 8, 4000, GgmlType::F16, false},  {256, 12, 4000, GgmlType::F16, true}, {64, 6, 4000, GgmlType::F16, false},
      {256, 6, 4000, GgmlType::Q8_0, true},  {64, 8, 4000, GgmlType::F32, false},  {512, 8, 700, GgmlType::F16, false},
      {1024, 2, 300, GgmlType::F32, true}};
  Rng rng(19);
  for (const Case& c : cases) {
    const int D = c.head_dim, Hkv = 2, H = c.ratio * Hkv, bt = 16, n_tab = (c.n_ctx + bt - 1) / bt;
    const size_t ts = size_t(Hkv) * D;
    const int pool_blocks = n_tab + 3;
    const size_t pool_bytes = size_t(pool_blocks) * bt * row_size(c.type, int64_t(ts));
    void* kp[2];
    void* vp[2];
    for (int s = 0; s < 2; ++s) kp[s] = be_[s]->alloc(pool_bytes), vp[s] = be_[s]->alloc(pool_bytes);
    std::vector<int32_t> tab(pool_blocks);
    std::iota(tab.begin(), tab.end(), 0);
    std::shuffle(tab.begin(), tab.end(), rng.g);
    tab.resize(size_t(n_tab));
    const SeqKv seq{tab.data(), n_tab};
    auto view = [&](int s) { return KvLayerView{kp[s], vp[s], bt, Hkv, D, c.type}; };
    double v_max = 0;
    {
      std::vector<int32_t> pos(size_t(c.n_ctx));
      std::iota(pos.begin(), pos.end(), 0);
      const std::vector<float> vh = rng.normals(size_t(c.n_ctx) * ts);
      for (float x : vh) v_max = std::max(v_max, double(std::fabs(x)));
      Twin<float> k(be(), rng.normals(size_t(c.n_ctx) * ts)), v(be(), vh);
      Twin<int32_t> p(be(), pos);
      both([&](Backend& b, int s) { b.kv_store(view(s), seq, k[s], v[s], p[s], c.n_ctx); });
    }
    std::vector<int32_t> pos;
    for (int p : {0, 1, 31, 32, 255, 256, 257, 1023, 2047, 3000, 3583, 3998, 3999, 3999, 3999})
      if (p < c.n_ctx) pos.push_back(p);
    pos.push_back(c.n_ctx - 1);
    const int n = int(pos.size());
    std::ostringstream tag;
    tag << "split gqa hd=" << D << " h=" << H << "/" << Hkv << " ctx=" << c.n_ctx << " " << type_name(c.type)
        << (c.gated ? " gated" : "");
    const size_t qhs = size_t(c.gated ? 2 : 1) * D, qrs = qhs * H, out_row = size_t(H) * D;
    const float scale = 1.0f / std::sqrt(float(D));
    const std::vector<float> qh = rng.normals(size_t(n) * qrs);
    Twin<float> q(be(), qh), out(be(), std::vector<float>(size_t(n) * out_row, kPoison));
    Twin<int32_t> p(be(), pos);
    both([&](Backend& b, int s) { b.attention(q[s], qrs, qhs, n, p[s], H, view(s), seq, scale, out[s]); });
    const std::vector<float> all = out.get(1);
    Check(tag.str() + " vs cpu").all(all, out.get(0), 2e-5, 2e-5 * v_max);
    // The last row alone, with the table padded to twice its length.
    std::vector<int32_t> padded = tab;
    padded.resize(2 * tab.size(), -1);
    float* q1 = static_cast<float*>(gpu().alloc(qrs * sizeof(float)));
    float* o1 = static_cast<float*>(gpu().alloc(out_row * sizeof(float)));
    int32_t* p1 = static_cast<int32_t*>(gpu().alloc(sizeof(int32_t)));
    gpu().upload(q1, qh.data() + size_t(n - 1) * qrs, qrs * sizeof(float));
    gpu().upload(p1, &pos[size_t(n - 1)], sizeof(int32_t));
    gpu().attention(q1, qrs, qhs, 1, p1, H, view(1), SeqKv{padded.data(), int(padded.size())}, scale, o1);
    std::vector<float> one(out_row);
    gpu().download(one.data(), o1, out_row * sizeof(float));
    EXPECT_EQ(std::memcmp(one.data(), all.data() + size_t(n - 1) * out_row, out_row * sizeof(float)), 0)
        << tag.str() << ": the last row differs alone (padded table) and among " << n;
    gpu().release(p1), gpu().release(o1), gpu().release(q1);
    for (int s = 0; s < 2; ++s) be_[s]->release(kp[s]), be_[s]->release(vp[s]);
  }
}

// ---------------------------------------------------------------------------------------------
// Gated DeltaNet

TEST_F(CudaOps, Conv1dSilu) {
  Rng rng(16);
  for (int kernel : {4, 2, 1}) {
    for (int channels : {7, 300}) {
      const std::vector<float> w = rng.normals(size_t(channels) * kernel, 0.5);
      Twin<float> wd(be(), w), state(be(), rng.normals(size_t(kernel - 1) * channels));
      for (int rows : {1, 2, 3, 40}) {  // chained calls: the state carries over
        const size_t xs = size_t(channels) + 5, os = size_t(channels) + 3;
        Twin<float> x(be(), strided(rng, rows, channels, xs, false)), out(be(), strided(rng, rows, channels, os, true));
        both([&](Backend& b, int s) { b.conv1d_silu(x[s], xs, rows, channels, wd[s], kernel, state[s], out[s], os); });
        const std::string tag = "K=" + std::to_string(kernel) + " C=" + std::to_string(channels) + " rows=" + std::to_string(rows);
        Check("conv1d_silu out " + tag).all(out.get(1), out.get(0), 1e-5, 1e-6);
        Check("conv1d_silu state " + tag).exact(state.get(1), state.get(0));
      }
    }
  }
}

struct GdnCase {
  GdnShape sh;
  int rows;
};

TEST_F(CudaOps, GdnDeltaRule) {
  const std::vector<GdnCase> cases = {{{2, 4, 64, 64}, 1},    {{2, 4, 64, 64}, 3},    {{2, 4, 64, 64}, 70},
                                      {{1, 3, 128, 128}, 1},  {{1, 3, 128, 128}, 40}, {{2, 2, 32, 80}, 5},
                                      {{4, 8, 128, 128}, 33}};
  Rng rng(17);
  for (const auto& c : cases) {
    for (bool chunked : {false, true}) {
      const GdnShape& sh = c.sh;
      const size_t cd = size_t(sh.conv_dim()), qs = cd + 7;  // qkv rows with a gap
      std::vector<float> qkv = strided(rng, c.rows, int(cd), qs, false);
      for (int r = 0; r < c.rows; ++r)  // L2-normalised q (scaled) and k, as the model feeds them
        for (int part = 0; part < 2; ++part)
          for (int h = 0; h < sh.n_k; ++h) {
            float* v = qkv.data() + size_t(r) * qs + size_t(part * sh.n_k + h) * sh.d_k;
            double nn = 0;
            for (int i = 0; i < sh.d_k; ++i) nn += double(v[i]) * v[i];
            const double f = (part == 0 ? 1.0 / std::sqrt(double(sh.d_k)) : 1.0) / std::sqrt(nn);
            for (int i = 0; i < sh.d_k; ++i) v[i] = float(v[i] * f);
          }
      std::vector<float> g(size_t(c.rows) * sh.n_v), beta(g.size());
      for (auto& x : g) x = float(-rng.uniform(0.0, 1.5));
      for (auto& x : beta) x = float(rng.uniform(0.05, 0.95));
      const std::vector<float> S0 = rng.normals(sh.state_floats(), 0.3);
      const std::vector<float> out_init(size_t(c.rows) * sh.n_v * sh.d_v, kPoison);
      Twin<float> qd(be(), qkv), gd(be(), g), bd(be(), beta), S(be(), S0), out(be(), out_init);
      both([&](Backend& b, int s) { b.gdn_delta_rule(sh, qd[s], qs, gd[s], bd[s], c.rows, S[s], out[s], chunked); });
      std::ostringstream tag;
      tag << "k" << sh.n_k << " v" << sh.n_v << " dk" << sh.d_k << " dv" << sh.d_v << " rows=" << c.rows
          << (chunked ? " chunked" : " recurrent");
      const auto oc = out.get(0), sc = S.get(0);
      double om = 0, sm = 0;
      for (float v : oc) om = std::max(om, double(std::fabs(v)));
      for (float v : sc) sm = std::max(sm, double(std::fabs(v)));
      Check("gdn_delta_rule out " + tag.str()).all(out.get(1), oc, 1e-4, 1e-4 * om);
      Check("gdn_delta_rule state " + tag.str()).all(S.get(1), sc, 1e-4, 1e-4 * sm);
      if (!chunked) {
        // keep_state (speculative verification): on each backend the state stays bit for bit as
        // it was and the outputs are those of the call above bit for bit.
        Twin<float> S_kept(be(), S0), out_kept(be(), out_init);
        both([&](Backend& b, int s) {
          b.gdn_delta_rule(sh, qd[s], qs, gd[s], bd[s], c.rows, S_kept[s], out_kept[s], false, /*keep_state=*/true);
        });
        for (int s = 0; s < 2; ++s) {
          Check("gdn_delta_rule keep_state: state unchanged " + tag.str()).exact(S_kept.get(s), S0);
          Check("gdn_delta_rule keep_state: outputs " + tag.str()).exact(out_kept.get(s), out.get(s));
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Whole models

// Which CUDA kernel takes this weight (device copies are 256-byte aligned, so the alignment
// tests pass): an integer tensor-core one (imma_supports: the CPU's Q8_K activations, and Q8_0
// for the Q8_0 matrices that upload_matrix tiles, as the default backend does) or the f16
// tensor-core one (mma_supports: f16 weights and activations). Q5_K, IQ4_XS and Q8_0 take the
// integer ones only as tiles, which CudaBackend::upload_matrix makes (as_matrix: the weight came
// through it; a tied LM head is the embedding table, bound with weight_data, so its rows go to the
// f16 kernel).
bool cuda_uses_q8k(const Weight& w, bool as_matrix) {
  if (w.type == GgmlType::Q8_0) return as_matrix && cuda::imma_q80_takes(w.n_in);
  return mv::int8_tensor_core_supports(w.type, w.n_in, w.row_bytes, nullptr) &&
         ((w.type != GgmlType::IQ4_XS && w.type != GgmlType::Q5_K) || as_matrix);
}
bool cuda_rounds_to_f16(const Weight& w, bool as_matrix) {
  return !cuda_uses_q8k(w, as_matrix) && mv::tensor_core_supports(w.type, w.n_in, w.row_bytes, nullptr);
}

float round_f16(float v) { return f16_to_f32(f32_to_f16(v)); }

// The CPU backend with every weight matrix dequantized to f32 before the product: the CPU then
// computes in fp32 throughout (no 8-bit activations), the same math as the CUDA kernels. Where
// the CUDA backend multiplies on f16 tensor cores, the weights and activations are rounded to f16
// first, as the kernel does (round to nearest even); where it uses the CPU's Q8_K activations,
// the plain CPU product is the same math. Either way the two differ by summation order only.
// Prompt products (long prompt segments) of Q4_K, Q5_K, Q6_K, IQ4_XS and Q8_0 matrices, which
// the CUDA backend takes as an f16 GEMM on a Hopper GPU (deq_wgmma*.cu: the weight formed in
// f16, the activations scaled into f16), are here the fp32 product of the dequantized weights
// with f16-rounded activations: the two then differ by the f16 weight's roundings (2^-11
// relative, of the sub-block's range for Q4_K and Q5_K) and summation order.
bool takes_prompt_gemm(GgmlType t) {
  return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K || t == GgmlType::IQ4_XS ||
         t == GgmlType::Q8_0;
}

class DequantizedCpu final : public Backend {
 public:
  DequantizedCpu() : cpu_(make_cpu_backend(0)), prompt_f16_(cuda::deq_wgmma_runs()) {}
  const char* name() const override { return "cpu-f32"; }
  void* alloc(size_t b) override { return cpu_->alloc(b); }
  void release(void* p) override { cpu_->release(p); }
  void upload(void* d, const void* s, size_t b) override { cpu_->upload(d, s, b); }
  void download(void* d, const void* s, size_t b) override { cpu_->download(d, s, b); }
  void copy(void* d, const void* s, size_t b) override { cpu_->copy(d, s, b); }
  void copy_2d_indexed(void* d, size_t dp, const void* s, size_t sp, size_t rb, int rows, const int32_t* index,
                       size_t index_bytes) override {
    cpu_->copy_2d_indexed(d, dp, s, sp, rb, rows, index, index_bytes);
  }
  void copy_2d(void* d, size_t dp, const void* s, size_t sp, size_t rb, int rows) override {
    cpu_->copy_2d(d, dp, s, sp, rb, rows);
  }
  void synchronize() override { cpu_->synchronize(); }
  const void* weight_data(const void* h, size_t b) override { return cpu_->weight_data(h, b); }
  Weight upload_matrix(const Weight& host) override {
    const Weight w = cpu_->upload_matrix(host);
    matrices_.insert(w.data);
    return w;
  }
  void matmul(const Weight& w, const float* x, int rows, float* y) override {
    const bool as_matrix = matrices_.count(w.data) != 0;
    if (cuda_uses_q8k(w, as_matrix)) return cpu_->matmul(w, x, rows, y);
    const bool f16 = cuda_rounds_to_f16(w, as_matrix);
    f32_product(w, dequantized(w, f16), x, rows, y, f16);
  }
  // As CudaBackend::prompt_matmul_shared_input routes them: an f16 GEMM for the tile types with
  // the first such weight's n_in, unless the group's weights of that type have few outputs
  // together (cuda::kFewOutputBlocks: they take the integer kernels).
  void prompt_matmul_shared_input(const Weight* const* ws, float* const* ys, int n, const float* x, int rows) override {
    std::vector<bool> f16(size_t(n), false);
    int64_t n_in = -1;
    for (int i = 0; i < n; ++i) {
      const Weight& w = *ws[i];
      f16[size_t(i)] = prompt_f16_ && takes_prompt_gemm(w.type) && w.n_in % 256 == 0 && matrices_.count(w.data) != 0 &&
                       (n_in < 0 || w.n_in == n_in);
      if (f16[size_t(i)]) n_in = w.n_in;
    }
    for (int i = 0; i < n; ++i) {
      int64_t outputs = 0;
      for (int j = 0; j < n; ++j)
        if (f16[size_t(j)] && ws[j]->type == ws[i]->type) outputs += ws[j]->n_out;
      const bool f16_gemm = f16[size_t(i)] && outputs > int64_t(cuda::kFewOutputBlocks) * 16;
      if (f16_gemm) f32_product(*ws[i], dequantized(*ws[i], false), x, rows, ys[i], /*f16_x=*/true);
      else matmul(*ws[i], x, rows, ys[i]);
    }
  }
  void embed(const Weight& t, const int32_t* tok, int rows, float* out) override { cpu_->embed(t, tok, rows, out); }
  void rms_norm(const float* x, size_t xs, const float* w, int n, int dim, float eps, float* out, size_t os) override {
    cpu_->rms_norm(x, xs, w, n, dim, eps, out, os);
  }
  void add(float* x, const float* y, int64_t n) override { cpu_->add(x, y, n); }
  void swiglu(const float* g, const float* u, int rows, int n, float* out) override {
    cpu_->swiglu(g, u, rows, n, out);
  }
  void mul_sigmoid(float* x, size_t xs, const float* g, size_t gs, int rows, int nh, int n) override {
    cpu_->mul_sigmoid(x, xs, g, gs, rows, nh, n);
  }
  void rope_neox(float* x, size_t rs, size_t hs, int rows, int nh, const int32_t* pos, int nr, float th) override {
    cpu_->rope_neox(x, rs, hs, rows, nh, pos, nr, th);
  }
  void kv_store(const KvLayerView& kv, const SeqKv& seq, const float* k, const float* v, const int32_t* pos,
                int rows) override {
    cpu_->kv_store(kv, seq, k, v, pos, rows);
  }
  // Prefill calls that the CUDA backend's flash kernel takes (flash_attention.cu) round q to f16
  // there: so here too (its other rounding, of the softmax weights, is not mirrored: ~1e-4 of
  // the output, see FlashAttentionPrefill). The alignment test on these host pointers passes.
  void attention(const float* q, size_t qrs, size_t qhs, int rows, const int32_t* pos, int nh, const KvLayerView& kv,
                 const SeqKv& seq, float scale, float* out) override {
    if (rows <= cuda::kFlashMinRows || !cuda::flash_attention_supports(kv))
      return cpu_->attention(q, qrs, qhs, rows, pos, nh, kv, seq, scale, out);
    std::vector<float> qh(q, q + size_t(rows - 1) * qrs + size_t(nh - 1) * qhs + size_t(kv.head_dim));
    for (float& v : qh) v = round_f16(v);
    cpu_->attention(qh.data(), qrs, qhs, rows, pos, nh, kv, seq, scale, out);
  }
  void conv1d_silu(const float* x, size_t xs, int rows, int ch, const float* w, int k, float* st, float* out,
                   size_t os) override {
    cpu_->conv1d_silu(x, xs, rows, ch, w, k, st, out, os);
  }
  void l2_norm_heads(float* x, size_t rs, int rows, int nh, int dim, float eps, float sc) override {
    cpu_->l2_norm_heads(x, rs, rows, nh, dim, eps, sc);
  }
  void gdn_gates(float* b, float* a, const float* c, const float* d, int rows, int nv) override {
    cpu_->gdn_gates(b, a, c, d, rows, nv);
  }
  void gdn_delta_rule(const GdnShape& sh, const float* qkv, size_t qs, const float* g, const float* beta, int rows,
                      float* S, float* out, bool chunked, bool keep_state, const int32_t* rows_limit) override {
    cpu_->gdn_delta_rule(sh, qkv, qs, g, beta, rows, S, out, chunked, keep_state, rows_limit);
  }
  void gated_rms_norm(float* x, const float* z, const float* w, int rows, int nh, int dim, float eps) override {
    cpu_->gated_rms_norm(x, z, w, rows, nh, dim, eps);
  }
  void argmax_rows(const float* x, int rows, int n, size_t stride, int32_t* out) override {
    cpu_->argmax_rows(x, rows, n, stride, out);
  }
  void argmax_rows_to(const float* x, int rows, int n, size_t stride, int32_t* out) override {
    cpu_->argmax_rows_to(x, rows, n, stride, out);
  }
  void top_k_rows(const float* x, int rows, int n, size_t stride, int k, int32_t* ids, float* vals) override {
    cpu_->top_k_rows(x, rows, n, stride, k, ids, vals);
  }

 private:
  // w's rows dequantized to f32 (to_f16: then rounded to f16), made once per weight and rounding.
  const std::vector<float>& dequantized(const Weight& w, bool to_f16) {
    auto& f = (to_f16 ? f16_ : f32_)[w.data];
    if (f.empty()) {
      f.resize(size_t(w.n_in * w.n_out));
      for (int64_t o = 0; o < w.n_out; ++o)
        dequantize_row(w.type, static_cast<const uint8_t*>(w.data) + o * w.row_bytes, f.data() + o * w.n_in, w.n_in);
      if (to_f16)
        for (float& v : f) v = round_f16(v);
    }
    return f;
  }
  void f32_product(const Weight& w, const std::vector<float>& f, const float* x, int rows, float* y, bool f16_x) {
    const Weight wf{GgmlType::F32, w.n_in, w.n_out, f.data(), size_t(w.n_in) * 4};
    if (!f16_x) return cpu_->matmul(wf, x, rows, y);
    std::vector<float> xh(x, x + size_t(rows) * size_t(w.n_in));
    for (float& v : xh) v = round_f16(v);
    cpu_->matmul(wf, xh.data(), rows, y);
  }
  std::unique_ptr<Backend> cpu_;
  bool prompt_f16_;
  std::map<const void*, std::vector<float>> f32_, f16_;  // dequantized weights, as is and rounded to f16
  std::set<const void*> matrices_;  // data of the weights bound through upload_matrix
};

using test::GreedyRun;
using test::run_greedy;

int32_t argmax(const float* v, size_t n) { return int32_t(std::max_element(v, v + n) - v); }

// max |a - b| / (1 + |b|) and the relative L2 error ||a - b|| / ||b||.
std::pair<double, double> logit_errors(const std::vector<float>& a, const std::vector<float>& b) {
  double mx = 0, d2 = 0, r2 = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = double(a[i]) - b[i];
    mx = std::max(mx, std::fabs(d) / (1 + std::fabs(double(b[i]))));
    d2 += d * d;
    r2 += double(b[i]) * b[i];
  }
  return {std::isfinite(d2) ? mx : INFINITY, std::sqrt(d2 / std::max(r2, 1e-300))};
}

// Top-1 minus top-2 logit.
double top2_gap(const std::vector<float>& v) {
  std::vector<float> s(v);
  std::partial_sort(s.begin(), s.begin() + 2, s.end(), std::greater<float>());
  return double(s[0]) - s[1];
}

struct ModelCase {
  const char* arch;
  const char* type;
};

class CudaModel : public ::testing::TestWithParam<ModelCase> {};

TEST_P(CudaModel, LogitsAndGreedyMatchCpu) {
  if (!have_gpu()) GTEST_SKIP() << kNoGpu;
  const ModelCase mc = GetParam();
  test::TempDir dir;
  MakeModelOptions mo;
  mo.arch = mc.arch;
  mo.shape = "tiny";
  mo.type = mc.type;
  mo.seed = 1;
  mo.output = dir.file("m.gguf");
  mo.log = [](const std::string&) {};
  make_model(mo);
  auto file = gguf::File::open(mo.output);

  auto gpu = make_cuda_backend(0);
  DequantizedCpu ref_be;
  auto cpu = make_cpu_backend(0);
  ModelOptions f16_kv, f32_kv, q8_kv;  // f16: the default cache; f32: both sides compute in fp32 only
  f32_kv.kv_type = GgmlType::F32;
  q8_kv.kv_type = GgmlType::Q8_0;
  TargetModel tg(*file, *gpu, f16_kv), tr(*file, ref_be, f16_kv), tc(*file, *cpu, f16_kv);
  TargetModel tg32(*file, *gpu, f32_kv), tr32(*file, ref_be, f32_kv);
  TargetModel tg8(*file, *gpu, q8_kv), tr8(*file, ref_be, q8_kv);
  const int V = tg.hparams().n_vocab;
  std::vector<int32_t> prompt(40);  // >= 32 rows: the CPU takes its chunked DeltaNet path
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 37 + 11) % size_t(V));
  constexpr int kGen = 64;
  const GreedyRun g = run_greedy(tg, prompt, kGen), r = run_greedy(tr, prompt, kGen), c = run_greedy(tc, prompt, kGen);
  const GreedyRun g32 = run_greedy(tg32, prompt, 0), r32 = run_greedy(tr32, prompt, 0);
  const GreedyRun g8 = run_greedy(tg8, prompt, 0), r8 = run_greedy(tr8, prompt, 0);
  const std::string tag = std::string(mc.arch) + " " + mc.type;

  // Prompt logits. With an f32 cache both sides differ by fp32 summation order only: 2e-3, the
  // CPU's own chunked-vs-recurrent model bound. With the f16 cache a K or V element that lands
  // on the other side of an f16 rounding boundary moves by 2^-11 relative, which the softmax
  // and later layers carry: 5e-3. Against the plain CPU (8-bit activations): rel L2 < 0.1.
  const auto [mx_32, l2_32] = logit_errors(g32.prompt_logits, r32.prompt_logits);
  const auto [mx_r, l2_r] = logit_errors(g.prompt_logits, r.prompt_logits);
  const auto [mx_c, l2_c] = logit_errors(g.prompt_logits, c.prompt_logits);
  const auto [mx_8, l2_8] = logit_errors(g8.prompt_logits, r8.prompt_logits);
  int agree = 0;
  const int rows = int(prompt.size());
  for (int i = 0; i < rows; ++i)
    agree += argmax(&g.prompt_logits[size_t(i) * V], size_t(V)) == argmax(&c.prompt_logits[size_t(i) * V], size_t(V));
  //
  // Models with quantized weights multiply on tensor cores, with f16 inputs. The reference rounds
  // the same inputs to f16, but an upstream difference of one fp32 ulp still moves an input
  // across an f16 rounding boundary now and then (a 2^-11 jump), and these random tiny models
  // amplify input noise about tenfold (the plain CPU's 8-bit activations, ~2^-8, give a relative
  // L2 error of 4e-2-8e-2). Measured on an H200: max 1.8e-2, relative L2 1e-3. Bounds: 5e-2 and
  // 5e-3, with the greedy check below unchanged.
  const bool tensor_cores = std::string(mc.type) != "f32" && std::string(mc.type) != "bf16";
  // Q4_K, Q5_K, Q6_K and IQ4_XS matrices (q4_k, q5_k, iq4_xs, and most of mix-q4_k_m) take 8-bit
  // Q8_K activations on both sides (imma_matmul.cu, imma_q6k.cu, imma_iq4xs.cu; the reference uses
  // the plain CPU product for them),
  // and Q8_0 ones (q8_0, tiled by default) Q8_0 activations (imma_q80.cu), the same way.
  // Same inputs give the same integers, but an input one ulp apart can round to the next 8-bit
  // step, a jump of 1/127 of its 256-block's largest value (f16: 2^-11 of the element), which
  // these models amplify as above. Measured on an H200 with Q4_K alone on the integer path:
  // max 0.34, relative L2 1.7e-2 (the plain CPU's own 8-bit activations vs f32: 4e-2-8e-2).
  // Bounds: 0.6 and 5e-2; greedy as below.
  const bool q8k = std::string(mc.type) == "q4_k" || std::string(mc.type) == "q5_k" ||
                   std::string(mc.type) == "iq4_xs" || std::string(mc.type) == "mix-q4_k_m" ||
                   std::string(mc.type) == "q8_0";
  const double mx_bound = q8k ? 0.6 : tensor_cores ? 5e-2 : 2e-3;
  EXPECT_LT(mx_32, mx_bound) << tag << ": prompt logits vs the f32 CPU, f32 KV cache";
  EXPECT_LT(mx_r, q8k ? 0.6 : tensor_cores ? 5e-2 : 5e-3) << tag << ": prompt logits vs the f32 CPU, f16 KV cache";
  if (tensor_cores) {
    EXPECT_LT(l2_32, q8k ? 5e-2 : 5e-3) << tag << ": prompt logits vs the f32 CPU (relative L2), f32 KV cache";
  }
  // q8_0 cache: equal inputs give equal bytes on both sides (kv_store is bit-exact), but a K or
  // V element that comes out a little apart can land in the next q8_0 step, a jump of amax/127
  // of its block (f16: 2^-11 of the element); with tensor cores' f16 inputs such flips are
  // common. At worst the two sides' q8_0 roundings are unrelated: the CPU's own q8_0-vs-f32
  // cache bound (tests/test_model.cpp KvQ8Model, 0.2; measured there up to 9.9e-2 on tiny
  // qwen3) on top of this model's f16-cache bound.
  EXPECT_LT(mx_8, 0.2 + (q8k ? 0.6 : tensor_cores ? 5e-2 : 5e-3)) << tag << ": prompt logits vs the f32 CPU, q8_0 KV cache";
  EXPECT_LT(l2_c, 0.1) << tag << ": prompt logits vs the plain CPU";

  // Greedy continuations: identical to the f32 CPU unless they part at a near-tie.
  auto first_diff = [](const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    return int(i);
  };
  const int dr = first_diff(g.gen, r.gen), dc = first_diff(g.gen, c.gen);
  double step_mx = 0;
  for (int i = 0; i < std::min(dr + 1, kGen); ++i) step_mx = std::max(step_mx, logit_errors(g.step_logits[i], r.step_logits[i]).first);
  std::string note;
  if (dr < kGen) {
    const double gap = top2_gap(r.step_logits[size_t(dr)]);
    const double scale = 1 + std::fabs(double(*std::max_element(r.step_logits[size_t(dr)].begin(), r.step_logits[size_t(dr)].end())));
    std::ostringstream os;
    os << " (parts at step " << dr << ", f32-CPU top-2 gap " << gap << ")";
    note = os.str();
    // With 8-bit activations on the integer path (q8k) the GPU's logits carry the plain CPU's
    // kind of noise (max_rel up to 0.6 above): where the two CPU references themselves part,
    // following the plain CPU (same activation quantization) is as right as following the f32 one.
    const bool plain_cpu_agrees = q8k && dc > dr;
    if (plain_cpu_agrees) os << ", the plain CPU chose the same";
    note = os.str();
    EXPECT_TRUE(gap < 1e-2 * scale || plain_cpu_agrees)
        << tag << ": greedy output diverges from the f32 CPU at step " << dr
        << " where the choice was not a near-tie (gap " << gap << ") and the plain CPU chose otherwise";
  }
  std::cout << "[cuda-model] " << std::left << std::setw(17) << tag << std::right << std::scientific << std::setprecision(2)
            << " vs f32-cpu: kv32 max_rel=" << mx_32 << " kv16 max_rel=" << mx_r << " rel_l2=" << l2_r
            << " kvq8 max_rel=" << mx_8 << " rel_l2=" << l2_8 << " steps_max_rel=" << step_mx
            << " greedy_same=" << dr << "/" << kGen << note << " | vs cpu: rel_l2=" << l2_c << " argmax "
            << agree << "/" << rows << " greedy_same=" << dc << "/" << kGen << std::defaultfloat << "\n";
}

INSTANTIATE_TEST_SUITE_P(Models, CudaModel,
                         ::testing::Values(ModelCase{"qwen35", "f32"}, ModelCase{"qwen35", "q8_0"},
                                           ModelCase{"qwen35", "q4_k"}, ModelCase{"qwen35", "q5_k"},
                                           ModelCase{"qwen35", "iq4_xs"},
                                           ModelCase{"qwen35", "mix-q4_k_m"}, ModelCase{"qwen3", "q8_0"},
                                           ModelCase{"qwen3", "bf16"}),
                         [](const ::testing::TestParamInfo<ModelCase>& i) {
                           std::string s = std::string(i.param.arch) + "_" + i.param.type;
                           for (auto& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

// A tiny random-weight model of arch and type, written into dir and opened.
std::unique_ptr<gguf::File> tiny_model(test::TempDir& dir, const char* arch, const char* type, uint64_t seed) {
  MakeModelOptions mo;
  mo.arch = arch;
  mo.type = type;
  mo.seed = seed;
  mo.output = dir.file("m.gguf");
  mo.log = [](const std::string&) {};
  make_model(mo);
  return gguf::File::open(mo.output);
}

// Every row's logits of tokens as the prompt of a fresh one-sequence state of ctx positions.
std::vector<float> logits_alone(TargetModel& tm, const std::vector<int32_t>& tokens, int ctx) {
  auto st = tm.make_state(1, ctx);
  const int s = st->create();
  Batch b;
  ForwardOutput out;
  for (size_t i = 0; i < tokens.size(); ++i) b.add(s, int(i), tokens[i], true);
  tm.forward(b, *st, out);
  return out.logits;
}

// Two sequences in one batch on CUDA match separate runs (block tables switch per segment).
TEST(CudaModelBatch, TwoSequencesInOneBatchMatchSeparateRuns) {
  if (!have_gpu()) GTEST_SKIP() << kNoGpu;
  test::TempDir dir;
  auto file = tiny_model(dir, "qwen35", "q8_0", 8);
  auto gpu = make_cuda_backend(0);
  TargetModel tm(*file, *gpu, ModelOptions{});
  const std::vector<int32_t> x = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22},
                             y = {100, 90, 80};
  const auto ax = logits_alone(tm, x, 64), ay = logits_alone(tm, y, 64);
  auto st = tm.make_state(2, 64);
  const int sx = st->create(), sy = st->create();
  Batch b;
  ForwardOutput out;
  for (size_t i = 0; i < x.size(); ++i) b.add(sx, int(i), x[i], true);
  for (size_t i = 0; i < y.size(); ++i) b.add(sy, int(i), y[i], true);
  tm.forward(b, *st, out);
  std::vector<float> both_x(out.logits.begin(), out.logits.begin() + ptrdiff_t(ax.size()));
  std::vector<float> both_y(out.logits.begin() + ptrdiff_t(ax.size()), out.logits.end());
  // Every per-row computation is independent of the other rows: the results are bit-identical.
  Check("model two sequences in one batch (x)").exact(both_x, ax);
  Check("model two sequences in one batch (y)").exact(both_y, ay);
}


// Prompt rows of long prompt segments (>= 128 rows, not speculative) go through the backend's
// prompt products (on a Hopper GPU: f16 GEMMs for tile weights, other bits than decode rows), run
// by run: a batch of a 140-token prompt, a 3-token one (ordinary products) and a 130-token one
// gives each sequence exactly the logits it gets alone, and the f16 path was taken where it runs.
// Against the CPU: CudaModel.LongPromptLogitsMatchCpu.
TEST(CudaModelBatch, PromptProductsRunBySegment) {
  if (!have_gpu()) GTEST_SKIP() << kNoGpu;
  test::TempDir dir;
  auto file = tiny_model(dir, "qwen35", "q4_k", 9);
  CudaGraphBackend gpu(0);
  TargetModel tm(*file, gpu, ModelOptions{});
  std::vector<std::vector<int32_t>> prompts = {std::vector<int32_t>(140), {100, 90, 80}, std::vector<int32_t>(130)};
  for (size_t p : {size_t(0), size_t(2)})
    for (size_t i = 0; i < prompts[p].size(); ++i) prompts[p][i] = int32_t((i * 31 + 7 * p + 3) % 200);
  const int64_t f16_before = gpu.prompt_f16_products();
  std::vector<std::vector<float>> each;
  for (const auto& t : prompts) each.push_back(logits_alone(tm, t, 256));
  if (cuda::deq_wgmma_runs()) {
    EXPECT_GT(gpu.prompt_f16_products(), f16_before) << "the 140- and 130-token prompts took the f16 products";
  }
  auto st = tm.make_state(3, 256);
  Batch b;
  for (const auto& t : prompts) {
    const int s = st->create();
    for (size_t i = 0; i < t.size(); ++i) b.add(s, int(i), t[i], true);
  }
  ForwardOutput out;
  tm.forward(b, *st, out);
  size_t at = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const std::vector<float> got(out.logits.begin() + ptrdiff_t(at), out.logits.begin() + ptrdiff_t(at + each[p].size()));
    Check("model prompt products by segment, sequence " + std::to_string(p)).exact(got, each[p]);
    at += each[p].size();
  }
}

// A 160-token prompt on CUDA (prompt products: on a Hopper GPU f16 GEMMs for the tile matrices)
// against DequantizedCpu, which mirrors that choice (fp32 products of the dequantized weights
// with f16 activations there, the 8-bit CPU products elsewhere): the prompt logits agree within
// the model bounds of LogitsAndGreedyMatchCpu for these types (the LM head and the other types'
// products keep 8-bit activations on both sides), and nearly every row's argmax agrees.
TEST(CudaModel, LongPromptLogitsMatchCpu) {
  if (!have_gpu()) GTEST_SKIP() << kNoGpu;
  for (const char* type : {"q4_k", "mix-q4_k_m", "mix-iq4_xs", "q8_0"}) {
    test::TempDir dir;
    auto file = tiny_model(dir, "qwen35", type, 3);
    CudaGraphBackend gpu(0);
    DequantizedCpu ref_be;
    TargetModel tg(*file, gpu, ModelOptions{}), tr(*file, ref_be, ModelOptions{});
    const int V = tg.hparams().n_vocab;
    std::vector<int32_t> prompt(160);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 53 + 5) % size_t(V));
    const int64_t f16_before = gpu.prompt_f16_products();
    const GreedyRun g = run_greedy(tg, prompt, 1), r = run_greedy(tr, prompt, 1);
    if (cuda::deq_wgmma_runs()) {
      EXPECT_GT(gpu.prompt_f16_products(), f16_before) << type;
    }
    const auto [mx, l2] = logit_errors(g.prompt_logits, r.prompt_logits);
    int agree = 0;
    for (size_t i = 0; i < prompt.size(); ++i)
      agree += argmax(&g.prompt_logits[i * size_t(V)], size_t(V)) == argmax(&r.prompt_logits[i * size_t(V)], size_t(V));
    std::cout << "[cuda-model] long prompt " << type << " vs f32-cpu (mirrored prompt products): max_rel=" << mx
              << " rel_l2=" << l2 << " argmax " << agree << "/" << prompt.size() << "\n";
    EXPECT_LT(mx, 0.6) << type;
    EXPECT_LT(l2, 5e-2) << type;
    EXPECT_GE(agree, int(prompt.size()) * 9 / 10) << type;
  }
}
// DFlash speculation on CUDA: greedy output token-identical to plain CUDA decoding with a random
// drafter (mostly rejections: rollback every step) and with drafts scripted from the plain
// continuation (long acceptances), block 8; the kept inputs and commit replays run on the
// device. Exactness needs verify rows to compute exactly what decode rows compute (the
// batch-invariance asserted above).
class ScriptedDrafts final : public DraftSource {
 public:
  ScriptedDrafts(int64_t n_vocab, int prompt_len, std::vector<int32_t> cont)
      : V_(size_t(n_vocab)), prompt_len_(prompt_len), cont_(std::move(cont)) {}
  int block_size() const override { return 8; }
  void on_target_rows(int kept) override { n_past_ += kept; }
  void propose(int32_t, int n, std::vector<float>& logits) override {
    logits.assign(size_t(n) * V_, 0.0f);
    for (int i = 0; i < n; ++i) {
      const int g = n_past_ + 1 + i - prompt_len_;
      int32_t t = g < int(cont_.size()) ? cont_[size_t(g)] : 3;
      if (++count_ % 5 == 0) t = int32_t((t + 1) % int(V_));  // a planted mistake every 5th draft
      logits[size_t(i) * V_ + size_t(t)] = 10.0f;
    }
  }
  void reset() override { n_past_ = 0; }

 private:
  size_t V_;
  int prompt_len_;
  std::vector<int32_t> cont_;
  int n_past_ = 0, count_ = 0;
};

// Greedy speculative decoding on spec_tm, with the random drafter and with drafts scripted to
// be right, gives exactly plain_tm's greedy tokens on `prompts` prompts of 3, 3 + step, ...
// tokens.
void expect_speculation_matches_plain(TargetModel& plain_tm, TargetModel& spec_tm, DraftModel& draft,
                                      const Tokenizer& tok, int prompts, int step, int max_new) {
  DFlashSource random_drafts(draft, spec_tm, 256);
  Generator plain(plain_tm, &tok, 256);
  GenerateOptions o;
  o.max_new_tokens = max_new;
  o.sampling.temperature = 0;
  auto collect = [&](auto& gen, const std::vector<int32_t>& prompt) {
    std::vector<int32_t> out;
    gen.generate(prompt, o, [&](int32_t t) {
      out.push_back(t);
      return true;
    });
    return out;
  };
  for (int i = 0; i < prompts; ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    std::vector<int32_t> prompt;
    for (int j = 0; j < 3 + step * i; ++j) prompt.push_back(int32_t((i * 131 + j * 17) % 240 + 5));
    plain.reset();
    const auto ref = collect(plain, prompt);
    SpecDecoder with_random(spec_tm, random_drafts, &tok, 256, SpecOptions{false, 64, 0});
    EXPECT_EQ(collect(with_random, prompt), ref) << "random drafter";
    ScriptedDrafts scripted(spec_tm.hparams().n_vocab, int(prompt.size()), ref);
    SpecDecoder with_scripted(spec_tm, scripted, &tok, 256, SpecOptions{false, 64, 0});
    EXPECT_EQ(collect(with_scripted, prompt), ref) << "scripted drafter";
  }
}

TEST(CudaSpec, GreedySpeculationEqualsPlainDecoding) {
  if (!have_gpu()) GTEST_SKIP() << kNoGpu;
  test::TempDir dir;
  MakeModelOptions mo;
  mo.arch = "qwen35";
  mo.type = "q8_0";
  mo.seed = 31;
  mo.output = dir.file("t.gguf");
  mo.log = [](const std::string&) {};
  make_model(mo);
  MakeDraftOptions dopt;
  dopt.target = mo.output;
  dopt.output = dir.file("d.gguf");
  dopt.seed = 32;
  make_draft_model(dopt);
  auto tfile = gguf::File::open(mo.output);
  auto dfile = gguf::File::open(dopt.output);
  auto gpu = make_cuda_backend(0);
  TargetModel tm(*tfile, *gpu, ModelOptions{});
  Tokenizer tok(Vocab::from_gguf(*tfile));
  DraftModel draft(*dfile, tm, 8);
  expect_speculation_matches_plain(tm, tm, draft, tok, 8, 5, 48);
}



// --- CUDA graphs (backend/cuda/cuda_graphs.h) ---
// The reference is the same model on a backend that launches every kernel directly: a step
// replayed from a captured graph must give bit-identical logits and the same greedy ids.

const CudaGraphStats& graph_stats(Backend& be) { return dynamic_cast<CudaGraphBackend&>(be).graph_stats(); }

std::string make_graph_test_model(test::TempDir& dir, const char* arch, const char* type, uint64_t seed) {
  MakeModelOptions mo;
  mo.arch = arch;
  mo.type = type;
  mo.seed = seed;
  mo.output = dir.file(std::string(arch) + "_" + type + ".gguf");
  mo.log = [](const std::string&) {};
  make_model(mo);
  return mo.output;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Greedy decoding through the device argmax (greedy_only): the ids of n steps after the prompt.
std::vector<int32_t> greedy_ids(TargetModel& tm, const std::vector<int32_t>& prompt, int n) {
  auto st = tm.make_state(1, int(prompt.size()) + n + 1);
  const int seq = st->create();
  Batch b;
  ForwardOutput out;
  out.greedy_only = int(tm.hparams().n_vocab);
  for (size_t i = 0; i < prompt.size(); ++i) b.add(seq, int(i), prompt[i], i + 1 == prompt.size());
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) {
    tm.forward(b, *st, out);
    ids.push_back(out.greedy.at(0));
    b.clear();
    b.add(seq, int(prompt.size()) + i, ids.back(), true);
  }
  return ids;
}

// A model whose Q4_K and Q6_K matrices are stored as tiles (make_cuda_backend's tiles) computes
// the very logits of the GGUF-row one, step by step, direct and replayed as CUDA graphs (whose
// tapes must carry the layout: a replay that read tiles as rows gave garbage on the H200), and
// the same greedy ids through the device argmax. (Tiny shapes: the Q6_K matrices of 512 inputs,
// ffn_down, are tiled; those of 256, an odd block count, stay on the f16 kernel either way.)
TEST(CudaGraphs, Q4kTilesGiveTheSameLogits) {
  if (!have_gpu()) GTEST_SKIP() << kNoGpu;
  test::TempDir dir;
  for (const auto& [arch, type] : {std::pair{"qwen3", "q4_k"}, std::pair{"qwen35", "q4_k"}, std::pair{"qwen35", "mix-q4_k_m"},
                                   std::pair{"qwen35", "q6_k"}}) {
    SCOPED_TRACE(std::string(arch) + " " + type);
    auto file = gguf::File::open(make_graph_test_model(dir, arch, type, 43));
    auto rows = make_cuda_backend(0, false, /*tiles=*/false);
    auto tiles_direct = make_cuda_backend(0, false, true), tiles_graphs = make_cuda_backend(0, true, true);
    TargetModel tr(*file, *rows, ModelOptions{}), td(*file, *tiles_direct, ModelOptions{}),
        tg(*file, *tiles_graphs, ModelOptions{});
    const std::vector<int32_t> prompt = {7, 3, 19, 200, 42};
    constexpr int kSteps = 24;
    const GreedyRun r = run_greedy(tr, prompt, kSteps);
    for (TargetModel* t : {&td, &tg}) {
      const GreedyRun g = run_greedy(*t, prompt, kSteps);
      const char* how = t == &td ? "tiles, direct" : "tiles, graphs";
      EXPECT_EQ(g.gen, r.gen) << how;
      EXPECT_TRUE(same_bits(g.prompt_logits, r.prompt_logits)) << how << ": prompt logits";
      ASSERT_EQ(g.step_logits.size(), r.step_logits.size());
      for (size_t i = 0; i < g.step_logits.size(); ++i)
        EXPECT_TRUE(same_bits(g.step_logits[i], r.step_logits[i])) << how << ": logits of step " << i;
      EXPECT_EQ(greedy_ids(*t, prompt, kSteps), r.gen) << how << ": device argmax";
    }
  }
}

// 40 decode steps from a 5-token prompt cross two KV blocks (16 tokens each), so the block
// table grows twice (staged padded to 1, 2, then 4 blocks): the graph must follow, replaying
// with new table contents within a bucket and re-capturing across, never replaying stale ones.
// mix-iq4_xs: IQ4_XS tiles (the tapes carry the layout) among Q6_K, Q5_K and Q8_0 products.
TEST(CudaGraphs, DecodeIsBitIdenticalToDirectLaunches) {
  if (!have_gpu()) GTEST_SKIP() << kNoGpu;
  test::TempDir dir;
  for (const auto& [arch, type] : {std::pair{"qwen35", "q8_0"}, std::pair{"qwen35", "f32"}, std::pair{"qwen3", "q4_k"},
                                   std::pair{"qwen35", "mix-iq4_xs"}}) {
    SCOPED_TRACE(std::string(arch) + " " + type);
    auto file = gguf::File::open(make_graph_test_model(dir, arch, type, 41));
    auto direct = make_cuda_backend(0, false);
    auto graphs = make_cuda_backend(0, true);
    TargetModel td(*file, *direct, ModelOptions{}), tg(*file, *graphs, ModelOptions{});
    const std::vector<int32_t> prompt = {7, 3, 19, 200, 42};
    constexpr int kSteps = 40;
    const GreedyRun d = run_greedy(td, prompt, kSteps);
    const CudaGraphStats before = graph_stats(*graphs);
    const GreedyRun g = run_greedy(tg, prompt, kSteps);
    const CudaGraphStats after = graph_stats(*graphs);
    EXPECT_EQ(g.gen, d.gen);
    EXPECT_TRUE(same_bits(g.prompt_logits, d.prompt_logits)) << "prompt logits";
    ASSERT_EQ(g.step_logits.size(), d.step_logits.size());
    for (size_t i = 0; i < g.step_logits.size(); ++i)
      EXPECT_TRUE(same_bits(g.step_logits[i], d.step_logits[i])) << "logits of step " << i;
    // Three block-table buckets (1, 2, 4 blocks): each step shape is captured at first sight
    // (run op by op instead when a scratch buffer had to grow), then replayed.
    EXPECT_GE(after.replayed - before.replayed, kSteps - 8);
    EXPECT_LE(after.direct - before.direct, 5);
    // The device-argmax path (greedy_only) replays too and picks the same ids.
    const auto ids_g = greedy_ids(tg, prompt, kSteps), ids_d = greedy_ids(td, prompt, kSteps);
    EXPECT_EQ(ids_g, ids_d);
    EXPECT_EQ(ids_g, d.gen);
    std::cout << "[cuda-graphs] " << arch << " " << type << ": direct " << after.direct << ", captured "
              << after.captured << ", replayed " << after.replayed << "\n";
  }
}

// Two sequences decoding together (the server's continuous batching): one graph replays
// steps whose block tables change under it, also after a slot is released and reused by a
// new sequence with the same shape but other KV blocks and recurrent state.
TEST(CudaGraphs, BatchedStepsAreBitIdenticalToDirectLaunches) {
  if (!have_gpu()) GTEST_SKIP() << kNoGpu;
  test::TempDir dir;
  auto file = gguf::File::open(make_graph_test_model(dir, "qwen35", "q8_0", 43));
  auto run = [&](Backend& be) {
    TargetModel tm(*file, be, ModelOptions{});
    const int V = tm.hparams().n_vocab;
    auto st = tm.make_state(3, 96);
    std::vector<std::vector<float>> all;
    auto next_of = [&](const std::vector<float>& logits, size_t row) {
      return int32_t(std::max_element(logits.begin() + ptrdiff_t(row * V), logits.begin() + ptrdiff_t((row + 1) * V)) -
                     (logits.begin() + ptrdiff_t(row * V)));
    };
    // Prompts of 18 and 3 tokens in one batch, then both decode one row a step.
    int sx = st->create(), sy = st->create();
    std::vector<int32_t> px = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22}, py = {100, 90, 80};
    Batch b;
    ForwardOutput out;
    for (size_t i = 0; i < px.size(); ++i) b.add(sx, int(i), px[i], i + 1 == px.size());
    for (size_t i = 0; i < py.size(); ++i) b.add(sy, int(i), py[i], i + 1 == py.size());
    tm.forward(b, *st, out);
    all.push_back(out.logits);
    int nx = int(px.size()), ny = int(py.size());
    int32_t tx = next_of(out.logits, 0), ty = next_of(out.logits, 1);
    for (int step = 0; step < 36; ++step) {
      if (step == 20) {  // y finishes; a new sequence takes its place with a 2-token prompt
        st->release(sy);
        sy = st->create();
        b.clear();
        b.add(sy, 0, 33, false);
        b.add(sy, 1, 44, true);
        tm.forward(b, *st, out);
        all.push_back(out.logits);
        ny = 2;
        ty = next_of(out.logits, 0);
      }
      b.clear();
      b.add(sx, nx++, tx, true);
      b.add(sy, ny++, ty, true);
      tm.forward(b, *st, out);
      all.push_back(out.logits);
      tx = next_of(out.logits, 0);
      ty = next_of(out.logits, 1);
    }
    return all;
  };
  auto direct = make_cuda_backend(0, false);
  auto graphs = make_cuda_backend(0, true);
  const auto d = run(*direct), g = run(*graphs);
  ASSERT_EQ(g.size(), d.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_TRUE(same_bits(g[i], d[i])) << "forward " << i;
  EXPECT_GE(graph_stats(*graphs).replayed, 20);
}

// Speculative decoding with graphs (draft blocks, drafter ingest, verify rows with per-row
// checkpoints, commit): token-identical to plain decoding with direct launches.
TEST(CudaGraphs, SpeculationEqualsPlainDecoding) {
  if (!have_gpu()) GTEST_SKIP() << kNoGpu;
  test::TempDir dir;
  const std::string target = make_graph_test_model(dir, "qwen35", "q8_0", 51);
  MakeDraftOptions dopt;
  dopt.target = target;
  dopt.output = dir.file("d.gguf");
  dopt.seed = 52;
  make_draft_model(dopt);
  auto tfile = gguf::File::open(target);
  auto dfile = gguf::File::open(dopt.output);
  auto direct = make_cuda_backend(0, false);
  auto graphs = make_cuda_backend(0, true);
  TargetModel td(*tfile, *direct, ModelOptions{}), tg(*tfile, *graphs, ModelOptions{});
  Tokenizer tok(Vocab::from_gguf(*tfile));
  DraftModel draft(*dfile, tg, 8);
  expect_speculation_matches_plain(td, tg, draft, tok, 4, 7, 40);
  const CudaGraphStats& gs = graph_stats(*graphs);
  EXPECT_GT(gs.replayed, 40);
  std::cout << "[cuda-graphs] speculation: direct " << gs.direct << ", captured " << gs.captured << ", replayed "
            << gs.replayed << "\n";
}

// argmax_rows_to (ids left in device memory) against a host scan, on the CPU and CUDA: rows as
// wide as a vocabulary and short ones, into the middle of a poisoned buffer (the entries around
// the rows are kept). Then inside a step, as a greedy draft feeds a verify: the argmax and a
// device copy of its ids into a token buffer, recorded into one CUDA graph that replays with new
// logits and picks their ids, not the captured ones.
TEST_F(CudaOps, ArgmaxRowsTo) {
  Rng rng(6);
  struct Shape {
    int rows, n;
    size_t stride;
  };
  for (const Shape sh : {Shape{15, 248320, 248320}, Shape{16, 248000, 248320}, Shape{1, 1000, 1000}, Shape{9, 7, 8}}) {
    std::vector<float> x = rng.normals(size_t(sh.rows) * sh.stride, 3.0);
    for (int r = 0; r < sh.rows; ++r) {
      float* v = x.data() + size_t(r) * sh.stride;
      for (size_t i = size_t(sh.n); i < sh.stride; ++i) v[i] = 1e30f;  // padding ids never win
      if (r % 3 == 1) v[size_t(rng.integer(0, sh.n - 1))] = 1e29f;
    }
    std::vector<int32_t> want(size_t(sh.rows));
    for (int r = 0; r < sh.rows; ++r) {
      const float* v = x.data() + size_t(r) * sh.stride;
      want[size_t(r)] = int32_t(std::max_element(v, v + sh.n) - v);
    }
    Twin<float> xd(be(), x);
    Twin<int32_t> out(be(), std::vector<int32_t>(size_t(sh.rows) + 8, -3));
    both([&](Backend& b, int s) { b.argmax_rows_to(xd[s], sh.rows, sh.n, sh.stride, out[s] + 4); });
    for (int s = 0; s < 2; ++s) {
      const std::vector<int32_t> got = out.get(s);
      const char* side = s == 0 ? "CPU" : "CUDA";
      EXPECT_EQ(std::vector<int32_t>(got.begin() + 4, got.end() - 4), want)
          << side << " argmax_rows_to, " << sh.rows << " rows of " << sh.n;
      for (int i : {0, 3, sh.rows + 4, sh.rows + 7}) EXPECT_EQ(got[size_t(i)], -3) << side << ": entry " << i << " written";
    }
  }
  // In a step (CUDA graph), twice: captured, then replayed on new logits.
  const int rows = 7, n = 50000;
  Twin<float> xd(be(), std::vector<float>(size_t(rows) * n, 0.0f));
  Twin<int32_t> ids(be(), std::vector<int32_t>(rows, -1)), tokens(be(), std::vector<int32_t>(rows + 2, -2));
  const int64_t replayed0 = graph_stats(gpu()).replayed;
  for (int run = 0; run < 3; ++run) {
    std::vector<float> x = rng.normals(size_t(rows) * n, 3.0);
    std::vector<int32_t> want(rows);
    for (int r = 0; r < rows; ++r) want[size_t(r)] = int32_t(std::max_element(x.begin() + r * n, x.begin() + (r + 1) * n) -
                                                            (x.begin() + r * n));
    both([&](Backend& b, int s) {
      b.upload(xd[s], x.data(), x.size() * sizeof(float));
      StepScope step(b);
      b.argmax_rows_to(xd[s], rows, n, size_t(n), ids[s]);
      b.copy(tokens[s] + 1, ids[s], rows * sizeof(int32_t));
    });
    for (int s = 0; s < 2; ++s) {
      std::vector<int32_t> want_tokens = want;
      want_tokens.insert(want_tokens.begin(), -2);
      want_tokens.push_back(-2);
      EXPECT_EQ(ids.get(s), want) << (s ? "CUDA" : "CPU") << " step, run " << run;
      EXPECT_EQ(tokens.get(s), want_tokens) << (s ? "CUDA" : "CPU") << " step's copy, run " << run;
    }
  }
  EXPECT_GE(graph_stats(gpu()).replayed - replayed0, 1) << "the step was not replayed";
}

// Greedy decoding with every token left on the device: a step's argmax id (greedy_to) is the
// next step's token (a one-row speculative segment, add_speculative_from, committed whole), two
// sequences in turn, the ids in a ring of 4 slots per sequence (so each step shape is a few tapes
// that replay). The host queues 3 steps of each sequence (12 graphs) without waiting for any,
// each step's positions and commit rows staged in its tape's own pinned buffer while the steps
// before it may still run, then downloads the ids once: the ids of host-driven greedy decoding
// with direct launches.
TEST(CudaGraphs, TokensChainedOnTheDeviceEqualHostGreedy) {
  if (!have_gpu()) GTEST_SKIP() << kNoGpu;
  test::TempDir dir;
  auto file = gguf::File::open(make_graph_test_model(dir, "qwen35", "q8_0", 57));
  const std::vector<std::vector<int32_t>> prompts = {{7, 3, 19, 200, 42}, {11, 12, 13}};
  constexpr int kSteps = 42, kGroup = 3, kRing = 4;
  auto direct = make_cuda_backend(0, false);
  TargetModel td(*file, *direct, ModelOptions{});
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(greedy_ids(td, p, kSteps + 1));
  auto graphs = make_cuda_backend(0, true);
  TargetModel tg(*file, *graphs, ModelOptions{});
  const int V = tg.hparams().n_vocab;
  auto st = tg.make_state(2, 64, 1);
  const int seqs[2] = {st->create(), st->create()};
  int32_t* dev = static_cast<int32_t*>(graphs->alloc(2 * kRing * sizeof(int32_t)));
  auto slot = [&](int k, int i) { return dev + k * kRing + i % kRing; };  // token i of sequence k
  std::vector<std::vector<int32_t>> got(2);
  std::vector<int32_t> ring(2 * kRing);
  auto fetch = [&](int first, int count) {
    graphs->download(ring.data(), dev, ring.size() * sizeof(int32_t));
    for (int k = 0; k < 2; ++k)
      for (int i = first; i < first + count; ++i) got[size_t(k)].push_back(ring[size_t(k * kRing + i % kRing)]);
  };
  ForwardOutput out;
  out.greedy_only = V;
  for (int k = 0; k < 2; ++k) {
    Batch b;
    for (size_t i = 0; i < prompts[size_t(k)].size(); ++i)
      b.add(seqs[k], int(i), prompts[size_t(k)][i], i + 1 == prompts[size_t(k)].size());
    out.greedy_to = slot(k, 0);
    tg.forward(b, *st, out);
  }
  fetch(0, 1);
  const int64_t replayed0 = graph_stats(*graphs).replayed;
  for (int i0 = 0; i0 < kSteps; i0 += kGroup) {
    for (int i = i0; i < i0 + kGroup; ++i)
      for (int k = 0; k < 2; ++k) {
        Batch b;
        b.add_speculative_from(seqs[k], int(prompts[size_t(k)].size()) + i, slot(k, i), 1);
        out.greedy_to = slot(k, i + 1);
        tg.forward(b, *st, out);
        tg.commit(*st, seqs[k], 1);
      }
    fetch(i0 + 1, kGroup);
  }
  for (int k = 0; k < 2; ++k) EXPECT_EQ(got[size_t(k)], want[size_t(k)]) << "sequence " << k;
  EXPECT_GE(graph_stats(*graphs).replayed - replayed0, 2 * kSteps);
  graphs->release(dev);
}

// The Q6_K prefill GEMM (imma_q6k_gemm.cu, calls of more than 32 rows) gives each row the bits
// imma_q6k.cu's kernel gives it in a call of its own (the same cases as Q4_K's, plus one of
// 34 super-blocks, two a slot, at 2500 rows). n_in 1024 and 5120: one super-block per slot;
// 17408: three (slots that start on odd super-blocks); 8448 (33 super-blocks, odd) is not on
// the integer kernels (rows would start at 2 mod 4) and checks the fallback's rows instead.
// Block shapes (imma_q6k_gemm, on 132 SMs): n_out 12000 and 4500 (two a slot, a tail of 20 rows
// in the last block) take the 128 x 64 blocks, the rest the 64 x 64 ones.
TEST_F(CudaOps, Q6kGemmRowsEqualDecodeRows) {
  for (const GemmCase& c : {GemmCase{5120, 300, 300}, GemmCase{17408, 130, 300}, GemmCase{1024, 12000, 600},
                            GemmCase{8448, 37, 300}, GemmCase{5120, 3000, 2500}, GemmCase{8704, 45, 2500},
                            GemmCase{8704, 4500, 300}})
    expect_gemm_rows_equal_decode_rows(gpu(), GgmlType::Q6_K, c, 7300 + uint64_t(c.n_in));
}

// The same on Q6_K tiles (upload_matrix, quant/q6k_tiles.h): the kTiles variants of the GEMM and
// of the decode kernel, the same cases but the odd block count (not tiled: the f16 kernel's).
TEST_F(CudaOps, Q6kTiledGemmRowsEqualDecodeRows) {
  for (const GemmCase& c : {GemmCase{5120, 300, 300}, GemmCase{17408, 130, 300}, GemmCase{1024, 12000, 600},
                            GemmCase{5120, 3000, 2500}, GemmCase{8704, 45, 2500}, GemmCase{8704, 4500, 300}})
    expect_gemm_rows_equal_decode_rows(gpu(), GgmlType::Q6_K, c, 7350 + uint64_t(c.n_in), /*upload_matrix=*/true);
}

// Every row count of a decode kernel (imma_q6k.cu, imma_iq4xs.cu: 1 row, its one-row variant;
// 2-8 one n-tile with padding rows; 9-16 two; 17-24 four with the fourth empty; 25-32 four, all
// live) gives each row the bits of one 40-row call (the prefill GEMM), memcmp-equal, for calls
// starting at row 0 and ending at row 39. n_in 1024: one super-block per slot; 17408: three
// (slots that start on odd super-blocks); n_out 45: an output tail. Outputs start as NaN.
// upload_matrix: the weight as upload_matrix stores it (tiles), else product_weight's.
void expect_decode_rows_at_every_width_equal_gemm_rows(Backend& gpu, GgmlType t, uint64_t seed,
                                                       bool upload_matrix = false) {
  for (const int64_t n_in : {int64_t(1024), int64_t(17408)}) {
    const int64_t n_out = 45;
    const int rows = 40;
    const HostWeight hw = make_weight(t, n_in, n_out, seed + uint64_t(n_in));
    const std::vector<float> x = make_activations(rows, n_in, seed + 100 + uint64_t(n_in));
    const Weight w = upload_matrix ? gpu.upload_matrix(Weight{t, n_in, n_out, hw.bytes.data(), hw.row_bytes})
                                   : product_weight(gpu, hw);
    EXPECT_TRUE(!upload_matrix || w.tiles) << "upload_matrix kept " << type_name(t) << " in rows";
    const std::vector<float> poison(size_t(rows) * n_out, kPoison);
    float* xd = static_cast<float*>(gpu.alloc(x.size() * sizeof(float)));
    float* yd = static_cast<float*>(gpu.alloc(poison.size() * sizeof(float)));
    gpu.upload(xd, x.data(), x.size() * sizeof(float));
    gpu.upload(yd, poison.data(), poison.size() * sizeof(float));
    gpu.matmul(w, xd, rows, yd);
    std::vector<float> all(poison.size()), part(poison.size());
    gpu.download(all.data(), yd, all.size() * sizeof(float));
    for (int width = 1; width <= 32; ++width)
      for (const int r0 : {0, rows - width}) {
        gpu.upload(yd, poison.data(), poison.size() * sizeof(float));
        gpu.matmul(w, xd + size_t(r0) * size_t(n_in), width, yd);
        gpu.download(part.data(), yd, size_t(width) * n_out * sizeof(float));
        EXPECT_EQ(std::memcmp(part.data(), all.data() + size_t(r0) * n_out, size_t(width) * n_out * sizeof(float)), 0)
            << "matmul " << type_name(t) << " " << n_in << "x" << n_out << ": rows " << r0 << ".." << r0 + width - 1
            << " in a call of their own differ from the same rows in one call of " << rows;
      }
    gpu.release(yd);
    gpu.release(xd);
  }
}

TEST_F(CudaOps, Q6kDecodeRowsAtEveryWidthEqualGemmRows) {
  expect_decode_rows_at_every_width_equal_gemm_rows(gpu(), GgmlType::Q6_K, 7400);
}

TEST_F(CudaOps, Q6kTiledDecodeRowsAtEveryWidthEqualGemmRows) {
  expect_decode_rows_at_every_width_equal_gemm_rows(gpu(), GgmlType::Q6_K, 7500, /*upload_matrix=*/true);
}

TEST_F(CudaOps, Iq4xsDecodeRowsAtEveryWidthEqualGemmRows) {
  expect_decode_rows_at_every_width_equal_gemm_rows(gpu(), GgmlType::IQ4_XS, 7600);
}

// ---------------------------------------------------------------------------------------------
// The chunked delta rule (deltanet_chunked.cu; the host emulation of its loops is
// tests/test_gdn_chunk_emulation.cpp): chunked = true against the CPU backend's chunked and
// recurrent forms from a random nonzero state, out and the final S, with partial last chunks,
// several pieces (kPieceRows = 1024 rows) and three gate regimes: typical, strong decay (each
// token's decay e^-10 .. e^-30: a chunk's e^G underflows to 0) and near-1 decay (nothing is
// forgotten over 4000 rows). Tolerance as GdnDeltaRule: 1e-4 of max|ref| + 1e-4 relative (the
// emulation's worst case is ~1% of it).

// L2-normalised q (scaled by 1/sqrt(d_k)) and k in every qkv row, as the model feeds them.
void normalize_qk(std::vector<float>& qkv, int rows, size_t stride, const GdnShape& sh) {
  for (int r = 0; r < rows; ++r)
    for (int part = 0; part < 2; ++part)
      for (int h = 0; h < sh.n_k; ++h) {
        float* v = qkv.data() + size_t(r) * stride + size_t(part * sh.n_k + h) * sh.d_k;
        double nn = 0;
        for (int i = 0; i < sh.d_k; ++i) nn += double(v[i]) * v[i];
        const double f = (part == 0 ? 1.0 / std::sqrt(double(sh.d_k)) : 1.0) / std::sqrt(nn);
        for (int i = 0; i < sh.d_k; ++i) v[i] = float(v[i] * f);
      }
}

double max_abs_of(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

TEST_F(CudaOps, GdnDeltaRuleChunkedKernels) {
  struct Regime {
    const char* name;
    double g_lo, g_hi;
  };
  const Regime regimes[] = {{"typical", -1.5, 0.0}, {"strong decay", -30.0, -10.0}, {"near-1 decay", -1e-3, 0.0}};
  const GdnShape shapes[] = {{16, 48, 128, 128}, {2, 4, 128, 128}, {1, 2, 64, 64}};
  Rng rng(18);
  for (const GdnShape& sh : shapes) {
    for (int rows : {32, 33, 64, 65, 200, 1000, 4000}) {
      const size_t cd = size_t(sh.conv_dim()), qs = cd + 5;  // qkv rows with a gap
      std::vector<float> qkv = strided(rng, rows, int(cd), qs, false);
      normalize_qk(qkv, rows, qs, sh);
      Twin<float> qd(be(), qkv);
      const std::vector<float> poison(size_t(rows) * sh.n_v * sh.d_v, kPoison);
      for (const Regime& r : regimes) {
        std::vector<float> g(size_t(rows) * sh.n_v), beta(g.size());
        for (auto& x : g) x = float(rng.uniform(r.g_lo, r.g_hi));
        for (auto& x : beta) x = float(rng.uniform(0.05, 0.95));
        const std::vector<float> S0 = rng.normals(sh.state_floats(), 0.3);
        Twin<float> gd(be(), g), bd(be(), beta), S(be(), S0), out(be(), poison);
        Twin<float> S_rec(be(), S0), out_rec(be(), poison);  // the CPU's recurrent form (side 0 only)
        both([&](Backend& b, int s) { b.gdn_delta_rule(sh, qd[s], qs, gd[s], bd[s], rows, S[s], out[s], true); });
        be()[0]->gdn_delta_rule(sh, qd[0], qs, gd[0], bd[0], rows, S_rec[0], out_rec[0], false);
        std::ostringstream tag;
        tag << r.name << " k" << sh.n_k << " v" << sh.n_v << " dk" << sh.d_k << " dv" << sh.d_v << " rows=" << rows;
        const auto og = out.get(1), sg = S.get(1);
        for (bool recurrent : {false, true}) {
          const auto oc = recurrent ? out_rec.get(0) : out.get(0), sc = recurrent ? S_rec.get(0) : S.get(0);
          const std::string vs = recurrent ? " vs cpu recurrent " : " vs cpu chunked ";
          Check("gdn chunked out" + vs + tag.str()).all(og, oc, 1e-4, 1e-4 * max_abs_of(oc));
          Check("gdn chunked state" + vs + tag.str()).all(sg, sc, 1e-4, 1e-4 * max_abs_of(sc));
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Flash attention: calls of more than 32 rows on an f16 cache (flash_attention.cu)
//
// The kernel rounds q and the softmax weights P to f16 (K and V are f16 on both sides) and sums
// on tensor cores. A host emulation of that (q and P rounded, 64-key steps, fp64 elsewhere) on
// inputs like these gives max errors ~1.5e-4 max|V| and relative L2 errors ~4e-4 against exact
// attention. Bound: |err| <= 2e-3 max|V| + 2e-3 |ref| per element, and a relative L2 error
// < 2e-3 per call (a mask off by one key moves the relative L2 error by 1e-2 or more).
constexpr double kFlashTol = 2e-3;

// A paged f16 cache of random K/V (the same bytes on both backends) and a sequence's table:
// half of the pool's blocks, shuffled (non-contiguous, out of order).
struct FlashKv {
  FlashKv(Backend* const be[2], Rng& rng, int head_dim, int heads_kv, int block_tokens, int ctx)
      : D(head_dim), n_head_kv(heads_kv), bt(block_tokens) {
    const int n_tab = (ctx + bt - 1) / bt, pool_blocks = 2 * n_tab;
    const size_t n = size_t(pool_blocks) * bt * n_head_kv * D;
    std::vector<uint16_t> kh(n), vh(n);
    for (size_t i = 0; i < n; ++i) {
      kh[i] = f32_to_f16(float(rng.normal()));
      vh[i] = f32_to_f16(float(rng.normal()));
      max_v = std::max(max_v, double(std::fabs(f16_to_f32(vh[i]))));
    }
    k = std::make_unique<Twin<uint16_t>>(be, kh);
    v = std::make_unique<Twin<uint16_t>>(be, vh);
    std::vector<int32_t> ids(pool_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng.g);
    table.assign(ids.begin(), ids.begin() + n_tab);
  }
  KvLayerView view(int s) { return KvLayerView{(*k)[s], (*v)[s], bt, n_head_kv, D, GgmlType::F16}; }
  SeqKv seq() const { return SeqKv{table.data(), int(table.size())}; }
  int D, n_head_kv, bt;
  double max_v = 0;
  std::vector<int32_t> table;
  std::unique_ptr<Twin<uint16_t>> k, v;
};

std::string flash_tag(int D, int n_head, int n_head_kv, int bt, int rows, const char* what) {
  std::ostringstream os;
  os << "hd=" << D << " h=" << n_head << "/" << n_head_kv << " bt=" << bt << " rows=" << rows << " " << what;
  return os.str();
}

// Against the CPU backend: rows 33..257, head dims 64/128/256, GQA ratios 1, 2, 6, block_tokens
// 16 and 64; causal rows after some context, drafter-like rows (one pos for all), and causal
// positions in shuffled order. Outputs start poisoned; a sentinel row past the end must stay.
TEST_F(CudaOps, FlashAttentionPrefill) {
  Rng rng(40);
  struct Heads {
    int n_head, n_head_kv;
  };
  const Heads heads[] = {{4, 4}, {8, 4}, {12, 2}};
  const char* modes[] = {"causal", "drafter", "shuffled"};
  for (int D : {64, 128, 256})
    for (const Heads& hh : heads)
      for (int bt : {16, 64}) {
        if (D == 64 && (hh.n_head != 8 || bt != 16)) continue;  // head dim 64: one shape
        FlashKv kv(be(), rng, D, hh.n_head_kv, bt, 640);
        const SeqKv seq = kv.seq();
        const bool gated = hh.n_head != hh.n_head_kv;  // strided q heads ([q_h | gate_h]) too
        const size_t qhs = size_t(gated ? 2 : 1) * D, qrs = qhs * hh.n_head, hd = size_t(hh.n_head) * D;
        for (int rows : {33, 64, 100, 257})
          for (int mode = 0; mode < 3; ++mode) {
            if (mode == 2 && rows < 100) continue;
            const int start = int(rng.integer(1, 300));  // context before the chunk
            std::vector<int32_t> pos(rows);
            for (int r = 0; r < rows; ++r) pos[r] = mode == 1 ? start + rows - 1 : start + r;
            if (mode == 2) std::shuffle(pos.begin(), pos.end(), rng.g);
            std::vector<float> o0(size_t(rows + 1) * hd, kPoison);
            std::fill(o0.end() - std::ptrdiff_t(hd), o0.end(), kSentinel);
            Twin<float> q(be(), rng.normals(size_t(rows) * qrs)), out(be(), o0);
            Twin<int32_t> p(be(), pos);
            both([&](Backend& b, int s) {
              b.attention(q[s], qrs, qhs, rows, p[s], hh.n_head, kv.view(s), seq, 1.0f / std::sqrt(float(D)), out[s]);
            });
            const std::string tag = flash_tag(D, hh.n_head, hh.n_head_kv, bt, rows, modes[mode]);
            Check chk("flash attention " + tag);
            chk.all(out.get(1), out.get(0), kFlashTol, kFlashTol * kv.max_v);
            EXPECT_LT(chk.rel_l2(), kFlashTol) << tag;
          }
      }
}

// A row's bits do not depend on the other rows of the call: 40 rows picked from a call of 100,
// in another order (so each sits elsewhere in its tiles, with other neighbours and key ranges),
// give bit-identical outputs. Causal positions, and arbitrary unsorted ones.
TEST_F(CudaOps, FlashAttentionRowInvariance) {
  Rng rng(41);
  struct Shape {
    int D, n_head, n_head_kv;
  };
  for (const Shape& sh : {Shape{128, 4, 4}, Shape{128, 8, 4}, Shape{256, 12, 2}})
    for (int mode = 0; mode < 2; ++mode) {
      FlashKv kv(be(), rng, sh.D, sh.n_head_kv, 16, 640);
      const SeqKv seq = kv.seq();
      const size_t qhs = size_t(sh.D), qrs = qhs * sh.n_head, hd = size_t(sh.n_head) * sh.D;
      const int n_all = 100, n_sub = 40;
      std::vector<int32_t> pos(n_all);
      for (int r = 0; r < n_all; ++r) pos[r] = mode == 0 ? 57 + r : int(rng.integer(0, 600));
      std::vector<int> pick(n_all);
      std::iota(pick.begin(), pick.end(), 0);
      std::shuffle(pick.begin(), pick.end(), rng.g);
      pick.resize(n_sub);
      const std::vector<float> q_all = rng.normals(size_t(n_all) * qrs);
      std::vector<float> q_sub(size_t(n_sub) * qrs);
      std::vector<int32_t> pos_sub(n_sub);
      for (int i = 0; i < n_sub; ++i) {
        std::copy_n(q_all.begin() + std::ptrdiff_t(size_t(pick[i]) * qrs), qrs, q_sub.begin() + std::ptrdiff_t(size_t(i) * qrs));
        pos_sub[i] = pos[pick[i]];
      }
      Twin<float> qa(be(), q_all), qs(be(), q_sub);
      Twin<int32_t> pa(be(), pos), ps(be(), pos_sub);
      Twin<float> oa(be(), std::vector<float>(size_t(n_all) * hd, kPoison)),
          os(be(), std::vector<float>(size_t(n_sub) * hd, kPoison));
      const float scale = 1.0f / std::sqrt(float(sh.D));
      gpu().attention(qa[1], qrs, qhs, n_all, pa[1], sh.n_head, kv.view(1), seq, scale, oa[1]);
      gpu().attention(qs[1], qrs, qhs, n_sub, ps[1], sh.n_head, kv.view(1), seq, scale, os[1]);
      gpu().synchronize();
      const std::vector<float> all = oa.get(1), got = os.get(1);
      std::vector<float> want(got.size());
      for (int i = 0; i < n_sub; ++i)
        std::copy_n(all.begin() + std::ptrdiff_t(size_t(pick[i]) * hd), hd, want.begin() + std::ptrdiff_t(size_t(i) * hd));
      Check("flash row invariance " + flash_tag(sh.D, sh.n_head, sh.n_head_kv, 16, n_sub, mode == 0 ? "causal" : "random pos"))
          .exact(got, want);
    }
}

// A row that needs a position without a block comes out NaN (a -1 table entry; a table too
// short), while the other rows of the call are unaffected: bit-identical to the call with the
// complete table, which matches the CPU within the flash tolerance.
TEST_F(CudaOps, FlashAttentionMissingBlock) {
  Rng rng(42);
  for (int variant = 0; variant < 2; ++variant) {
    const int D = variant == 0 ? 128 : 256, n_head = variant == 0 ? 8 : 12, n_head_kv = variant == 0 ? 4 : 2, bt = 16;
    FlashKv kv(be(), rng, D, n_head_kv, bt, 640);
    const int rows = 64, start = 100;  // positions 100..163; table entry 8 holds 128..143
    std::vector<int32_t> holed = kv.table;
    int n_holed = int(holed.size()), first_missing = 0;
    if (variant == 0) {
      holed[8] = -1;
      first_missing = 128;
    } else {
      n_holed = 9;
      first_missing = 144;
    }
    const SeqKv full = kv.seq(), broken{holed.data(), n_holed};
    const size_t qhs = size_t(D), qrs = qhs * n_head, hd = size_t(n_head) * D;
    std::vector<int32_t> pos(rows);
    std::iota(pos.begin(), pos.end(), start);
    std::shuffle(pos.begin(), pos.end(), rng.g);  // NaN and finite rows mixed in every tile
    Twin<float> q(be(), rng.normals(size_t(rows) * qrs));
    Twin<int32_t> p(be(), pos);
    Twin<float> out_full(be(), std::vector<float>(size_t(rows) * hd, kPoison)),
        out_broken(be(), std::vector<float>(size_t(rows) * hd, kPoison));
    const float scale = 1.0f / std::sqrt(float(D));
    both([&](Backend& b, int s) { b.attention(q[s], qrs, qhs, rows, p[s], n_head, kv.view(s), full, scale, out_full[s]); });
    gpu().attention(q[1], qrs, qhs, rows, p[1], n_head, kv.view(1), broken, scale, out_broken[1]);
    gpu().synchronize();
    const std::string tag = flash_tag(D, n_head, n_head_kv, bt, rows, variant == 0 ? "table entry -1" : "short table");
    const std::vector<float> cpu = out_full.get(0), gpu_full = out_full.get(1), got = out_broken.get(1);
    {
      Check chk("flash attention full table, " + tag);
      chk.all(gpu_full, cpu, kFlashTol, kFlashTol * kv.max_v);
    }
    int nan_rows = 0, bad_nan = 0, bad_bits = 0;
    for (int r = 0; r < rows; ++r) {
      const bool missing = pos[r] >= first_missing;
      nan_rows += missing;
      for (size_t j = 0; j < hd; ++j) {
        const size_t i = size_t(r) * hd + j;
        if (missing)
          bad_nan += !std::isnan(got[i]);
        else
          bad_bits += float_bits(got[i]) != float_bits(gpu_full[i]);
      }
    }
    EXPECT_GT(nan_rows, 0) << tag;
    EXPECT_LT(nan_rows, rows) << tag;
    EXPECT_EQ(bad_nan, 0) << tag << ": elements of rows that need a missing block are not NaN";
    EXPECT_EQ(bad_bits, 0) << tag << ": rows that need no missing block differ from the complete table's";
    std::cout << "[cuda-err] flash missing block " << std::left << std::setw(41) << tag << std::right << " " << nan_rows
              << " NaN rows" << (bad_nan + bad_bits == 0 ? ", others bit-exact" : "  FAILED") << "\n";
  }
}

// ---------------------------------------------------------------------------------------------
// Fused small ops of a decode step: bit for bit the separate CUDA ops, and the CPU within the
// separate ops' bounds.

const int kFusedRows[] = {1, 2, 7, 16, 32, 33, 100};  // 32: the longest one-kernel segment
const int kGdnFusedRows[] = {1, 2, 5, 7, 16, 32, 33, 100};  // kFusedRows and 5 (a verify block)

struct GdnPrepCase {
  GdnShape sh;
  int kernel;
};

// gdn_conv_norm_gates (one kernel up to 32 rows) against conv1d_silu + l2_norm_heads (q, k) +
// gdn_gates on CUDA: output rows, gaps, conv state, beta and alpha memcmp-equal; and against the
// CPU: conv channels 1e-5 relative + 1e-6 (Conv1dSilu's bound); normed q/k channels that plus
// the norm's 2 red_tol(d_k) + 16 u, with the conv's absolute part carried through the norm
// (1e-6 |scale| / |head| per element, bounded here by 2e-6); gates 4e-6 relative; state exact.
// Calls chain over the row counts, so the state carries over on all three sides. Head dims not a
// multiple of 32 (5, 7, 33, 40, 160) and row x channel pairs below, at and above the kernel's
// 1024 threads; a d_k whose 32 staged rows would pass 48 KB takes the separate kernels there.
TEST_F(CudaOps, GdnConvNormGatesEqualsSeparateOps) {
  const std::vector<GdnPrepCase> cases = {{{16, 48, 128, 128}, 4},  // the 27B shape
                                          {{2, 3, 7, 5}, 3},
                                          {{1, 2, 33, 40}, 2},
                                          {{3, 1, 32, 96}, 1},   // no state
                                          {{1, 2, 160, 24}, 4},  // 5 values a lane; 32 rows: 5 pairs a thread
                                          {{1, 1, 400, 8}, 4}};  // 32 rows stage 51 KB: the separate kernels
  Rng rng(31);
  const float eps = 1e-6f;
  for (const auto& c : cases) {
    const GdnShape& sh = c.sh;
    const int cd = sh.conv_dim(), K = c.kernel, nv = sh.n_v;
    const size_t qk = size_t(sh.n_k) * sh.d_k;
    const float q_scale = 1.0f / std::sqrt(float(sh.d_k));
    std::vector<float> w = rng.normals(size_t(cd) * K, 0.5);
    for (size_t j = 0; j < size_t(sh.d_k) * K; ++j) w[qk * K + j] = 0.0f;  // k head 0 all zero: the eps branch
    const std::vector<float> state0 = rng.normals(size_t(K - 1) * cd);
    std::vector<float> coef(static_cast<size_t>(nv)), bias(static_cast<size_t>(nv));
    for (int h = 0; h < nv; ++h) coef[size_t(h)] = -float(std::exp(rng.normal())), bias[size_t(h)] = float(rng.normal());
    Twin<float> wd(be(), w), cf(be(), coef), bs(be(), bias), state(be(), state0), state_sep(be(), state0);
    std::ostringstream shape_tag;
    shape_tag << "k" << sh.n_k << " v" << sh.n_v << " dk" << sh.d_k << " dv" << sh.d_v << " K=" << K;
    for (int rows : kGdnFusedRows) {
      const size_t xs = size_t(cd) + 5, os = size_t(cd) + 3;
      const std::vector<float> x0 = strided(rng, rows, cd, xs, false), out0 = strided(rng, rows, cd, os, true);
      std::vector<float> b0 = rng.normals(size_t(rows) * nv, 3.0), a0 = rng.normals(size_t(rows) * nv, 8.0);
      a0[0] = 30.0f;  // softplus's linear branch
      if (a0.size() > 1) a0[1] = -30.0f;
      Twin<float> x(be(), x0), out(be(), out0), beta(be(), b0), alpha(be(), a0);
      Twin<float> out_sep(be(), out0), beta_sep(be(), b0), alpha_sep(be(), a0);
      both([&](Backend& b, int s) {
        b.gdn_conv_norm_gates(sh, x[s], xs, rows, wd[s], K, state[s], out[s], os, eps, q_scale, beta[s], alpha[s],
                              cf[s], bs[s]);
      });
      Backend& g = gpu();  // the separate CUDA ops, on copies of the same inputs
      g.conv1d_silu(x[1], xs, rows, cd, wd[1], K, state_sep[1], out_sep[1], os);
      g.l2_norm_heads(out_sep[1], os, rows, sh.n_k, sh.d_k, eps, q_scale);
      g.l2_norm_heads(out_sep[1] + qk, os, rows, sh.n_k, sh.d_k, eps, 1.0f);
      g.gdn_gates(beta_sep[1], alpha_sep[1], cf[1], bs[1], rows, nv);
      g.synchronize();
      const std::string tag = shape_tag.str() + " rows=" + std::to_string(rows);
      const auto got = out.get(1), want = out.get(0);
      Check("gdn_conv_norm_gates out vs separate CUDA ops " + tag).exact(got, out_sep.get(1));
      Check("gdn_conv_norm_gates state vs separate CUDA ops " + tag).exact(state.get(1), state_sep.get(1));
      Check("gdn_conv_norm_gates beta vs separate CUDA ops " + tag).exact(beta.get(1), beta_sep.get(1));
      Check("gdn_conv_norm_gates alpha vs separate CUDA ops " + tag).exact(alpha.get(1), alpha_sep.get(1));
      Check vs_cpu("gdn_conv_norm_gates out vs CPU " + tag);
      const double norm_rtol = 1e-5 + 2 * red_tol(sh.d_k) + 16 * kU;
      for (size_t i = 0; i < got.size(); ++i) {
        const size_t ch = i % os;
        const double rtol = ch < 2 * qk ? norm_rtol : 1e-5, atol = ch < 2 * qk ? 2e-6 : 1e-6;
        vs_cpu.add(got[i], want[i], atol + rtol * std::fabs(double(want[i])), i);
      }
      Check("gdn_conv_norm_gates state vs CPU " + tag).exact(state.get(1), state.get(0));
      Check("gdn_conv_norm_gates beta vs CPU " + tag).all(beta.get(1), beta.get(0), 4e-6, 0);
      Check("gdn_conv_norm_gates alpha vs CPU " + tag).all(alpha.get(1), alpha.get(0), 4e-6, 0);
    }
  }
}

struct QkRopeCase {
  int head_dim, n_head, n_head_kv, n_rot;
  bool gated_q;       // q heads interleaved with their gates (stride 2 head_dim), as qwen35
  bool misaligned_k;  // k 4 bytes off 16-byte alignment: its norm takes the scalar path, q's not
};

// qk_norm_rope (one kernel) against rms_norm (q, k) + rope_neox (q, k) on CUDA, memcmp-equal over
// the whole buffers (gates between q heads untouched); and against the CPU: a rotated pair
// carries the norm's relative error 2 red_tol(dim) + 16 u of both its inputs, so each element's
// bound is that times sqrt(2) |pair| (|pair| = the CPU pair's length, which the rotation keeps),
// plus RopeNeox's 4e-6 (1 + |want|); unrotated elements the norm's bound alone.
TEST_F(CudaOps, QkNormRopeEqualsSeparateOps) {
  const std::vector<QkRopeCase> cases = {{256, 24, 4, 64, true, false},  // the 27B shape
                                         {128, 8, 2, 128, false, false}, {64, 3, 1, 16, true, true},
                                         {7, 3, 1, 6, false, false},     {12, 2, 2, 0, true, false}};
  Rng rng(32);
  const float eps = 1e-6f, theta = 10000000.0f;
  for (const auto& c : cases) {
    const int D = c.head_dim;
    const size_t qhs = size_t(c.gated_q ? 2 : 1) * D, qrs = qhs * c.n_head, krs = size_t(c.n_head_kv) * D;
    const size_t k_off = c.misaligned_k ? 1 : 0;
    Twin<float> qw(be(), rng.normals(size_t(D), 0.5)), kw(be(), rng.normals(size_t(D), 0.5));
    for (int rows : kFusedRows) {
      std::vector<int32_t> pos(static_cast<size_t>(rows));
      std::iota(pos.begin(), pos.end(), int32_t(rng.integer(0, 200000)));
      const std::vector<float> q0 = rng.normals(size_t(rows) * qrs), k0 = rng.normals(size_t(rows) * krs + k_off);
      Twin<float> q(be(), q0), k(be(), k0), q_sep(be(), q0), k_sep(be(), k0);
      Twin<int32_t> p(be(), pos);
      both([&](Backend& b, int s) {
        b.qk_norm_rope(q[s], qhs, c.n_head, qw[s], k[s] + k_off, c.n_head_kv, kw[s], rows, D, eps, p[s], c.n_rot,
                       theta);
      });
      Backend& g = gpu();
      float* ks = k_sep[1] + k_off;
      g.rms_norm(q_sep[1], qhs, qw[1], rows * c.n_head, D, eps, q_sep[1], qhs);
      g.rms_norm(ks, size_t(D), kw[1], rows * c.n_head_kv, D, eps, ks, size_t(D));
      g.rope_neox(q_sep[1], qrs, qhs, rows, c.n_head, p[1], c.n_rot, theta);
      g.rope_neox(ks, krs, size_t(D), rows, c.n_head_kv, p[1], c.n_rot, theta);
      g.synchronize();
      std::ostringstream tag;
      tag << "hd=" << D << " h=" << c.n_head << "/" << c.n_head_kv << " rot=" << c.n_rot
          << (c.gated_q ? " gated" : "") << (c.misaligned_k ? " k-misaligned" : "") << " rows=" << rows;
      Check("qk_norm_rope q vs separate CUDA ops " + tag.str()).exact(q.get(1), q_sep.get(1));
      Check("qk_norm_rope k vs separate CUDA ops " + tag.str()).exact(k.get(1), k_sep.get(1));
      const double rtol = 2 * red_tol(D) + 16 * kU;
      const int half = c.n_rot / 2;
      // Heads of hs-strided rows starting at `first`; elements outside the heads must keep their bits.
      auto against_cpu = [&](const char* what, const std::vector<float>& got, const std::vector<float>& want,
                             size_t first, size_t hs, int n_heads) {
        Check chk(std::string("qk_norm_rope ") + what + " vs CPU " + tag.str());
        std::vector<double> tol(got.size(), 0.0);  // 0: untouched, bit for bit
        for (size_t v = 0; v < size_t(rows) * n_heads; ++v) {
          const size_t b = first + v * hs;
          for (int j = 0; j < D; ++j) {
            const double wj = std::fabs(double(want[b + j]));
            if (j < 2 * half) {
              const int i = j % half;
              const double pair = std::hypot(double(want[b + i]), double(want[b + i + half]));
              tol[b + j] = rtol * std::sqrt(2.0) * pair + 4e-6 * (1 + wj);
            } else {
              tol[b + j] = rtol * wj;
            }
          }
        }
        for (size_t i = 0; i < got.size(); ++i) chk.add(got[i], want[i], tol[i], i);
      };
      against_cpu("q", q.get(1), q.get(0), 0, qhs, c.n_head);
      against_cpu("k", k.get(1), k.get(0), k_off, size_t(D), c.n_head_kv);
    }
  }
}

// --- top_k_rows (top_k.cu) ---
// CUDA against the CPU backend, bit for bit (ids and values): vocabulary-sized rows (248320)
// and odd lengths (one chunk, a partial last chunk, fewer values than 256), ties planted at
// the top and across the k-th place, NaN and -inf planted, +0 / -0 mixes, k 1 / 40 / 256,
// rows 1 and 16, a stride past n, outputs poisoned before the run.

// Rows of hard cases: every row a different mix (the CPU backend is the reference).
std::vector<float> top_k_test_rows(Rng& rng, int rows, int n, size_t stride) {
  std::vector<float> x(size_t(rows) * stride, 1e30f);  // past n: would win if read
  for (int r = 0; r < rows; ++r) {
    float* v = x.data() + size_t(r) * stride;
    for (int i = 0; i < n; ++i) v[i] = float(rng.normal(3.0));
    auto at = [&] { return size_t(rng.integer(0, n - 1)); };
    switch (r % 8) {
      case 0:
        for (int t = 0; t < 300; ++t) v[at()] = 15.0f;  // ties at the top, more than k
        break;
      case 1:
        for (int i = 0; i < n; i += 3) v[i] = std::nanf("");
        v[at()] = 40.0f;
        break;
      case 2:
        for (int i = 0; i < n; ++i) v[i] = std::round(v[i] * 2.0f) / 2.0f;  // ties across the k-th place
        break;
      case 3:
        for (int i = 0; i < n; ++i) v[i] = (i % 7 == 0) ? v[i] : -INFINITY;
        break;
      case 4:
        for (int i = 0; i < n; ++i) v[i] = (i % 2) ? -0.0f : 0.0f;
        for (int t = 0; t < 20; ++t) v[at()] = -1.0f;
        break;
      case 5:
        for (int i = 0; i < n; ++i) v[i] = std::nanf("");
        for (int t = 0; t < 10; ++t) v[at()] = float(t);
        break;
      case 6:
        v[0] = INFINITY, v[n - 1] = INFINITY;
        break;
      default:
        for (int i = 0; i < n; ++i) v[i] = 1.0f;  // all equal: the lowest ids
        break;
    }
  }
  return x;
}

TEST_F(CudaOps, TopKRowsMatchTheCpu) {
  Rng rng(91);
  struct Shape {
    int rows, n;
    size_t stride;
  };
  const Shape shapes[] = {{16, 248320, 248320}, {1, 248320, 248320}, {16, 248077, 248320}, {16, 4096, 4096},
                          {3, 4097, 4101},      {16, 30001, 30001},  {5, 257, 260},        {4, 1, 1},
                          {4, 40, 40}};
  for (const Shape& sh : shapes) {
    const std::vector<float> x = top_k_test_rows(rng, sh.rows, sh.n, sh.stride);
    Twin<float> xd(be(), x);
    for (int k : {1, 40, 256}) {
      if (k > sh.n) continue;
      std::vector<int32_t> ids[2];
      std::vector<float> vals[2];
      for (int s = 0; s < 2; ++s) {
        ids[s].assign(size_t(sh.rows) * k, -7);
        vals[s].assign(size_t(sh.rows) * k, kPoison);
        be_[s]->top_k_rows(xd[s], sh.rows, sh.n, sh.stride, k, ids[s].data(), vals[s].data());
      }
      const std::string tag = "rows " + std::to_string(sh.rows) + " n " + std::to_string(sh.n) + " stride " +
                              std::to_string(sh.stride) + " k " + std::to_string(k);
      EXPECT_EQ(ids[1], ids[0]) << tag;
      EXPECT_TRUE(same_bits(vals[1], vals[0])) << tag << ": values";
      for (size_t i = 0; i < ids[0].size(); ++i) ASSERT_LT(ids[0][i], sh.n) << tag;  // the reference is sane
      std::cout << "[cuda-err] top_k_rows " << std::left << std::setw(46) << tag << std::right
                << (ids[1] == ids[0] && same_bits(vals[1], vals[0]) ? " bit-exact" : "  FAILED") << "\n";
    }
  }
}

// Inside steps on the graph backend: run directly, captured, then replayed, each bit-exact.
TEST_F(CudaOps, TopKRowsInCapturedSteps) {
  Rng rng(92);
  const int rows = 4, n = 248320, k = 40;
  const std::vector<float> x = top_k_test_rows(rng, rows, n, size_t(n));
  Twin<float> xd(be(), x);
  std::vector<int32_t> want_ids(size_t(rows) * k);
  std::vector<float> want_vals(size_t(rows) * k);
  be_[0]->top_k_rows(xd[0], rows, n, size_t(n), k, want_ids.data(), want_vals.data());
  const CudaGraphStats before = graph_stats(gpu());
  for (int t = 0; t < 3; ++t) {
    std::vector<int32_t> ids(size_t(rows) * k, -7);
    std::vector<float> vals(size_t(rows) * k, kPoison);
    {
      StepScope step(gpu());
      gpu().top_k_rows(xd[1], rows, n, size_t(n), k, ids.data(), vals.data());
    }
    EXPECT_EQ(ids, want_ids) << "step " << t;
    EXPECT_TRUE(same_bits(vals, want_vals)) << "step " << t;
  }
  const CudaGraphStats after = graph_stats(gpu());
  EXPECT_EQ(after.captured - before.captured, 1);
  EXPECT_EQ(after.replayed - before.replayed, 1);
}

// A model's forward with top_k_only (graphs on) against the CPU backend's top_k_rows of the
// same model's full logits on CUDA: the candidates of every decode step, bit for bit.
TEST(CudaTopK, ForwardTopKOnlyMatchesTheLogits) {
  if (!have_gpu()) GTEST_SKIP() << kNoGpu;
  test::TempDir dir;
  auto file = gguf::File::open(make_graph_test_model(dir, "qwen35", "q8_0", 43));
  auto gpu = make_cuda_backend(0, true);
  auto cpu = make_cpu_backend(0);
  TargetModel tm(*file, *gpu, ModelOptions{});
  const int V = int(tm.hparams().n_vocab), limit = V - 3, K = std::min(40, limit);
  auto st_full = tm.make_state(1, 64), st_top = tm.make_state(1, 64);
  const int a = st_full->create(), b = st_top->create();
  const std::vector<int32_t> prompt = {7, 3, 19, 200, 42};
  Batch ba, bb;
  for (size_t i = 0; i < prompt.size(); ++i) {
    ba.add(a, int(i), prompt[i], i + 1 == prompt.size());
    bb.add(b, int(i), prompt[i], i + 1 == prompt.size());
  }
  ForwardOutput full, top;
  top.top_k_only = K;
  top.top_k_limit = limit;
  for (int step = 0; step < 12; ++step) {
    tm.forward(ba, *st_full, full);
    tm.forward(bb, *st_top, top);
    std::vector<int32_t> want_ids(K);
    std::vector<float> want_vals(K);
    cpu->top_k_rows(full.logits.data(), 1, limit, size_t(V), K, want_ids.data(), want_vals.data());
    ASSERT_EQ(top.top_ids, want_ids) << "step " << step;
    ASSERT_TRUE(same_bits(top.top_logits, want_vals)) << "step " << step;
    EXPECT_TRUE(top.logits.empty());
    const int32_t next = want_ids[size_t(step % 3)];  // not always the argmax
    ba.clear();
    bb.clear();
    ba.add(a, int(prompt.size()) + step, next, true);
    bb.add(b, int(prompt.size()) + step, next, true);
  }
}

// copy_2d_indexed: the source row picked by an index in backend memory, against a host copy;
// 16-, 4- and 1-byte aligned cases (the kernel's three word sizes), the index changed between
// calls without changing the call (as a replayed commit step does), bytes outside the rows kept.
TEST_F(CudaOps, Copy2dIndexed) {
  Rng rng(29);
  struct Case {
    size_t dst_pitch, src_pitch, row_bytes, index_bytes;
    int rows, n_index;
  };
  const std::vector<Case> cases = {{4096, 8192, 4096, 256, 5, 17},  // 16-byte words (the commit's state copy)
                                   {1024, 2048, 1000, 40, 3, 9},    // 4-byte words
                                   {99, 300, 97, 13, 4, 5},         // bytes
                                   {1 << 20, 1 << 21, 1 << 20, 1 << 16, 2, 3}};
  for (const Case& c : cases) {
    const size_t src_bytes = c.src_pitch * size_t(c.rows - 1) + c.row_bytes + c.index_bytes * size_t(c.n_index);
    const size_t dst_bytes = c.dst_pitch * size_t(c.rows);
    std::vector<uint8_t> src(src_bytes), dst0(dst_bytes);
    for (auto& b : src) b = uint8_t(rng.integer(0, 255));
    for (auto& b : dst0) b = uint8_t(rng.integer(0, 255));
    Twin<uint8_t> sd(be(), src), dd(be(), dst0);
    Twin<int32_t> idx(be(), std::vector<int32_t>{0});
    for (int k : {c.n_index - 1, 0, c.n_index / 2}) {
      const int32_t host_k = k;
      both([&](Backend& b, int s) {
        b.upload(idx[s], &host_k, sizeof(host_k));
        b.copy_2d_indexed(dd[s], c.dst_pitch, sd[s], c.src_pitch, c.row_bytes, c.rows, idx[s], c.index_bytes);
      });
      std::vector<uint8_t> ref = dst0;
      for (int r = 0; r < c.rows; ++r)
        std::memcpy(ref.data() + size_t(r) * c.dst_pitch, src.data() + size_t(k) * c.index_bytes + size_t(r) * c.src_pitch,
                    c.row_bytes);
      const auto want = dd.get(0), got = dd.get(1);
      EXPECT_EQ(want, ref) << "CPU copy_2d_indexed, index " << k << ", row " << c.row_bytes;
      EXPECT_EQ(got, ref) << "CUDA copy_2d_indexed, index " << k << ", row " << c.row_bytes << " x " << c.rows;
      dst0 = ref;  // the next index overwrites the same rows
    }
  }
}

// The Q4_K and IQ4_XS (tiles) prefill GEMMs' block shapes (cuda::ImmaGemmShape: 128x64 with 4
// warps, 128x128 with 8, 128x128 with 16) give the same bits for every output: row and output
// tails, one and two super-blocks per slot (n_in 8448: 33 super-blocks).
TEST_F(CudaOps, ImmaGemmShapesGiveTheSameBits) {
  struct Case {
    int64_t n_in, n_out;
    int rows;
  };
  uint64_t seed = 4242;
  for (const GgmlType t : {GgmlType::Q4_K, GgmlType::IQ4_XS}) {
    for (const Case c : {Case{512, 300, 100}, Case{1024, 129, 257}, Case{8448, 37, 70}, Case{2304, 256, 512}}) {
      const HostWeight hw = make_weight(t, c.n_in, c.n_out, seed++);
      const std::vector<float> x = make_activations(c.rows, c.n_in, seed++);
      const Weight w = product_weight(gpu(), hw);
      void* xd = gpu().alloc(x.size() * sizeof(float));
      gpu().upload(xd, x.data(), x.size() * sizeof(float));
      void* scratch = gpu().alloc(cuda::imma_scratch_bytes(w, c.rows));
      const size_t y_bytes = size_t(c.rows) * size_t(c.n_out) * sizeof(float);
      std::vector<std::vector<float>> ys;
      gpu().synchronize();
      cuda::imma_quantize(static_cast<const float*>(xd), c.n_in, c.rows, scratch, nullptr);
      for (cuda::ImmaGemmShape shape : {cuda::ImmaGemmShape::kAuto, cuda::ImmaGemmShape::k128x64Warps4,
                                        cuda::ImmaGemmShape::k128x128Warps8, cuda::ImmaGemmShape::k128x128Warps16}) {
        void* yd = gpu().alloc(y_bytes);
        const std::vector<float> poison(y_bytes / sizeof(float), kPoison);
        gpu().upload(yd, poison.data(), y_bytes);
        gpu().synchronize();
        cuda::imma_gemm_quantized(w, static_cast<float*>(yd), c.rows, scratch, nullptr, shape);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "shape " << int(shape);
        ys.emplace_back(y_bytes / sizeof(float));
        gpu().download(ys.back().data(), yd, y_bytes);
        gpu().release(yd);
      }
      for (size_t k = 1; k < ys.size(); ++k)
        EXPECT_EQ(0, std::memcmp(ys[0].data(), ys[k].data(), y_bytes))
            << type_name(t) << " shape " << k << " differs from the default, " << c.n_in << "x" << c.n_out << " rows "
            << c.rows;
      EXPECT_TRUE(std::none_of(ys[0].begin(), ys[0].end(), [](float v) { return std::isnan(v); })) << "unwritten outputs";
      gpu().release(scratch);
      gpu().release(xd);
    }
  }
}

// The Q4_K / Q5_K tile decode kernel computes 1, 2 or 4 m-tile groups (16 outputs each) a CUDA
// block (imma_decode_quantized; the kernels share the activation reads of a block's groups), and
// at 9-16 rows optionally with three blocks an SM: every shape gives the bits of one group a block, at each width (1 row: the one-row variant;
// 2-8; 9-16; 17-32), with slots of one to three super-blocks (n_in 256 .. 17408), tail groups
// (17, 37, 129, 300 outputs: 2, 3, 9, 19 groups, so a block's last groups may be idle), outputs
// poisoned before each run.
TEST_F(CudaOps, ImmaDecodeGroupsGiveTheSameBits) {
  gpu_ = make_cuda_backend(0, true, /*tiles=*/true);  // upload_matrix tiles Q4_K
  struct Case {
    int64_t n_in, n_out;
  };
  uint64_t seed = 5150;
  for (const GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K}) {
    for (const Case c : {Case{5120, 300}, Case{8448, 37}, Case{17408, 129}, Case{256, 17}}) {
      const HostWeight hw = make_weight(t, c.n_in, c.n_out, seed++);
      const Weight w = gpu().upload_matrix(Weight{hw.type, hw.n_in, hw.n_out, hw.bytes.data(), hw.row_bytes});
      ASSERT_TRUE(w.tiles) << type_name(t);
      for (int rows : {1, 2, 8, 9, 16, 17, 32}) {
        const std::vector<float> x = make_activations(rows, c.n_in, seed++);
        void* xd = gpu().alloc(x.size() * sizeof(float));
        gpu().upload(xd, x.data(), x.size() * sizeof(float));
        void* scratch = gpu().alloc(cuda::imma_scratch_bytes(w, rows));
        const size_t y_bytes = size_t(rows) * size_t(c.n_out) * sizeof(float);
        void* yd = gpu().alloc(y_bytes);
        const std::vector<float> poison(y_bytes / sizeof(float), kPoison);
        gpu().synchronize();
        cuda::imma_quantize(static_cast<const float*>(xd), c.n_in, rows, scratch, nullptr);
        std::vector<std::vector<float>> ys;
        for (const cuda::ImmaDecodeShape shape : {cuda::ImmaDecodeShape{1, 0}, cuda::ImmaDecodeShape{2, 0},
                                                  cuda::ImmaDecodeShape{4, 0}, cuda::ImmaDecodeShape{1, 3},
                                                  cuda::ImmaDecodeShape{2, 3}}) {
          gpu().upload(yd, poison.data(), y_bytes);
          gpu().synchronize();
          cuda::imma_decode_quantized(w, static_cast<float*>(yd), rows, scratch, nullptr, shape);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess)
              << "groups " << shape.groups_per_block << ", blocks an SM " << shape.blocks_per_sm;
          ys.emplace_back(y_bytes / sizeof(float));
          gpu().download(ys.back().data(), yd, y_bytes);
        }
        const std::string where = std::string(type_name(t)) + " " + std::to_string(c.n_in) + "x" +
                                  std::to_string(c.n_out) + " rows " + std::to_string(rows);
        EXPECT_TRUE(std::none_of(ys[0].begin(), ys[0].end(), [](float v) { return std::isnan(v); }))
            << "unwritten outputs, " << where;
        for (size_t k = 1; k < ys.size(); ++k)
          EXPECT_EQ(0, std::memcmp(ys[0].data(), ys[k].data(), y_bytes)) << "shape " << k << ", " << where;
        gpu().release(yd);
        gpu().release(scratch);
        gpu().release(xd);
      }
    }
  }
}

// Weights sharing one input in one launch (segments, as matmul_shared_input launches them):
// every block shape gives each weight's outputs the bits of that weight launched alone. With
// 2 or 4 groups a block, a block's groups straddle two weights (300 and 37 outputs end inside
// a block of 32 or 64).
TEST_F(CudaOps, ImmaDecodeSharedInputSegmentsGiveTheSameBits) {
  gpu_ = make_cuda_backend(0, true, /*tiles=*/true);
  uint64_t seed = 7170;
  const int64_t n_in = 5120;
  const int64_t outs[] = {300, 37, 129};
  for (const GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K}) {
    std::vector<HostWeight> hws;
    std::vector<Weight> ws;
    for (const int64_t n_out : outs) {
      hws.push_back(make_weight(t, n_in, n_out, seed++));
      const HostWeight& hw = hws.back();
      ws.push_back(gpu().upload_matrix(Weight{hw.type, hw.n_in, hw.n_out, hw.bytes.data(), hw.row_bytes}));
      ASSERT_TRUE(ws.back().tiles) << type_name(t);
    }
    const Weight* wp[3] = {&ws[0], &ws[1], &ws[2]};
    for (int rows : {1, 2, 7, 9, 16, 17, 32}) {
      const std::vector<float> x = make_activations(rows, n_in, seed++);
      void* xd = gpu().alloc(x.size() * sizeof(float));
      gpu().upload(xd, x.data(), x.size() * sizeof(float));
      void* scratch = gpu().alloc(cuda::imma_scratch_bytes(ws[0], rows));
      gpu().synchronize();
      cuda::imma_quantize(static_cast<const float*>(xd), n_in, rows, scratch, nullptr);
      std::vector<void*> yd;
      std::vector<size_t> y_bytes;
      for (const int64_t n_out : outs) {
        y_bytes.push_back(size_t(rows) * size_t(n_out) * sizeof(float));
        yd.push_back(gpu().alloc(y_bytes.back()));
      }
      auto run = [&](const cuda::ImmaDecodeShape shape, bool together) {
        for (size_t i = 0; i < yd.size(); ++i) {
          const std::vector<float> poison(y_bytes[i] / sizeof(float), kPoison);
          gpu().upload(yd[i], poison.data(), y_bytes[i]);
        }
        gpu().synchronize();
        float* yp[3] = {static_cast<float*>(yd[0]), static_cast<float*>(yd[1]), static_cast<float*>(yd[2])};
        if (together) cuda::imma_decode_quantized(wp, yp, 3, rows, scratch, nullptr, shape);
        else
          for (int i = 0; i < 3; ++i) cuda::imma_decode_quantized(*wp[i], yp[i], rows, scratch, nullptr, shape);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<std::vector<float>> ys;
        for (size_t i = 0; i < yd.size(); ++i) {
          ys.emplace_back(y_bytes[i] / sizeof(float));
          gpu().download(ys.back().data(), yd[i], y_bytes[i]);
        }
        return ys;
      };
      const std::vector<std::vector<float>> alone = run(cuda::ImmaDecodeShape{1, 0}, false);
      for (const std::vector<float>& y : alone)
        EXPECT_TRUE(std::none_of(y.begin(), y.end(), [](float v) { return std::isnan(v); }))
            << "unwritten outputs, " << type_name(t) << " rows " << rows;
      for (const cuda::ImmaDecodeShape shape : {cuda::ImmaDecodeShape{}, cuda::ImmaDecodeShape{1, 0},
                                                cuda::ImmaDecodeShape{2, 0}, cuda::ImmaDecodeShape{4, 0},
                                                cuda::ImmaDecodeShape{1, 3}, cuda::ImmaDecodeShape{2, 3}}) {
        const std::vector<std::vector<float>> together = run(shape, true);
        for (size_t i = 0; i < alone.size(); ++i)
          EXPECT_EQ(0, std::memcmp(alone[i].data(), together[i].data(), y_bytes[i]))
              << type_name(t) << " rows " << rows << " weight " << i << ", groups " << shape.groups_per_block
              << ", blocks an SM " << shape.blocks_per_sm;
      }
      for (void* p : yd) gpu().release(p);
      gpu().release(scratch);
      gpu().release(xd);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Q8_K activations written by the norm kernels (CudaBackend's fuse_quantize)

// `steps` equal steps on the graph backend between two stats: the first captured at first sight
// (or run op by op first when a scratch buffer had to grow), the rest replayed. Returns how many
// of them called the ops (op by op or captured).
int64_t expect_captured_then_replayed(const CudaGraphStats& before, const CudaGraphStats& after, int steps, int rows) {
  const int64_t called = (after.direct - before.direct) + (after.captured - before.captured);
  EXPECT_EQ(called + after.replayed - before.replayed, steps) << "rows " << rows;
  EXPECT_GE(after.replayed - before.replayed, steps - 2) << "rows " << rows;
  return called;
}

// prepare() then sequence() once, run directly (in_steps 0), or in_steps times with sequence()
// as a step (captured at first sight or run op by op first, then replayed).
template <class P, class S>
void run_as_steps(Backend& be, int in_steps, P& prepare, S& sequence) {
  if (in_steps == 0) {
    prepare();
    sequence();
  }
  for (int i = 0; i < in_steps; ++i) {
    prepare();
    StepScope step(be);
    sequence();
  }
}

// The buffers of bufs (each {p, n}) at the pointers `order`, downloaded in that order; then
// every buffer of bufs released.
template <class Buf>
std::vector<std::vector<float>> download_and_release(Backend& be, const std::vector<Buf>& bufs,
                                                     std::initializer_list<float*> order) {
  std::vector<std::vector<float>> out;
  for (float* p : order)
    for (const Buf& b : bufs)
      if (b.p == p) {
        out.emplace_back(b.n);
        be.download(out.back().data(), p, b.n * sizeof(float));
      }
  for (const Buf& b : bufs) be.release(b.p);
  return out;
}

// A weight of n_out rows repeating `period` random ones (make_weight is slow at 17408 x 5120).
HostWeight tiled_weight(GgmlType t, int64_t n_in, int64_t n_out, int period, uint64_t seed) {
  const HostWeight base = make_weight(t, n_in, period, seed);
  HostWeight hw{t, n_in, n_out, base.row_bytes, {}, {}};
  hw.bytes.resize(hw.row_bytes * size_t(n_out));
  for (int64_t o = 0; o < n_out; ++o)
    std::memcpy(hw.bytes.data() + size_t(o) * hw.row_bytes, base.bytes.data() + size_t(o % period) * hw.row_bytes,
                hw.row_bytes);
  return hw;
}

// The fused norm + Q8_K kernel (norm_rope.cu's rms_norm_q8k_k) launched directly, for dims of
// one super-block up to 32768 (17408 and 32768: more super-blocks than a block has warps), rows
// 1 .. 32 (padding rows in both layouts), with and without the residual add, and in place: its
// floats (and the sums) bit for bit those of the unfused norm (rms_norm_k); its Q8_K bytes, both
// layouts, those the products' own quantizers (imma_quantize, imma_quantize_q6k) write from the
// unfused floats, every byte of the buffer compared (both start as the same pattern); the
// unfused floats against the CPU backend within RmsNorm's bound. Outputs poisoned first.
TEST_F(CudaOps, FusedQ8kNormEqualsNormThenQuantizers) {
  Rng rng(9500);
  const float eps = 1e-6f;
  for (int dim : {256, 1280, 5120, 8192, 17408, 32768}) {
    const std::vector<float> w = rng.normals(size_t(dim), 0.5);
    Twin<float> wd(be(), w);
    for (int rows : {1, 3, 8, 16, 32}) {
      const size_t count = size_t(rows) * size_t(dim), q8_bytes = cuda::q8k_fused_bytes(dim, rows);
      const std::vector<float> x0 = rng.normals(count, 2.0), y0 = rng.normals(count, 1.0),
                               poison(count, kPoison);
      const std::vector<uint8_t> pattern(q8_bytes, 0xA5);
      for (bool add : {false, true}) {
        const std::string what = "dim=" + std::to_string(dim) + " rows=" + std::to_string(rows) +
                                 (add ? " add_rms_norm" : " rms_norm");
        // Side 0 of x_f / out_f: the CPU reference; side 1: the fused kernel.
        Twin<float> x_f(be(), x0), x_u(be(), x0), x_ip(be(), x0), y(be(), y0), out_f(be(), poison),
            out_u(be(), poison);
        Twin<uint8_t> q8_f(be(), pattern), q8_ref(be(), pattern), q8_ip(be(), pattern);
        ASSERT_TRUE(cuda::norm_q8k_supports(x_f[1], add ? y[1] : nullptr, size_t(dim), wd[1], rows, dim, out_f[1],
                                            size_t(dim)))
            << what;
        const size_t d = size_t(dim);
        const auto norm = [&](float* x, float* out, void* q8) {
          if (add) cuda::add_rms_norm(x, y[1], wd[1], rows, dim, eps, out, d, nullptr, q8);
          else cuda::rms_norm(x, d, wd[1], rows, dim, eps, out, d, nullptr, q8);
        };
        gpu().synchronize();
        norm(x_f[1], out_f[1], q8_f[1]);
        norm(x_u[1], out_u[1], nullptr);
        if (!add) norm(x_ip[1], x_ip[1], q8_ip[1]);  // in place, as the draft model's hidden norm
        uint8_t* const ref = q8_ref[1];
        cuda::imma_quantize(out_u[1], dim, rows, ref, nullptr);
        cuda::imma_quantize_q6k(out_u[1], dim, rows, ref + q8_bytes / 2, nullptr);  // q8k_fused_q6k_offset
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
        if (add) be_[0]->add_rms_norm(x_f[0], y[0], wd[0], rows, dim, eps, out_f[0], d);
        else be_[0]->rms_norm(x_f[0], d, wd[0], rows, dim, eps, out_f[0], d);

        const std::vector<float> got = out_f.get(1), want = out_u.get(1);
        Check("fused norm floats vs unfused " + what).exact(got, want);
        Check("fused norm sums vs unfused " + what).exact(x_f.get(1), x_u.get(1));
        if (!add) Check("fused norm in place vs unfused " + what).exact(x_ip.get(1), want);
        const std::vector<uint8_t> q8 = q8_f.get(1), q8_want = q8_ref.get(1);
        ASSERT_EQ(q8.size(), q8_want.size());
        size_t first_q4 = q8.size(), first_q6 = q8.size();
        for (size_t i = 0; i < q8.size(); ++i) {
          if (q8[i] == q8_want[i]) continue;
          size_t& first = i < q8_bytes / 2 ? first_q4 : first_q6;
          first = std::min(first, i);
        }
        EXPECT_EQ(first_q4, q8.size()) << what << ": Q4_K-layout bytes differ from imma_quantize's, first at byte "
                                       << first_q4;
        EXPECT_EQ(first_q6, q8.size()) << what << ": Q6_K-layout bytes differ from imma_quantize_q6k's, first at byte "
                                       << first_q6;
        if (!add) {
          EXPECT_TRUE(q8_ip.get(1) == q8) << what << ": in-place Q8_K bytes differ";
        }
        Check("norm (super-block path) vs CPU " + what).all(want, out_f.get(0), 2 * red_tol(dim) + 16 * kU, 0);
        Check("norm sums vs CPU " + what).all(x_u.get(1), x_f.get(0), 0, 0);
      }
    }
  }
}

// A 27B-shaped stretch of a decode step (dim 5120), every output downloaded: add_rms_norm, then
// the FFN's gate/up (Q4_K, 2 x 17408) and a Q6_K product sharing its output (both may use the
// norm's Q8_K); add() on that output, then a product of it (must see the sum: the record is
// stale); rms_norm into a second buffer and a Q6_K product of it; add_rms_norm into the first
// buffer, then a product of the second (another input: must quantize its own).
struct FusedQ8kSequence {
  static constexpr int kDim = 5120;
  Backend& be;
  Weight gate, up, q6;
  explicit FusedQ8kSequence(Backend& b, const std::vector<HostWeight>& hws) : be(b) {
    Weight* ws[] = {&gate, &up, &q6};
    for (int i = 0; i < 3; ++i)
      *ws[i] = Weight{hws[size_t(i)].type, hws[size_t(i)].n_in, hws[size_t(i)].n_out,
                      be.weight_data(hws[size_t(i)].bytes.data(), hws[size_t(i)].bytes.size()), hws[size_t(i)].row_bytes};
  }
  // in_steps: the sequence as a step, three times (run directly, captured, replayed); the
  // results of the last.
  std::vector<std::vector<float>> run(int rows, uint64_t seed, int in_steps = 0) {
    const size_t act = size_t(rows) * kDim;
    Rng rng(seed);
    const std::vector<float> x0 = make_activations(rows, kDim, seed), y = rng.normals(act, 1.0),
                             y2 = rng.normals(act, 0.5), nw = rng.normals(kDim, 0.5);
    struct Buf {
      float* p;
      size_t n;
    };
    std::vector<Buf> bufs;
    auto buffer = [&](size_t n) {
      bufs.push_back({static_cast<float*>(be.alloc(n * sizeof(float))), n});
      return bufs.back().p;
    };
    float *x = buffer(act), *yd = buffer(act), *y2d = buffer(act), *nwd = buffer(kDim), *u = buffer(act),
          *u2 = buffer(act);
    float *g = buffer(size_t(rows) * size_t(gate.n_out)), *upy = buffer(size_t(rows) * size_t(up.n_out)),
          *q6y = buffer(size_t(rows) * size_t(q6.n_out)), *t1 = buffer(size_t(rows) * size_t(gate.n_out)),
          *t2 = buffer(size_t(rows) * size_t(q6.n_out)), *t3 = buffer(size_t(rows) * size_t(gate.n_out));
    be.upload(yd, y.data(), act * sizeof(float));
    be.upload(y2d, y2.data(), act * sizeof(float));
    be.upload(nwd, nw.data(), kDim * sizeof(float));
    auto prepare = [&] {  // x afresh (the sequence adds to it), every output poisoned
      for (const Buf& b : bufs) {
        if (b.p == yd || b.p == y2d || b.p == nwd) continue;
        const std::vector<float> poison(b.n, kPoison);
        be.upload(b.p, poison.data(), b.n * sizeof(float));
      }
      be.upload(x, x0.data(), act * sizeof(float));
    };
    auto sequence = [&] {
      const float eps = 1e-6f;
      be.add_rms_norm(x, yd, nwd, rows, kDim, eps, u, kDim);
      const Weight* ws[] = {&gate, &up, &q6};
      float* ys[] = {g, upy, q6y};
      be.matmul_shared_input(ws, ys, 3, u, rows);
      be.add(u, y2d, int64_t(act));
      be.matmul(gate, u, rows, t1);
      be.rms_norm(x, kDim, nwd, rows, kDim, eps, u2, kDim);
      be.matmul(q6, u2, rows, t2);
      be.add_rms_norm(x, y2d, nwd, rows, kDim, eps, u, kDim);
      be.matmul(gate, u2, rows, t3);
    };
    run_as_steps(be, in_steps, prepare, sequence);
    return download_and_release(be, bufs, {x, u, u2, g, upy, q6y, t1, t2, t3});
  }
};

TEST(CudaFusedQ8k, NormQuantizedProductsEqualUnfused) {
  if (!have_gpu()) GTEST_SKIP() << kNoGpu;
  const int kDim = FusedQ8kSequence::kDim;
  const std::vector<HostWeight> hws = {tiled_weight(GgmlType::Q4_K, kDim, 17408, 61, 9100),
                                       tiled_weight(GgmlType::Q4_K, kDim, 17408, 59, 9101),
                                       tiled_weight(GgmlType::Q6_K, kDim, 1040, 53, 9102)};
  CudaBackend plain_be(0, /*fuse_quantize=*/false), fused_be(0, /*fuse_quantize=*/true);
  CudaGraphBackend graphs_be(0, /*fuse_quantize=*/true);
  FusedQ8kSequence plain(plain_be, hws), fused(fused_be, hws), graphs(graphs_be, hws);
  const char* names[] = {"x", "u", "u2", "gate", "up", "q6", "after add", "q6 of rms_norm", "other input"};
  for (int rows : {1, 2, 16, 33}) {
    const uint64_t seed = 9200 + uint64_t(rows);
    const auto want = plain.run(rows, seed);
    const int64_t uses0 = fused_be.fused_q8k_uses();
    const auto got = fused.run(rows, seed);
    // The gate/up and Q6_K groups of matmul_shared_input and the product after rms_norm; above
    // 32 rows the norms do not quantize.
    EXPECT_EQ(fused_be.fused_q8k_uses() - uses0, rows <= cuda::kNormQ8kMaxRows ? 3 : 0) << "rows " << rows;
    EXPECT_EQ(plain_be.fused_q8k_uses(), 0);
    const CudaGraphStats before = graphs_be.graph_stats();
    const auto stepped = graphs.run(rows, seed, 3);
    expect_captured_then_replayed(before, graphs_be.graph_stats(), 3, rows);
    ASSERT_EQ(want.size(), 9u);
    ASSERT_EQ(got.size(), 9u);
    ASSERT_EQ(stepped.size(), 9u);
    for (size_t i = 0; i < want.size(); ++i) {
      for (float v : want[i]) ASSERT_FALSE(std::isnan(v)) << names[i] << " rows " << rows << ": unwritten output";
      EXPECT_TRUE(same_bits(got[i], want[i])) << names[i] << " rows " << rows << ": fused vs unfused";
      EXPECT_TRUE(same_bits(stepped[i], want[i])) << names[i] << " rows " << rows << ": replayed step vs unfused";
    }
  }
}

// The other producers of a product's input that quantize their output (CudaBackend's
// fuse_quantize), 27B-shaped: swiglu (in place, as the model) into the FFN's down products
// (n_in 17408, Q4_K and Q6_K, one matmul_shared_input: two groups); gated_rms_norm (48 heads of
// 128) into a Q4_K ssm_out; mul_sigmoid (24 heads of 256, the gate interleaved [q_h | gate_h])
// into Q4_K and Q6_K attn_output products. Stale records: swiglu then add() on its output, and
// gated_rms_norm then add(), before the product (must see the sums); mul_sigmoid, then another
// op (gated_rms_norm of another buffer), then a product of the mul_sigmoid's output.
struct FusedQ8kProducersSequence {
  static constexpr int kFf = 17408, kAct = 6144, kGdnHeads = 48, kGdnDim = 128, kAttnHeads = 24, kAttnDim = 256;
  Backend& be;
  Weight down_q4, down_q6, out_q4, out_q6;
  explicit FusedQ8kProducersSequence(Backend& b, const std::vector<HostWeight>& hws) : be(b) {
    Weight* ws[] = {&down_q4, &down_q6, &out_q4, &out_q6};
    for (size_t i = 0; i < 4; ++i)
      *ws[i] = Weight{hws[i].type, hws[i].n_in, hws[i].n_out, be.weight_data(hws[i].bytes.data(), hws[i].bytes.size()),
                      hws[i].row_bytes};
  }
  // As FusedQ8kSequence::run: in_steps = 0 runs it directly, else as a step in_steps times.
  std::vector<std::vector<float>> run(int rows, uint64_t seed, int in_steps = 0) {
    const size_t ff = size_t(rows) * kFf, act = size_t(rows) * kAct;
    Rng rng(seed);
    // Inputs the sequence overwrites (re-uploaded before each run), then constant ones.
    const std::vector<float> g1_0 = make_activations(rows, kFf, seed), g2_0 = rng.normals(ff, 2.0),
                             d1_0 = make_activations(rows, kAct, seed + 1), d2_0 = rng.normals(act, 1.0),
                             a1_0 = make_activations(rows, kAct, seed + 2);
    const std::vector<float> u1 = rng.normals(ff, 1.0), u2 = rng.normals(ff, 1.0), yadd = rng.normals(ff, 0.5),
                             z = rng.normals(act, 2.0), wn = rng.normals(kGdnDim, 0.5), qg = rng.normals(2 * act, 3.0);
    struct Buf {
      float* p;
      size_t n;
      const std::vector<float>* init;  // null: an output, poisoned before each run
      bool once;                       // a constant input, uploaded once
    };
    std::vector<Buf> bufs;
    auto buffer = [&](size_t n, const std::vector<float>* init = nullptr, bool once = false) {
      bufs.push_back({static_cast<float*>(be.alloc(n * sizeof(float))), n, init, once});
      return bufs.back().p;
    };
    float *g1 = buffer(ff, &g1_0), *g2 = buffer(ff, &g2_0), *d1 = buffer(act, &d1_0), *d2 = buffer(act, &d2_0),
          *a1 = buffer(act, &a1_0);
    float *u1d = buffer(ff, &u1, true), *u2d = buffer(ff, &u2, true), *yaddd = buffer(ff, &yadd, true),
          *zd = buffer(act, &z, true), *wnd = buffer(kGdnDim, &wn, true), *qgd = buffer(2 * act, &qg, true);
    auto out = [&](const Weight& w) { return buffer(size_t(rows) * size_t(w.n_out)); };
    float *y_dq4 = out(down_q4), *y_dq6 = out(down_q6), *y_stale_sw = out(down_q6), *y_oq4 = out(out_q4),
          *y_stale_g = out(out_q6), *y_aq4 = out(out_q4), *y_aq6 = out(out_q6), *y_other = out(out_q4);
    for (const Buf& b : bufs)
      if (b.once) be.upload(b.p, b.init->data(), b.n * sizeof(float));
    auto prepare = [&] {
      for (const Buf& b : bufs) {
        if (b.once) continue;
        if (b.init != nullptr) {
          be.upload(b.p, b.init->data(), b.n * sizeof(float));
        } else {
          const std::vector<float> poison(b.n, kPoison);
          be.upload(b.p, poison.data(), b.n * sizeof(float));
        }
      }
    };
    auto sequence = [&] {
      const float eps = 1e-6f;
      be.swiglu(g1, u1d, rows, kFf, g1);
      const Weight* down[] = {&down_q4, &down_q6};
      float* down_y[] = {y_dq4, y_dq6};
      be.matmul_shared_input(down, down_y, 2, g1, rows);
      be.swiglu(g2, u2d, rows, kFf, g2);
      be.add(g2, yaddd, int64_t(ff));
      be.matmul(down_q6, g2, rows, y_stale_sw);
      be.gated_rms_norm(d1, zd, wnd, rows, kGdnHeads, kGdnDim, eps);
      be.matmul(out_q4, d1, rows, y_oq4);
      be.gated_rms_norm(d2, zd, wnd, rows, kGdnHeads, kGdnDim, eps);
      be.add(d2, d1, int64_t(act));
      be.matmul(out_q6, d2, rows, y_stale_g);
      be.mul_sigmoid(a1, kAttnDim, qgd + kAttnDim, 2 * kAttnDim, rows, kAttnHeads, kAttnDim);
      const Weight* outs[] = {&out_q4, &out_q6};
      float* outs_y[] = {y_aq4, y_aq6};
      be.matmul_shared_input(outs, outs_y, 2, a1, rows);
      be.mul_sigmoid(a1, kAttnDim, qgd + kAttnDim, 2 * kAttnDim, rows, kAttnHeads, kAttnDim);
      be.gated_rms_norm(d2, zd, wnd, rows, kGdnHeads, kGdnDim, eps);
      be.matmul(out_q4, a1, rows, y_other);
    };
    run_as_steps(be, in_steps, prepare, sequence);
    return download_and_release(be, bufs, {g1, g2, d1, d2, a1, y_dq4, y_dq6, y_stale_sw, y_oq4, y_stale_g, y_aq4, y_aq6, y_other});
  }
};

TEST(CudaFusedQ8k, SwigluGatedNormAndGateProductsEqualUnfused) {
  if (!have_gpu()) GTEST_SKIP() << kNoGpu;
  using Seq = FusedQ8kProducersSequence;
  const std::vector<HostWeight> hws = {tiled_weight(GgmlType::Q4_K, Seq::kFf, 5120, 61, 9300),
                                       tiled_weight(GgmlType::Q6_K, Seq::kFf, 1040, 53, 9301),
                                       tiled_weight(GgmlType::Q4_K, Seq::kAct, 5120, 59, 9302),
                                       tiled_weight(GgmlType::Q6_K, Seq::kAct, 1040, 47, 9303)};
  CudaBackend plain_be(0, /*fuse_quantize=*/false), fused_be(0, /*fuse_quantize=*/true);
  CudaGraphBackend graphs_be(0, /*fuse_quantize=*/true);
  Seq plain(plain_be, hws), fused(fused_be, hws), graphs(graphs_be, hws);
  const char* names[] = {"swiglu out",      "swiglu out (then add)", "gated norm out", "gated norm out (then add)",
                         "mul_sigmoid out", "down Q4_K",             "down Q6_K",      "down after add",
                         "ssm_out Q4_K",    "ssm_out after add",     "attn_out Q4_K",  "attn_out Q6_K",
                         "attn_out after another op"};
  for (int rows : {1, 2, 16, 33}) {
    const uint64_t seed = 9400 + uint64_t(rows);
    const auto want = plain.run(rows, seed);
    const int64_t uses0 = fused_be.fused_q8k_uses();
    const auto got = fused.run(rows, seed);
    // The two down groups, ssm_out after the gated norm, the two attn_out groups; none for the
    // stale records; above 32 rows nothing quantizes its output.
    EXPECT_EQ(fused_be.fused_q8k_uses() - uses0, rows <= cuda::kNormQ8kMaxRows ? 5 : 0) << "rows " << rows;
    EXPECT_EQ(plain_be.fused_q8k_uses(), 0);
    const int64_t graph_uses0 = graphs_be.fused_q8k_uses();
    const CudaGraphStats before = graphs_be.graph_stats();
    const auto stepped = graphs.run(rows, seed, 3);
    // A step run op by op and a capture call the ops (5 uses each); a replay does not.
    const int64_t called = expect_captured_then_replayed(before, graphs_be.graph_stats(), 3, rows);
    EXPECT_EQ(graphs_be.fused_q8k_uses() - graph_uses0, rows <= cuda::kNormQ8kMaxRows ? 5 * called : 0) << "rows " << rows;
    ASSERT_EQ(want.size(), std::size(names));
    ASSERT_EQ(got.size(), want.size());
    ASSERT_EQ(stepped.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      for (float v : want[i]) ASSERT_FALSE(std::isnan(v)) << names[i] << " rows " << rows << ": unwritten output";
      EXPECT_TRUE(same_bits(got[i], want[i])) << names[i] << " rows " << rows << ": fused vs unfused";
      EXPECT_TRUE(same_bits(stepped[i], want[i])) << names[i] << " rows " << rows << ": replayed step vs unfused";
    }
  }
}

bool has_nan(const std::vector<float>& v) {
  return std::any_of(v.begin(), v.end(), [](float f) { return std::isnan(f); });
}

// What the tile-layout tests below share: a weight of n_out outputs and a second one of 48 with
// the same n_in, each as GGUF rows (weight_data) and as upload_matrix stores it, 512 activation
// rows on the device, output buffers poisoned before every product.
struct TiledCase {
  static constexpr int kMaxRows = 512;
  static constexpr int64_t kSecondOut = 48;
  Backend& gpu;
  HostWeight hw, hw2;
  Weight w, w2, wt, wt2;
  std::vector<float> poison;
  float *xd = nullptr, *yd = nullptr, *yd2 = nullptr;

  TiledCase(Backend& b, GgmlType t, int64_t n_in, int64_t n_out, uint64_t seed, uint64_t seed2, uint64_t seed_x)
      : gpu(b),
        hw(make_weight(t, n_in, n_out, seed)),
        hw2(make_weight(t, n_in, kSecondOut, seed2)),
        w{t, n_in, n_out, b.weight_data(hw.bytes.data(), hw.bytes.size()), hw.row_bytes},
        w2{t, n_in, kSecondOut, b.weight_data(hw2.bytes.data(), hw2.bytes.size()), hw2.row_bytes},
        wt(b.upload_matrix(Weight{t, n_in, n_out, hw.bytes.data(), hw.row_bytes})),
        wt2(b.upload_matrix(Weight{t, n_in, kSecondOut, hw2.bytes.data(), hw2.row_bytes})),
        poison(size_t(kMaxRows) * size_t(n_out), kPoison) {
    const std::vector<float> x = make_activations(kMaxRows, n_in, seed_x);
    xd = static_cast<float*>(gpu.alloc(x.size() * sizeof(float)));
    gpu.upload(xd, x.data(), x.size() * sizeof(float));
    yd = static_cast<float*>(gpu.alloc(poison.size() * sizeof(float)));
    yd2 = static_cast<float*>(gpu.alloc(size_t(kMaxRows) * kSecondOut * sizeof(float)));
  }
  ~TiledCase() {
    gpu.release(yd2);
    gpu.release(yd);
    gpu.release(xd);
  }
  TiledCase(const TiledCase&) = delete;
  TiledCase& operator=(const TiledCase&) = delete;

  std::vector<float> get(const float* p, size_t n) const {
    std::vector<float> v(n);
    gpu.download(v.data(), p, n * sizeof(float));
    return v;
  }
  float* poisoned(float* p, size_t n) const {
    gpu.upload(p, poison.data(), n * sizeof(float));
    return p;
  }
  // x w^T over `rows` rows from the GGUF rows and from the tiles, each into poisoned outputs:
  // the same bits, every output written. Returns the rows' result.
  std::vector<float> expect_tiles_equal_rows(int rows, const std::string& where) const {
    const size_t n = size_t(rows) * size_t(w.n_out);
    gpu.matmul(w, xd, rows, poisoned(yd, n));
    const std::vector<float> want = get(yd, n);
    gpu.matmul(wt, xd, rows, poisoned(yd, n));
    const std::vector<float> got = get(yd, n);
    EXPECT_TRUE(same_bits(got, want)) << where;
    EXPECT_FALSE(has_nan(got)) << where << ": unwritten outputs";
    return want;
  }
  // The two tiled weights as one shared-input group give the first `want` and the second what
  // `second` (wt2 or w2) gives alone.
  void expect_shared_input(const Weight& second, int rows, const std::vector<float>& want, const std::string& where) {
    const size_t n = size_t(rows) * size_t(wt.n_out), n2 = size_t(rows) * kSecondOut;
    gpu.matmul(second, xd, rows, poisoned(yd2, n2));
    const std::vector<float> want2 = get(yd2, n2);
    const Weight* ws[2] = {&wt, &wt2};
    float* ys[2] = {poisoned(yd, n), poisoned(yd2, n2)};
    gpu.matmul_shared_input(ws, ys, 2, xd, rows);
    EXPECT_TRUE(same_bits(get(yd, n), want)) << "shared input, first, " << where;
    EXPECT_TRUE(same_bits(get(yd2, n2), want2)) << "shared input, second, " << where;
  }
  // Every prefill block shape of the integer GEMM on the tiles (x quantized to Q8_K) gives `want`.
  void expect_gemm_shapes(int rows, const std::vector<float>& want, const std::string& where) {
    const size_t n = size_t(rows) * size_t(wt.n_out);
    void* scratch = gpu.alloc(cuda::imma_scratch_bytes(wt, rows));
    gpu.synchronize();
    cuda::imma_quantize(xd, wt.n_in, rows, scratch, nullptr);
    for (cuda::ImmaGemmShape shape : {cuda::ImmaGemmShape::k128x64Warps4, cuda::ImmaGemmShape::k128x128Warps8,
                                      cuda::ImmaGemmShape::k128x128Warps16}) {
      gpu.upload(yd, poison.data(), n * sizeof(float));
      gpu.synchronize();
      cuda::imma_gemm_quantized(wt, yd, rows, scratch, nullptr, shape);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "shape " << int(shape);
      EXPECT_TRUE(same_bits(get(yd, n), want)) << "GEMM shape " << int(shape) << ", " << where;
    }
    gpu.release(scratch);
  }
  // An embedding lookup must refuse the tiled matrix (it would read tiles as rows).
  void expect_embed_refused() {
    int32_t* tok = static_cast<int32_t*>(gpu.alloc(sizeof(int32_t)));
    const int32_t zero = 0;
    gpu.upload(tok, &zero, sizeof(zero));
    EXPECT_ANY_THROW(gpu.embed(wt, tok, 1, yd)) << "an embedding lookup read " << type_name(wt.type) << " tiles as rows";
    gpu.release(tok);
  }
};

std::string shape_rows(int64_t n_in, int64_t n_out, int rows) {
  return std::to_string(n_in) + " x " + std::to_string(n_out) + ", rows " + std::to_string(rows);
}

// Q4_K matrices stored as 16-row tiles (CudaBackend::upload_matrix, quant/q4k_tiles.h) give the
// bits the GGUF rows give, through every kernel: the decode kernel at each width (rows 1; 2-8;
// 9-16; 17-32), the prefill GEMM (33+ rows) in each block shape, one- and multi-super-block
// slots (n_in 8448: 33 super-blocks), tail tiles (300, 37, 17, 129 outputs), a shared-input
// group of two tiled weights; outputs poisoned before each run. An embedding lookup of a tiled
// matrix is refused.
TEST_F(CudaOps, Q4kTiledWeightsEqualRows) {
  gpu_ = make_cuda_backend(0, true, /*tiles=*/true);  // upload_matrix tiles Q4_K (the default)
  struct Shape {
    int64_t n_in, n_out;
  };
  for (const Shape sh : {Shape{5120, 300}, Shape{17408, 37}, Shape{6144, 512}, Shape{256, 17}, Shape{8448, 129}}) {
    TiledCase tc(gpu(), GgmlType::Q4_K, sh.n_in, sh.n_out, 9100 + uint64_t(sh.n_in), 9300 + uint64_t(sh.n_in),
                 9200 + uint64_t(sh.n_in));
    ASSERT_TRUE(tc.wt.tiles && tc.wt2.tiles);
    for (int rows : {1, 2, 7, 8, 9, 16, 17, 32, 33, 100, 512}) {
      const std::string where = shape_rows(sh.n_in, sh.n_out, rows);
      const std::vector<float> want = tc.expect_tiles_equal_rows(rows, where);
      if (rows == 1 || rows == 16 || rows == 100) tc.expect_shared_input(tc.w2, rows, want, where);
      if (rows == 100 || rows == 512) tc.expect_gemm_shapes(rows, want, where);
    }
    tc.expect_embed_refused();
  }
}

// Q6_K matrices stored as 16-row tiles (CudaBackend::upload_matrix, quant/q6k_tiles.h) give the
// bits the GGUF rows give, through every kernel's tile variant: the decode kernel at each width
// (rows 1: the one-row variant; 2-8; 9-16; 17-24: four n-tiles, the fourth empty; 25-32), the
// prefill GEMM (33+ rows) in both block shapes (n_out 4500: 128 x 64 blocks on up to 144 SMs;
// the rest 64 x 64), slots of one super-block and of two and three (n_in 8704, 17408: odd
// super-blocks first in a slot), tail tiles (300, 37, 17, 129 outputs), a shared-input group of
// two tiled weights, and the GEMM alone (imma_gemm_quantized, x quantized by imma_quantize_q6k)
// on both layouts; outputs poisoned before each run. An embedding lookup of a tiled matrix is
// refused; with the tile layout off, upload_matrix keeps the rows, which the integer kernels
// still take.
TEST_F(CudaOps, Q6kTiledWeightsEqualRows) {
  struct Shape {
    int64_t n_in, n_out;
  };
  for (const Shape sh : {Shape{5120, 300}, Shape{17408, 37}, Shape{1024, 17}, Shape{8704, 129}, Shape{1024, 4500},
                         Shape{8704, 4500}}) {
    TiledCase tc(gpu(), GgmlType::Q6_K, sh.n_in, sh.n_out, 9400 + uint64_t(sh.n_in + sh.n_out),
                 9450 + uint64_t(sh.n_in), 9500 + uint64_t(sh.n_in));
    ASSERT_TRUE(tc.wt.tiles && tc.wt2.tiles);
    ASSERT_TRUE(cuda::imma_supports(tc.wt) && cuda::imma_supports(tc.w));
    for (int rows : {1, 2, 7, 8, 9, 16, 17, 24, 32, 33, 100, 512}) {
      const std::string where = shape_rows(sh.n_in, sh.n_out, rows);
      const std::vector<float> want = tc.expect_tiles_equal_rows(rows, where);
      if (rows == 1 || rows == 9 || rows == 24 || rows == 100) tc.expect_shared_input(tc.w2, rows, want, where);
      if (rows == 100 || rows == 512) {  // the GEMM alone, on tiles and on rows
        void* scratch = gpu().alloc(cuda::imma_scratch_bytes(tc.w, rows));
        gpu().synchronize();
        cuda::imma_quantize_q6k(tc.xd, sh.n_in, rows, scratch, nullptr);
        const size_t n = want.size();
        for (const Weight* wl : {&tc.wt, &tc.w}) {
          gpu().upload(tc.yd, tc.poison.data(), n * sizeof(float));
          gpu().synchronize();
          cuda::imma_gemm_quantized(*wl, tc.yd, rows, scratch, nullptr);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << where;
          EXPECT_TRUE(same_bits(tc.get(tc.yd, n), want)) << "GEMM alone on " << (wl->tiles ? "tiles, " : "rows, ") << where;
        }
        gpu().release(scratch);
      }
    }
    tc.expect_embed_refused();
  }
  auto rows_be = make_cuda_backend(0, false, /*tiles=*/false);
  const HostWeight hw = make_weight(GgmlType::Q6_K, 1024, 32, 9560);
  const Weight wr = rows_be->upload_matrix(Weight{GgmlType::Q6_K, 1024, 32, hw.bytes.data(), hw.row_bytes});
  EXPECT_FALSE(wr.tiles);
  EXPECT_TRUE(cuda::imma_supports(wr)) << "the integer kernels read Q6_K rows too";
}

// Q5_K matrices through upload_matrix (CudaBackend stores them as tiles, quant/q5k_tiles.h): the
// kernels' kQ5k variants at every width (rows 1; 2-8; 9-16; 17-32; the GEMM above) agree with
// each other where they must, bit for bit: every prefill block shape gives the bits of the
// default one (100 and 512 rows; n_in 8448 and 17408: two and three super-blocks a slot), a
// shared-input group of two tiled weights gives each its own product, no output is left
// unwritten (outputs poisoned first). With the tile layout off (make_cuda_backend's tiles)
// upload_matrix keeps Q5_K in GGUF rows, which the integer kernels refuse; an embedding lookup
// of a tiled matrix is refused. (Accuracy against the CPU: CudaMatmul.*/q5_K.)
TEST_F(CudaOps, Q5kTiledWeightsAcrossKernels) {
  struct Shape {
    int64_t n_in, n_out;
  };
  for (const Shape sh : {Shape{5120, 300}, Shape{17408, 37}, Shape{256, 17}, Shape{8448, 129}}) {
    TiledCase tc(gpu(), GgmlType::Q5_K, sh.n_in, sh.n_out, 9500 + uint64_t(sh.n_in), 9600 + uint64_t(sh.n_in),
                 9700 + uint64_t(sh.n_in));
    ASSERT_TRUE(tc.wt.tiles && tc.wt2.tiles);
    ASSERT_TRUE(cuda::imma_supports(tc.wt));
    for (int rows : {1, 2, 7, 8, 9, 16, 17, 24, 32, 33, 100, 512}) {
      const std::string where = shape_rows(sh.n_in, sh.n_out, rows);
      const size_t n = size_t(rows) * size_t(sh.n_out);
      gpu().matmul(tc.wt, tc.xd, rows, tc.poisoned(tc.yd, n));
      const std::vector<float> want = tc.get(tc.yd, n);
      EXPECT_FALSE(has_nan(want)) << where << ": unwritten outputs";
      if (rows == 1 || rows == 9 || rows == 24 || rows == 100) tc.expect_shared_input(tc.wt2, rows, want, where);
      if (rows == 100 || rows == 512) tc.expect_gemm_shapes(rows, want, where);
    }
    tc.expect_embed_refused();
  }
  auto rows_be = make_cuda_backend(0, false, /*tiles=*/false);
  const HostWeight hw = make_weight(GgmlType::Q5_K, 1024, 32, 9800);
  const Weight wr = rows_be->upload_matrix(Weight{GgmlType::Q5_K, 1024, 32, hw.bytes.data(), hw.row_bytes});
  EXPECT_FALSE(wr.tiles);
  EXPECT_FALSE(cuda::imma_supports(wr)) << "the integer kernels read Q5_K as tiles only";
}

// The Q8_K activations a norm writes beside its output (fuse_quantize) feed Q5_K tile products
// as they feed Q4_K ones: rms_norm, then a shared-input group of two Q5_K weights and a single
// product, the same bits as with every product quantizing its own input, for 1, 16 and 32 rows
// (the norm quantizes) and 33 (it does not), direct and replayed as a CUDA graph step.
TEST(CudaFusedQ8k, NormQuantizedQ5kProductsEqualUnfused) {
  if (!have_gpu()) GTEST_SKIP() << kNoGpu;
  constexpr int kDim = 5120;
  const HostWeight hws[3] = {make_weight(GgmlType::Q5_K, kDim, 96, 9900), make_weight(GgmlType::Q5_K, kDim, 40, 9901),
                             make_weight(GgmlType::Q5_K, kDim, 1024, 9902)};
  CudaBackend plain_be(0, /*fuse_quantize=*/false), fused_be(0, /*fuse_quantize=*/true);
  CudaGraphBackend graphs_be(0, /*fuse_quantize=*/true);
  auto run = [&](CudaBackend& be, int rows, int in_steps) {
    Weight w[3];
    for (int i = 0; i < 3; ++i) {
      w[i] = be.upload_matrix(Weight{GgmlType::Q5_K, kDim, hws[i].n_out, hws[i].bytes.data(), hws[i].row_bytes});
      EXPECT_TRUE(w[i].tiles);
    }
    Rng rng(9950 + uint64_t(rows));
    const std::vector<float> x0 = make_activations(rows, kDim, 9960 + uint64_t(rows)), nw = rng.normals(kDim, 0.5);
    float* x = static_cast<float*>(be.alloc(x0.size() * sizeof(float)));
    float* nwd = static_cast<float*>(be.alloc(nw.size() * sizeof(float)));
    float* u = static_cast<float*>(be.alloc(x0.size() * sizeof(float)));
    float* y[3];
    for (int i = 0; i < 3; ++i) y[i] = static_cast<float*>(be.alloc(size_t(rows) * size_t(w[i].n_out) * sizeof(float)));
    be.upload(x, x0.data(), x0.size() * sizeof(float));
    be.upload(nwd, nw.data(), nw.size() * sizeof(float));
    auto prepare = [&] {
      for (int i = 0; i < 3; ++i) {
        const std::vector<float> poison(size_t(rows) * size_t(w[i].n_out), kPoison);
        be.upload(y[i], poison.data(), poison.size() * sizeof(float));
      }
    };
    auto sequence = [&] {
      be.rms_norm(x, kDim, nwd, rows, kDim, 1e-6f, u, kDim);
      const Weight* ws[2] = {&w[0], &w[1]};
      be.matmul_shared_input(ws, y, 2, u, rows);
      be.rms_norm(x, kDim, nwd, rows, kDim, 1e-6f, u, kDim);
      be.matmul(w[2], u, rows, y[2]);
    };
    run_as_steps(be, in_steps, prepare, sequence);
    std::vector<std::vector<float>> out;
    for (int i = 0; i < 3; ++i) {
      out.emplace_back(size_t(rows) * size_t(w[i].n_out));
      be.download(out.back().data(), y[i], out.back().size() * sizeof(float));
      be.release(y[i]);
    }
    be.release(u);
    be.release(nwd);
    be.release(x);
    return out;
  };
  for (int rows : {1, 16, 32, 33}) {
    const auto want = run(plain_be, rows, 0);
    const int64_t uses0 = fused_be.fused_q8k_uses();
    const auto got = run(fused_be, rows, 0);
    EXPECT_EQ(fused_be.fused_q8k_uses() - uses0, rows <= cuda::kNormQ8kMaxRows ? 2 : 0) << "rows " << rows;
    const auto stepped = run(graphs_be, rows, 3);
    for (size_t i = 0; i < 3; ++i) {
      const std::string what = "product " + std::to_string(i) + " rows " + std::to_string(rows);
      for (float v : want[i]) ASSERT_FALSE(std::isnan(v)) << what << ": unwritten";
      EXPECT_TRUE(same_bits(got[i], want[i])) << what << ": fused vs unfused";
      EXPECT_TRUE(same_bits(stepped[i], want[i])) << what << ": replayed step";
    }
  }
}

// IQ4_XS matrices: upload_matrix stores them as tiles (quant/iq4xs_tiles.h) where the integer
// kernels take them, which then take their products; with the tile layout off
// (make_cuda_backend's tiles), rows, which stay on the f16 tensor-core kernel and still
// compute the product (within AgainstExactAndCpu's f16 bound of the exact one). An embedding
// lookup of a tiled matrix is refused.
TEST_F(CudaOps, Iq4xsTilesOnlyWhereTheIntegerKernelsReadThem) {
  const int64_t n_in = 1024, n_out = 40;
  const int rows = 3;
  const HostWeight hw = make_weight(GgmlType::IQ4_XS, n_in, n_out, 9400);
  const Weight host{GgmlType::IQ4_XS, n_in, n_out, hw.bytes.data(), hw.row_bytes};
  auto rows_be = make_cuda_backend(0, true, /*tiles=*/false);
  const Weight wt = gpu().upload_matrix(host), wr = rows_be->upload_matrix(host);
  ASSERT_TRUE(wt.tiles && cuda::imma_supports(wt));
  ASSERT_TRUE(!wr.tiles && !cuda::imma_supports(wr) && cuda::mma_supports(wr));
  const std::vector<float> x = make_activations(rows, n_in, 9401);
  std::vector<float> y[2];
  int side = 0;
  for (auto [be, w] : {std::pair<Backend*, Weight>{&gpu(), wt}, std::pair<Backend*, Weight>{rows_be.get(), wr}}) {
    float* xd = static_cast<float*>(be->alloc(x.size() * sizeof(float)));
    float* yd = static_cast<float*>(be->alloc(size_t(rows) * n_out * sizeof(float)));
    be->upload(xd, x.data(), x.size() * sizeof(float));
    const std::vector<float> poison(size_t(rows) * n_out, kPoison);
    be->upload(yd, poison.data(), poison.size() * sizeof(float));
    be->matmul(w, xd, rows, yd);
    y[side].resize(poison.size());
    be->download(y[side++].data(), yd, poison.size() * sizeof(float));
    if (be == &gpu()) {
      int32_t* tok = static_cast<int32_t*>(be->alloc(sizeof(int32_t)));
      const int32_t zero = 0;
      be->upload(tok, &zero, sizeof(zero));
      EXPECT_ANY_THROW(be->embed(w, tok, 1, yd)) << "an embedding lookup read IQ4_XS tiles as rows";
      be->release(tok);
    }
    be->release(yd);
    be->release(xd);
  }
  const std::vector<double> e = activation_rounding(GgmlType::IQ4_XS, x, rows, n_in);
  for (int s = 0; s < 2; ++s) {
    Check c(std::string("matmul iq4_xs ") + (s == 0 ? "tiles" : "rows (f16 kernel)") + " vs exact");
    for (int r = 0; r < rows; ++r)
      for (int64_t o = 0; o < n_out; ++o) {
        double ref = 0, mag = 0, abs_sum = 0, act = 0;
        for (int64_t k = 0; k < n_in; ++k) {
          const double wk = hw.W[size_t(o * n_in + k)], xk = x[size_t(r * n_in + k)];
          ref += wk * xk, mag += std::fabs(wk * xk), abs_sum += std::fabs(wk) + std::fabs(xk);
          act += std::fabs(wk) * e[size_t(r * n_in + k)];
        }
        // The f16 kernel's bound, or the integer kernels' (8-bit activations), as AgainstExactAndCpu.
        const double tol = s == 1 ? mag * (0x1p-10 + (double(n_in) / 16 + 16) * 0x1p-23) + 0x1p-25 * abs_sum + 1e-30
                                  : 8 * red_tol(n_in) * (mag + act) + act * 1.01 + 1e-30;
        c.add(y[s][size_t(r) * n_out + o], ref, tol, size_t(r) * n_out + o);
      }
  }
}

// ---------------------------------------------------------------------------------------------
// Q8_0 on integer tensor cores (imma_q80.cu, imma_q80_gemm.cu; weights as quant/q80_tiles.h)

// The Q8_0 products' activation quantizer (imma_quantize_q80) writes the CPU's Q8_0 blocks (what
// quantize_activation_row gives a Q8_0 weight's product): every int8 value and every block scale
// (the f16 the CPU stores, widened) equal, for rows of every scale (make_activations: 1e-2 ..
// 1e2, a zero row), rows 1 .. 40 (padding rows zeros with zero scales) and, in row 0, blocks
// with a tie at the max, exact halves (x id = k + 0.5: rounded away from zero), one nonzero
// element, values whose scale underflows f16 (d = 0 stored, nonzero quants) and one that
// overflows it (inf).
TEST_F(CudaOps, Q80ActivationsAreTheCpuBytes) {
  for (const auto& [rows, n_in] : {std::pair<int, int64_t>{1, 256}, {7, 1024}, {16, 5120}, {33, 512}, {40, 17408}}) {
    std::vector<float> x = make_activations(rows, n_in, 8100 + uint64_t(rows));
    float* b = x.data();  // row 0's blocks 0..5
    for (int k = 0; k < 32; ++k) b[k] = k % 2 ? 3.0f : -3.0f;                    // tie: -3 first
    for (int k = 0; k < 32; ++k) b[32 + k] = k == 0 ? 127.0f : float(k % 7) - 3.5f;  // d = 1: halves
    for (int k = 0; k < 32; ++k) b[64 + k] = k == 17 ? 1e-3f : 0.0f;             // one nonzero
    for (int k = 0; k < 32; ++k) b[96 + k] = 1e-30f * float(k - 13);              // f16(d) = 0
    for (int k = 0; k < 32; ++k) b[128 + k] = 1e8f * float(k - 20);               // f16(d) = inf
    for (int k = 0; k < 32; ++k) b[160 + k] = float(k) * 0.25f - 4.0f;
    float* xd = static_cast<float*>(gpu().alloc(x.size() * sizeof(float)));
    gpu().upload(xd, x.data(), x.size() * sizeof(float));
    const size_t bytes = cuda::imma_q80_scratch_bytes(n_in, rows);
    void* scratch = gpu().alloc(bytes);
    const std::vector<uint8_t> pattern(bytes, 0xA5);  // so that unwritten bytes show
    gpu().upload(scratch, pattern.data(), bytes);
    gpu().synchronize();
    cuda::imma_quantize_q80(xd, n_in, rows, scratch, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const int rows_pad = (rows + 7) / 8 * 8;
    const int64_t n_blk = n_in / 32;
    std::vector<int8_t> q(size_t(rows_pad) * size_t(n_in));
    std::vector<float> d(size_t(n_blk) * size_t(rows_pad));
    gpu().download(q.data(), scratch, q.size());
    gpu().download(d.data(), static_cast<uint8_t*>(scratch) + cuda::imma_q80_scales_offset(n_in, rows),
                   d.size() * sizeof(float));
    std::vector<uint8_t> cpu(activation_row_size(GgmlType::Q8_0, n_in));
    int64_t bad = 0;
    std::string first;
    for (int r = 0; r < rows_pad; ++r) {
      if (r < rows) quantize_activation_row(GgmlType::Q8_0, x.data() + size_t(r) * size_t(n_in), cpu.data(), n_in);
      else std::fill(cpu.begin(), cpu.end(), uint8_t(0));
      for (int64_t k = 0; k < n_blk; ++k) {
        const uint8_t* blk = cpu.data() + 34 * size_t(k);
        uint16_t h;
        std::memcpy(&h, blk, 2);
        const float got_d = d[(size_t(k / 8) * size_t(rows_pad) + size_t(r)) * 8 + size_t(k % 8)];
        bool same = float_bits(got_d) == float_bits(f16_to_f32(h));
        for (int j = 0; j < 32; ++j) same = same && q[size_t(r) * size_t(n_in) + 32 * size_t(k) + size_t(j)] == int8_t(blk[2 + j]);
        if (!same && bad++ == 0)
          first = "row " + std::to_string(r) + " block " + std::to_string(k) + " (scale " + std::to_string(got_d) +
                  " vs " + std::to_string(f16_to_f32(h)) + ")";
      }
    }
    EXPECT_EQ(bad, 0) << rows << " x " << n_in << ": " << bad << " blocks differ from the CPU's, first " << first;
    std::cout << "[cuda-err] Q8_0 activations " << std::left << std::setw(40)
              << (std::to_string(rows) + " x " + std::to_string(n_in)) << std::right
              << (bad == 0 ? " bytes equal" : "  FAILED") << "\n";
    gpu().release(scratch);
    gpu().release(xd);
  }
}

// Q8_0 matrices stored as tiles (upload_matrix): groups sharing an input (matmul_shared_input:
// one quantization and shared launches, five Q8_0 weights of one n_in so more than one launch,
// mixed with Q4_K tiles, another n_in and a Q8_0 weight of 992 inputs, which stays in GGUF rows
// on the f16 kernel) give each output its own matmul's bits at every kernel width (1; 2-8; 9-16;
// 17-32; the GEMM above); every prefill block shape gives the default's bits (one and two
// super-blocks a slot, row and output tails); an embedding lookup of a tiled matrix is refused.
// Outputs poisoned before each run.
TEST_F(CudaOps, Q80TiledGroupsAndGemmShapes) {
  struct Spec {
    GgmlType t;
    int64_t n_in, n_out;
  };
  const std::vector<Spec> specs = {{GgmlType::Q8_0, 1024, 45}, {GgmlType::Q8_0, 1024, 130}, {GgmlType::Q4_K, 1024, 37},
                                   {GgmlType::Q8_0, 1024, 16}, {GgmlType::Q8_0, 2048, 20},  {GgmlType::Q8_0, 1024, 3},
                                   {GgmlType::Q8_0, 992, 9},   {GgmlType::Q8_0, 1024, 7}};
  std::vector<Weight> ws;
  for (size_t i = 0; i < specs.size(); ++i) {
    const HostWeight hw = make_weight(specs[i].t, specs[i].n_in, specs[i].n_out, 8300 + i);
    ws.push_back(gpu().upload_matrix(Weight{hw.type, hw.n_in, hw.n_out, hw.bytes.data(), hw.row_bytes}));
    EXPECT_EQ(ws.back().tiles, specs[i].n_in % 256 == 0) << "weight " << i;
  }
  auto get = [&](float* p, size_t n) {
    std::vector<float> v(n);
    gpu().download(v.data(), p, n * sizeof(float));
    return v;
  };
  for (int rows : {1, 3, 8, 9, 16, 17, 32, 40, 300}) {
    const std::vector<float> x = make_activations(rows, 2048, 8400 + uint64_t(rows));
    float* xd = static_cast<float*>(gpu().alloc(x.size() * sizeof(float)));
    gpu().upload(xd, x.data(), x.size() * sizeof(float));
    std::vector<float*> sep, grp;
    std::vector<const Weight*> wp;
    for (const Weight& w : ws) {
      const std::vector<float> poison(size_t(rows) * size_t(w.n_out), kPoison);
      for (auto* v : {&sep, &grp}) {
        v->push_back(static_cast<float*>(gpu().alloc(poison.size() * sizeof(float))));
        gpu().upload(v->back(), poison.data(), poison.size() * sizeof(float));
      }
      wp.push_back(&w);
      gpu().matmul(w, xd, rows, sep.back());
    }
    gpu().matmul_shared_input(wp.data(), grp.data(), int(ws.size()), xd, rows);
    for (size_t i = 0; i < ws.size(); ++i) {
      const size_t n = size_t(rows) * size_t(ws[i].n_out);
      const std::vector<float> a = get(sep[i], n), b = get(grp[i], n);
      std::ostringstream name;
      name << "matmul_shared_input " << type_name(ws[i].type) << (ws[i].tiles ? " tiles " : " ") << ws[i].n_in
           << "x" << ws[i].n_out << " rows=" << rows << " vs its own matmul";
      Check(name.str()).exact(b, a);
      EXPECT_TRUE(std::none_of(a.begin(), a.end(), [](float v) { return std::isnan(v); })) << name.str();
      gpu().release(sep[i]);
      gpu().release(grp[i]);
    }
    gpu().release(xd);
  }

  struct Case {
    int64_t n_in, n_out;
    int rows;
  };
  uint64_t seed = 8500;
  for (const Case c : {Case{512, 300, 100}, Case{1024, 129, 257}, Case{8448, 37, 70}, Case{2304, 256, 512}}) {
    const HostWeight hw = make_weight(GgmlType::Q8_0, c.n_in, c.n_out, seed++);
    const std::vector<float> x = make_activations(c.rows, c.n_in, seed++);
    const Weight w = gpu().upload_matrix(Weight{GgmlType::Q8_0, c.n_in, c.n_out, hw.bytes.data(), hw.row_bytes});
    ASSERT_TRUE(w.tiles);
    float* xd = static_cast<float*>(gpu().alloc(x.size() * sizeof(float)));
    gpu().upload(xd, x.data(), x.size() * sizeof(float));
    const size_t n = size_t(c.rows) * size_t(c.n_out);
    const std::vector<float> poison(n, kPoison);
    float* yd = static_cast<float*>(gpu().alloc(n * sizeof(float)));
    gpu().upload(yd, poison.data(), n * sizeof(float));
    gpu().matmul(w, xd, c.rows, yd);
    const std::vector<float> want = get(yd, n);
    EXPECT_TRUE(std::none_of(want.begin(), want.end(), [](float v) { return std::isnan(v); })) << "unwritten outputs";
    void* scratch = gpu().alloc(cuda::imma_scratch_bytes(w, c.rows));
    gpu().synchronize();
    cuda::imma_quantize_q80(xd, c.n_in, c.rows, scratch, nullptr);
    for (cuda::ImmaGemmShape shape : {cuda::ImmaGemmShape::kAuto, cuda::ImmaGemmShape::k128x64Warps4,
                                      cuda::ImmaGemmShape::k128x128Warps8, cuda::ImmaGemmShape::k128x128Warps16}) {
      gpu().upload(yd, poison.data(), n * sizeof(float));
      gpu().synchronize();
      cuda::imma_gemm_quantized(w, yd, c.rows, scratch, nullptr, shape);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "shape " << int(shape);
      EXPECT_EQ(0, std::memcmp(get(yd, n).data(), want.data(), n * sizeof(float)))
          << "Q8_0 GEMM shape " << int(shape) << " differs from matmul, " << c.n_in << "x" << c.n_out << " rows " << c.rows;
    }
    int32_t* tok = static_cast<int32_t*>(gpu().alloc(sizeof(int32_t)));
    const int32_t zero = 0;
    gpu().upload(tok, &zero, sizeof(zero));
    EXPECT_ANY_THROW(gpu().embed(w, tok, 1, yd)) << "an embedding lookup read Q8_0 tiles as rows";
    gpu().release(tok);
    gpu().release(scratch);
    gpu().release(yd);
    gpu().release(xd);
  }
}

}  // namespace
}  // namespace df
