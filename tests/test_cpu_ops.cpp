// Op-level tests of the CPU backend: every op of the Backend interface (src/backend/backend.h)
// against the naive double-precision references in tests/support/reference_ops.*, with 1 and 2
// worker threads. Inputs live in backend memory (alloc/upload/download), outputs are poisoned with
// NaN before each call, and every buffer carries a guard region (and stride gaps) filled with a
// sentinel NaN pattern that must come back bit-for-bit unchanged.
//
// Tolerances. u = 2^-24 is the fp32 unit roundoff. For an fp32 reduction of n terms we allow
// red_tol(n) = (4 sqrt(n) + 8) u relative to the sum of |terms|: rounding errors of a length-n sum
// behave like a random walk (~sqrt(n) u), 4x margin, +8u for the surrounding multiplies and the
// final division/sqrt. The worst-case n u bound is never approached with random data, and
// blocked/SIMD accumulation is better still. Each test states what else it allows and why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iomanip>
#include <iterator>
#include <iostream>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "quant/dequant.h"
#include "quant/quantize.h"
#include "quant/types.h"
#include "support/reference_ops.h"
#include "util/error.h"

namespace df {
namespace {

constexpr double kU = 0x1p-24;  // fp32 unit roundoff

double red_tol(int64_t n) { return (4.0 * std::sqrt(double(n)) + 8.0) * kU; }

// ---------------------------------------------------------------------------------------------
// Small utilities: sentinels, random data, device buffers, comparison with diagnostics.

float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t float_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
const float kPoison = bits_to_float(0x7fc00000u);    // quiet NaN: outputs before the call
const float kSentinel = bits_to_float(0x7fa5a5a5u);  // NaN with a payload: gaps and guards
constexpr size_t kGuard = 37;                         // guard elements after every buffer

bool same_bits(float a, float b) { return float_bits(a) == float_bits(b); }

// Set to true locally to print every check's margin and the matmul statistics.
constexpr bool kVerbose = false;
bool verbose() { return kVerbose; }

struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  double normal(double sd = 1.0) { return std::normal_distribution<double>(0.0, sd)(g); }
  double uniform(double a, double b) { return std::uniform_real_distribution<double>(a, b)(g); }
  int64_t integer(int64_t a, int64_t b) { return std::uniform_int_distribution<int64_t>(a, b)(g); }
  uint8_t byte() { return uint8_t(integer(0, 255)); }
  std::vector<float> normals(size_t n, double sd = 1.0) {
    std::vector<float> v(n);
    for (auto& x : v) x = float(normal(sd));
    return v;
  }
};

std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// A buffer in backend memory with a host mirror of the same size (guard included by the caller).
template <class T>
class Dev {
 public:
  Dev(Backend& be, const std::vector<T>& host) : be_(be), n_(host.size()) {
    p_ = static_cast<T*>(be_.alloc(std::max<size_t>(n_, 1) * sizeof(T)));
    be_.upload(p_, host.data(), n_ * sizeof(T));
  }
  ~Dev() { be_.release(p_); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  T* p() { return p_; }
  std::vector<T> get() const {
    std::vector<T> h(n_);
    be_.download(h.data(), p_, n_ * sizeof(T));
    return h;
  }
  void set(const std::vector<T>& h) { be_.upload(p_, h.data(), h.size() * sizeof(T)); }

 private:
  Backend& be_;
  size_t n_;
  T* p_ = nullptr;
};

// Element-wise comparison that counts failures, keeps the first few with their location, and
// records the largest err/tol ratio (printed with DF_OPS_VERBOSE=1, useful to see the margin).
class Cmp {
 public:
  explicit Cmp(std::string what) : what_(std::move(what)) {}
  template <class Where>
  void operator()(double got, double ref, double tol, Where&& where) {
    ++n_;
    const double err = std::fabs(got - ref);
    const bool ok = err <= tol;  // NaN fails here
    const double ratio = ok ? (tol > 0 ? err / tol : 0.0) : (std::isnan(err) ? INFINITY : (tol > 0 ? err / tol : INFINITY));
    if (!ok) {
      ++bad_;
      if (first_.size() < 6) first_.push_back(describe(where(), got, ref, tol));
    }
    worst_ = std::max(worst_, ratio);
  }
  // Records a failure that is not a numeric comparison (e.g. a changed sentinel).
  void fail(const std::string& msg) {
    ++n_;
    ++bad_;
    if (first_.size() < 6) first_.push_back(msg);
  }
  int64_t bad() const { return bad_; }
  double worst() const { return worst_; }
  void report() {
    if (verbose())
      std::cout << "  [margin] " << what_ << ": " << n_ << " checked, max err/tol = " << std::setprecision(3) << worst_
                << (bad_ ? "  (FAILED)" : "") << "\n";
    if (bad_ == 0) return;
    std::ostringstream os;
    os << what_ << ": " << bad_ << " of " << n_ << " checks failed (max err/tol " << worst_ << "); first failures:";
    for (auto& f : first_) os << "\n    " << f;
    ADD_FAILURE() << os.str();
  }

 private:
  static std::string describe(const std::string& where, double got, double ref, double tol) {
    std::ostringstream os;
    os << std::setprecision(9) << where << ": got " << got << ", want " << ref << " (err " << std::fabs(got - ref)
       << ", tol " << tol << ")";
    return os.str();
  }
  std::string what_;
  int64_t n_ = 0, bad_ = 0;
  double worst_ = 0;
  std::vector<std::string> first_;
};

// Every element for which written(i) is false must keep its original bits.
void check_untouched(Cmp& cmp, const std::vector<float>& before, const std::vector<float>& after,
                     const std::function<bool(size_t)>& written, const char* buf) {
  for (size_t i = 0; i < before.size(); ++i)
    if (!written(i) && !same_bits(before[i], after[i])) {
      std::ostringstream os;
      os << buf << "[" << i << "] outside the op's output was changed (bits " << std::hex << float_bits(before[i])
         << " -> " << float_bits(after[i]) << ")";
      cmp.fail(os.str());
    }
}

std::string at(std::initializer_list<std::pair<const char*, int64_t>> kv) {
  std::ostringstream os;
  bool first = true;
  for (auto& [k, v] : kv) {
    os << (first ? "" : " ") << k << "=" << v;
    first = false;
  }
  return os.str();
}

class CpuOps : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    be_ = make_cpu_backend(GetParam());
    ASSERT_NE(be_, nullptr);
  }
  Backend& be() { return *be_; }
  std::unique_ptr<Backend> be_;
};

std::string threads_name(const ::testing::TestParamInfo<int>& i) {
  std::string s = "t";  // (not "t" + to_string: GCC 12 -Wrestrict false positive)
  s += std::to_string(i.param);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Memory ops.

TEST_P(CpuOps, MemoryOps) {
  EXPECT_NE(be().name(), nullptr);
  EXPECT_GT(std::strlen(be().name()), 0u);
  Rng rng(101);
  for (size_t bytes : {size_t(1), size_t(7), size_t(4096), size_t(1) << 20}) {
    SCOPED_TRACE(bytes);
    void* p = be().alloc(bytes);
    ASSERT_NE(p, nullptr);
    std::vector<uint8_t> h(bytes, 0xAB);
    be().download(h.data(), p, bytes);
    EXPECT_TRUE(std::all_of(h.begin(), h.end(), [](uint8_t b) { return b == 0; })) << "alloc must zero-initialise";
    std::vector<uint8_t> src(bytes);
    for (auto& b : src) b = rng.byte();
    be().upload(p, src.data(), bytes);
    void* q = be().alloc(bytes + 16);
    be().copy(q, p, bytes);
    if (bytes > 8) be().copy(static_cast<uint8_t*>(q) + bytes, static_cast<uint8_t*>(p) + 3, 5);  // offsets
    be().synchronize();
    std::vector<uint8_t> back(bytes), back2(bytes + 16);
    be().download(back.data(), p, bytes);
    be().download(back2.data(), q, bytes + 16);
    EXPECT_EQ(back, src);
    EXPECT_TRUE(std::equal(src.begin(), src.end(), back2.begin()));
    if (bytes > 8) { EXPECT_TRUE(std::equal(src.begin() + 3, src.begin() + 8, back2.begin() + bytes)); }
    EXPECT_TRUE(std::all_of(back2.begin() + bytes + (bytes > 8 ? 5 : 0), back2.end(), [](uint8_t b) { return b == 0; }));
    be().release(q);
    be().release(p);
  }
  // weight_data: the result must hold the file bytes.
  std::vector<uint8_t> file(1000);
  for (auto& b : file) b = rng.byte();
  const void* wd = be().weight_data(file.data(), file.size());
  ASSERT_NE(wd, nullptr);
  std::vector<uint8_t> back(file.size());
  be().download(back.data(), wd, file.size());
  EXPECT_EQ(back, file);
}

// ---------------------------------------------------------------------------------------------
// Weight types, written down here independently of quant/types.cpp.

enum class Act { F32, F16, BF16, Q8_0, Q8_1, Q8_K };  // activation format llama.cpp uses per weight type

struct TypeInfo {
  GgmlType t;
  const char* name;
  int block, bytes;
  Act act;
  std::vector<int> f16_scales;  // byte offsets of the f16 scale/min fields inside a block
  int m_off;                    // byte offset of the f16 min of Q4_1/Q5_1, else -1
};

const std::vector<TypeInfo>& all_types() {
  static const std::vector<TypeInfo> v = {
      {GgmlType::F32, "f32", 1, 4, Act::F32, {}, -1},
      {GgmlType::F16, "f16", 1, 2, Act::F16, {}, -1},
      {GgmlType::BF16, "bf16", 1, 2, Act::BF16, {}, -1},
      {GgmlType::Q8_0, "q8_0", 32, 34, Act::Q8_0, {0}, -1},
      {GgmlType::Q4_0, "q4_0", 32, 18, Act::Q8_0, {0}, -1},
      {GgmlType::Q4_1, "q4_1", 32, 20, Act::Q8_1, {0, 2}, 2},
      {GgmlType::Q5_0, "q5_0", 32, 22, Act::Q8_0, {0}, -1},
      {GgmlType::Q5_1, "q5_1", 32, 24, Act::Q8_1, {0, 2}, 2},
      {GgmlType::Q2_K, "q2_K", 256, 84, Act::Q8_K, {80, 82}, -1},
      {GgmlType::Q3_K, "q3_K", 256, 110, Act::Q8_K, {108}, -1},
      {GgmlType::Q4_K, "q4_K", 256, 144, Act::Q8_K, {0, 2}, -1},
      {GgmlType::Q5_K, "q5_K", 256, 176, Act::Q8_K, {0, 2}, -1},
      {GgmlType::Q6_K, "q6_K", 256, 210, Act::Q8_K, {208}, -1},
      {GgmlType::IQ4_NL, "iq4_nl", 32, 18, Act::Q8_0, {0}, -1},
      {GgmlType::IQ4_XS, "iq4_xs", 256, 136, Act::Q8_K, {0}, -1},
  };
  return v;
}

bool is_float_type(const TypeInfo& ti) { return ti.block == 1; }

// A weight matrix: its bytes and its exact values (what dequantization gives) in double.
struct HostWeight {
  const TypeInfo* ti = nullptr;
  int64_t n_in = 0, n_out = 0;
  size_t row_bytes = 0;
  std::vector<uint8_t> bytes;
  std::vector<double> W;      // n_out × n_in
  std::vector<double> m_blk;  // Q4_1/Q5_1: the min of each 32-block (n_out × n_in/32)
  bool quantized_by_quantize_row = false;
};

enum class WeightGen { Quantize, RandomBlocks };

void put_f16(uint8_t* p, double v) {
  const uint16_t h = ref::f16_bits(v);
  std::memcpy(p, &h, 2);
}
double get_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return ref::f16_value(h);
}

HostWeight make_weight(const TypeInfo& ti, int64_t n_in, int64_t n_out, uint64_t seed, WeightGen gen) {
  Rng rng(seed);
  HostWeight hw;
  hw.ti = &ti;
  hw.n_in = n_in;
  hw.n_out = n_out;
  hw.row_bytes = size_t(n_in / ti.block) * ti.bytes;
  hw.bytes.resize(hw.row_bytes * n_out);
  hw.W.resize(size_t(n_in * n_out));
  if (ti.t == GgmlType::F32) {
    for (int64_t i = 0; i < n_in * n_out; ++i) {
      const float f = float(rng.normal(0.05));
      std::memcpy(&hw.bytes[size_t(i) * 4], &f, 4);
      hw.W[size_t(i)] = f;
    }
  } else if (ti.t == GgmlType::F16) {
    for (int64_t i = 0; i < n_in * n_out; ++i) {
      put_f16(&hw.bytes[size_t(i) * 2], rng.normal(0.05));
      hw.W[size_t(i)] = get_f16(&hw.bytes[size_t(i) * 2]);
    }
  } else if (ti.t == GgmlType::BF16) {
    for (int64_t i = 0; i < n_in * n_out; ++i) {
      const float f = float(rng.normal(0.05));
      const auto h = uint16_t(float_bits(f) >> 16);  // truncation gives some valid bf16 value
      std::memcpy(&hw.bytes[size_t(i) * 2], &h, 2);
      hw.W[size_t(i)] = ref::bf16_value(h);
    }
  } else {
    const bool quantize = gen == WeightGen::Quantize && can_quantize(ti.t);
    hw.quantized_by_quantize_row = quantize;
    std::vector<float> src(static_cast<size_t>(n_in));
    for (int64_t o = 0; o < n_out; ++o) {
      uint8_t* row = &hw.bytes[size_t(o) * hw.row_bytes];
      if (quantize) {
        const double sd = 0.02 * (1 + o % 3);
        for (auto& f : src) f = float(rng.normal(sd));
        if (o % 4 == 1) src[size_t(rng.integer(0, n_in - 1))] = float(8 * sd);  // an outlier
        quantize_row(ti.t, src.data(), row, n_in);
      } else {
        for (size_t b = 0; b < hw.row_bytes; ++b) row[b] = rng.byte();
        for (int64_t blk = 0; blk < n_in / ti.block; ++blk)
          for (int off : ti.f16_scales)  // normal f16 scales of either sign, |d| in [2^-11, 2^-9]
            put_f16(row + blk * ti.bytes + off, (rng.integer(0, 1) ? 1 : -1) * std::ldexp(rng.uniform(1, 4), -11));
      }
      std::vector<float> deq(static_cast<size_t>(n_in));
      dequantize_row(ti.t, row, deq.data(), n_in);
      for (int64_t k = 0; k < n_in; ++k) hw.W[size_t(o * n_in + k)] = deq[size_t(k)];
    }
  }
  if (ti.m_off >= 0) {
    const int64_t nb = n_in / ti.block;
    hw.m_blk.resize(size_t(n_out * nb));
    for (int64_t o = 0; o < n_out; ++o)
      for (int64_t b = 0; b < nb; ++b)
        hw.m_blk[size_t(o * nb + b)] = get_f16(&hw.bytes[size_t(o) * hw.row_bytes + b * ti.bytes + ti.m_off]);
  }
  return hw;
}

// ---------------------------------------------------------------------------------------------
// matmul

// Activation rows: N(0,1) scaled by 10^((r % 5) - 2) so the per-block activation scales vary over
// four decades; row 2 is all zeros (the Q8 scale is 0 there: the result must be exactly 0, not NaN).
std::vector<float> make_activations(int rows, int64_t n_in, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(rows * n_in));
  for (int r = 0; r < rows; ++r) {
    const double s = std::pow(10.0, (r % 5) - 2);
    for (int64_t k = 0; k < n_in; ++k) x[size_t(r * n_in + k)] = r == 2 ? 0.0f : float(rng.normal(s));
  }
  return x;
}

// Reference product and error model.
//
// The CPU matmul converts each activation row to the weight type's dot format (as llama.cpp does):
// Q8_0/Q8_1 (blocks of 32, x^ = q d, d = amax/127 stored as f16, Q8_1 also stores s = d sum(q) as
// f16), Q8_K (blocks of 256, float d = amax/127), or F16/BF16 for those weight types. The integer
// dot products are exact; the weights enter exactly (the reference uses dequantize_row's values).
// So the error is
//   e = sum_k W_k (x^_k - x_k)                         activation rounding, |x^_k - x_k| <= d/2
//     + sum_blocks (f16 rounding of d, of s)            <= 2^-11 relative per block
//     + fp32 accumulation                               <= red_tol(n) sum_k |W_k x_k|
// The rounding errors are independent and uniform (variance d^2/12, (2^-11 x)^2/3 for f16,
// (2^-8 x)^2/3 for bf16), so by the CLT the first two terms are ~Gaussian with standard deviation
// sigma = sqrt(sum_k W_k^2 var_k + sum_blocks var_blk). We require
//   |y - ref| <= 7 sigma + red_tol(n) sum_k |W_k x_k|
// (P(|N(0,1)| > 7) ~ 3e-12 per output). The worst-case bound sum_k |W_k| d_k / 2 ~ c sum|W||x| 2^-7
// would be ~20x looser for n = 1280 and could miss a corrupted block. The activation formats are
// assumed as in llama.cpp; an implementation using a finer format only makes errors smaller, one
// using Q8_K (256) where Q8_0 (32) is modelled makes them ~1.3x larger, still inside 7 sigma.
// Additionally, for 8-bit activations, the RMS of err/sigma over all outputs must be <= 2 (it is ~1
// when the activations are rounded to nearest; truncation shows up here). And for every type, a
// systematic gain error (e.g. quantizing with amax/128 but scaling back with amax/127: 0.8%) hides
// inside 7 sigma per output, so we fit y - ref = gain * ref over the full 33 x 257 products: rounding
// errors are unbiased and independent of ref, so gain ~ N(0, se) with se = sqrt(Var(sum_i err_i
// ref_i)) / sum_i ref_i^2 (variance computed exactly from the per-element rounding variances), and
// we require |gain| <= 6 se + 4u.
struct MatmulRef {
  std::vector<double> y, tol, sigma;  // rows × n_out
  double gain_var = 0;                // variance of sum_i err_i y_i over the whole product (see above)
};

MatmulRef matmul_reference(const HostWeight& hw, const std::vector<float>& x, int rows) {
  const int64_t n_in = hw.n_in, n_out = hw.n_out;
  const TypeInfo& ti = *hw.ti;
  MatmulRef ref;
  ref.y = ref::matmul(hw.W, n_out, n_in, to_double(x), rows);
  ref.tol.resize(ref.y.size());
  ref.sigma.resize(ref.y.size());
  const int ablk = ti.act == Act::Q8_K ? 256 : 32;
  for (int r = 0; r < rows; ++r) {
    const float* xr = &x[size_t(r * n_in)];
    std::vector<double> var(static_cast<size_t>(n_in)), amax_blk(static_cast<size_t>(n_in / ablk + 1), 0.0), xsum_blk(static_cast<size_t>(n_in / 32 + 1), 0.0);
    for (int64_t k = 0; k < n_in; ++k) {
      amax_blk[size_t(k / ablk)] = std::max(amax_blk[size_t(k / ablk)], std::fabs(double(xr[k])));
      xsum_blk[size_t(k / 32)] += xr[k];
    }
    for (int64_t k = 0; k < n_in; ++k) {
      const double a = std::fabs(double(xr[k]));
      switch (ti.act) {
        case Act::F32: var[size_t(k)] = 0; break;
        case Act::F16: var[size_t(k)] = std::pow(0x1p-11 * a, 2) / 3; break;
        case Act::BF16: var[size_t(k)] = std::pow(0x1p-8 * a, 2) / 3; break;
        default: var[size_t(k)] = std::pow(amax_blk[size_t(k / ablk)] / 127.0, 2) / 12; break;
      }
    }
    for (int64_t o = 0; o < n_out; ++o) {
      const double* w = &hw.W[size_t(o * n_in)];
      double v = 0, abs_sum = 0, blk_dot = 0;
      for (int64_t k = 0; k < n_in; ++k) {
        v += w[k] * w[k] * var[size_t(k)];
        abs_sum += std::fabs(w[k] * xr[k]);
        blk_dot += w[k] * xr[k];
        if ((k + 1) % 32 == 0 && (ti.act == Act::Q8_0 || ti.act == Act::Q8_1)) {
          v += std::pow(0x1p-11 * blk_dot, 2) / 3;  // f16 rounding of the activation scale d
          if (ti.act == Act::Q8_1 && !hw.m_blk.empty())  // f16 rounding of s, multiplied by the weight min
            v += std::pow(0x1p-11 * hw.m_blk[size_t(o * (n_in / 32) + k / 32)] * xsum_blk[size_t(k / 32)], 2) / 3;
          blk_dot = 0;
        }
      }
      const size_t i = size_t(r * n_out + o);
      ref.sigma[i] = std::sqrt(v);
      ref.tol[i] = 7 * ref.sigma[i] + red_tol(n_in) * abs_sum;
    }
    // sum_o err_ro y_ro = sum_k e_rk c_rk with c_rk = sum_o W_ok y_ro: the outputs of one row share
    // the activation rounding errors e_rk, so the variance is sum_k var_rk c_rk^2 (plus the per-block
    // scale terms), not sum_o sigma_ro^2 y_ro^2.
    std::vector<double> c(static_cast<size_t>(n_in), 0.0), cm(static_cast<size_t>(n_in / 32 + 1), 0.0);
    for (int64_t o = 0; o < n_out; ++o) {
      const double yo = ref.y[size_t(r * n_out + o)];
      for (int64_t k = 0; k < n_in; ++k) c[size_t(k)] += hw.W[size_t(o * n_in + k)] * yo;
      if (!hw.m_blk.empty())
        for (int64_t b = 0; b < n_in / 32; ++b) cm[size_t(b)] += hw.m_blk[size_t(o * (n_in / 32) + b)] * yo;
    }
    double blk = 0;
    for (int64_t k = 0; k < n_in; ++k) {
      ref.gain_var += var[size_t(k)] * c[size_t(k)] * c[size_t(k)];
      blk += double(xr[k]) * c[size_t(k)];
      if ((k + 1) % 32 == 0 && (ti.act == Act::Q8_0 || ti.act == Act::Q8_1)) {
        ref.gain_var += std::pow(0x1p-11 * blk, 2) / 3;
        if (ti.act == Act::Q8_1) ref.gain_var += std::pow(0x1p-11 * xsum_blk[size_t(k / 32)] * cm[size_t(k / 32)], 2) / 3;
        blk = 0;
      }
    }
  }
  return ref;
}

// Weights, activations and reference for one (type, generator, n_in), built once and shared by
// the 1- and 2-thread instances (gtest runs them back to back; a miss just rebuilds).
struct MatmulFixture {
  HostWeight hw;
  std::vector<float> x;
  MatmulRef ref;
};

const MatmulFixture& matmul_fixture(const TypeInfo& ti, WeightGen gen, int64_t n_in, uint64_t seed) {
  struct Entry {
    GgmlType t;
    WeightGen gen;
    int64_t n_in;
    uint64_t seed;
    std::unique_ptr<MatmulFixture> f;
  };
  static std::vector<Entry> cache;  // the fixtures of the most recent (type, generator)
  for (auto& e : cache)
    if (e.t == ti.t && e.gen == gen && e.n_in == n_in && e.seed == seed) return *e.f;
  if (!cache.empty() && (cache.front().t != ti.t || cache.front().gen != gen)) cache.clear();
  auto f = std::make_unique<MatmulFixture>();
  f->hw = make_weight(ti, n_in, 257, seed + uint64_t(n_in), gen);
  f->x = make_activations(33, n_in, seed * 7 + uint64_t(n_in));
  f->ref = matmul_reference(f->hw, f->x, 33);
  cache.push_back({ti.t, gen, n_in, seed, std::move(f)});
  return *cache.back().f;
}

class CpuMatmul : public ::testing::TestWithParam<std::tuple<int, int>> {
 protected:
  void SetUp() override { be_ = make_cpu_backend(std::get<1>(GetParam())); }
  const TypeInfo& ti() const { return all_types()[size_t(std::get<0>(GetParam()))]; }
  void run(WeightGen gen, uint64_t seed, const std::vector<int>& rows_list, const std::vector<int64_t>& out_list,
           const std::vector<int64_t>& in_list);
  std::unique_ptr<Backend> be_;
};

void CpuMatmul::run(WeightGen gen, uint64_t seed, const std::vector<int>& kRows, const std::vector<int64_t>& kOut,
                    const std::vector<int64_t>& kIn) {
  Backend& be = *be_;
  const bool eight_bit = ti().act != Act::F32 && ti().act != Act::F16 && ti().act != Act::BF16;
  Cmp cmp(std::string("matmul ") + ti().name);
  Cmp guard(std::string("matmul ") + ti().name + " guard");
  double z2 = 0, g_num = 0, g_den = 0, g_var = 0;  // g_var: summed over the three n_in
  int64_t nz = 0;
  for (int64_t n_in : kIn) {
    const MatmulFixture& fx = matmul_fixture(ti(), gen, n_in, seed);
    const HostWeight& hw = fx.hw;
    const std::vector<float>& x = fx.x;
    const MatmulRef& ref = fx.ref;
    if (std::find(kRows.begin(), kRows.end(), 33) != kRows.end() && std::find(kOut.begin(), kOut.end(), 257) != kOut.end())
      g_var += ref.gain_var;
    EXPECT_EQ(row_size(ti().t, n_in), hw.row_bytes) << "row_size disagrees with the block table";
    const void* wdata = be.weight_data(hw.bytes.data(), hw.bytes.size());
    Dev<float> dx(be, x);
    for (int rows : kRows)
      for (int64_t n_out : kOut) {
        Weight w;
        w.type = ti().t;
        w.n_in = n_in;
        w.n_out = n_out;
        w.data = wdata;  // the first n_out rows of the 257-row matrix
        w.row_bytes = hw.row_bytes;
        std::vector<float> y0(size_t(rows * n_out) + kGuard, kPoison);
        std::fill(y0.end() - kGuard, y0.end(), kSentinel);
        Dev<float> dy(be, y0);
        be.matmul(w, dx.p(), rows, dy.p());
        be.synchronize();
        const std::vector<float> y = dy.get();
        for (int r = 0; r < rows; ++r)
          for (int64_t o = 0; o < n_out; ++o) {
            const size_t ri = size_t(r * 257 + o);
            const double got = y[size_t(r * n_out + o)];
            cmp(got, ref.y[ri], ref.tol[ri],
                [&] { return at({{"n_in", n_in}, {"n_out", n_out}, {"rows", rows}, {"r", r}, {"o", o}}); });
            if (eight_bit && ref.sigma[ri] > 0 && std::isfinite(got)) {
              z2 += std::pow((got - ref.y[ri]) / ref.sigma[ri], 2);
              ++nz;
            }
            if (rows == 33 && n_out == 257 && std::isfinite(got)) {  // each product once
              g_num += (got - ref.y[ri]) * ref.y[ri];
              g_den += ref.y[ri] * ref.y[ri];
            }
          }
        check_untouched(guard, y0, y, [&](size_t i) { return i < size_t(rows * n_out); }, "y");
      }
  }
  cmp.report();
  guard.report();
  if (nz > 0) {
    const double rms = std::sqrt(z2 / double(nz));
    if (verbose()) std::cout << "  [stat] matmul " << ti().name << ": RMS(err/sigma) = " << rms << "\n";
    EXPECT_LE(rms, 2.0) << "activation rounding error is larger than round-to-nearest 8-bit quantization gives";
  }
  if (g_den > 0) {
    const double gain = g_num / g_den, se = std::sqrt(g_var) / g_den;
    if (verbose()) std::cout << "  [stat] matmul " << ti().name << ": gain " << gain << " (limit " << 6 * se + 4 * kU << ")\n";
    EXPECT_LE(std::fabs(gain), 6 * se + 4 * kU) << "systematic relative error (gain) of the products";
  }
}

// W from quantize_row (or own f16/bf16/f32 encoders); falls back to random blocks for types
// without a quantizer.
TEST_P(CpuMatmul, QuantizedWeights) {
  run(WeightGen::Quantize, 1000 + uint64_t(std::get<0>(GetParam())), {1, 2, 3, 7, 16, 33}, {1, 5, 64, 257},
      {256, 512, 1024 + 256});
}

// W from random bytes with sane f16 scales: every code point of the format occurs (e.g. -128 in
// Q8_0, all 6-bit scales of Q3_K, negative d). Block types only (float types are covered above).
class CpuMatmulBlocks : public CpuMatmul {};
TEST_P(CpuMatmulBlocks, RandomBlocks) {
  ASSERT_FALSE(is_float_type(ti()));
  run(WeightGen::RandomBlocks, 2000 + uint64_t(std::get<0>(GetParam())), {1, 3, 16, 33}, {1, 64, 257}, {256, 1280});
}

std::string matmul_name(const ::testing::TestParamInfo<std::tuple<int, int>>& i) {
  return std::string(all_types()[size_t(std::get<0>(i.param))].name) + "_t" + std::to_string(std::get<1>(i.param));
}

INSTANTIATE_TEST_SUITE_P(Types, CpuMatmul,
                         ::testing::Combine(::testing::Range(0, int(all_types().size())), ::testing::Values(1, 2)),
                         matmul_name);
INSTANTIATE_TEST_SUITE_P(Types, CpuMatmulBlocks,
                         ::testing::Combine(::testing::Range(3, int(all_types().size())), ::testing::Values(1, 2)),
                         matmul_name);  // all_types()[0..2] are f32, f16, bf16

// ---------------------------------------------------------------------------------------------
// embed: rows of the table, exactly as dequantized (the op is a lookup; no rounding allowed).

TEST_P(CpuOps, Embed) {
  const int64_t n_embd = 512, vocab = 41;
  const std::vector<int32_t> tokens = {0, 40, 7, 7, 13, 0, 39, 21, 1};
  for (const TypeInfo& ti : all_types()) {
    SCOPED_TRACE(ti.name);
    const HostWeight hw = make_weight(ti, n_embd, vocab, 77 + uint64_t(ti.t), WeightGen::RandomBlocks);
    Weight table;
    table.type = ti.t;
    table.n_in = n_embd;
    table.n_out = vocab;
    table.row_bytes = hw.row_bytes;
    table.data = be().weight_data(hw.bytes.data(), hw.bytes.size());
    Dev<int32_t> dtok(be(), tokens);
    const int rows = int(tokens.size());
    std::vector<float> o0(size_t(rows * n_embd) + kGuard, kPoison);
    std::fill(o0.end() - kGuard, o0.end(), kSentinel);
    Dev<float> dout(be(), o0);
    be().embed(table, dtok.p(), rows, dout.p());
    be().synchronize();
    const auto out = dout.get();
    Cmp cmp(std::string("embed ") + ti.name);
    for (int r = 0; r < rows; ++r)
      for (int64_t i = 0; i < n_embd; ++i)
        cmp(out[size_t(r * n_embd + i)], hw.W[size_t(tokens[size_t(r)] * n_embd + i)], 0.0,
            [&] { return at({{"row", r}, {"token", tokens[size_t(r)]}, {"i", i}}); });
    check_untouched(cmp, o0, out, [&](size_t i) { return i < size_t(rows * n_embd); }, "out");
    cmp.report();
  }
}

// ---------------------------------------------------------------------------------------------
// rms_norm: out = x (mean(x^2) + eps)^-1/2 w, with strides and in place.
// Tolerance |out - ref| <= |ref| (red_tol(dim)/2 + 4u): the relative error of the mean of squares
// is <= red_tol(dim), halved by the rsqrt, plus a few roundings in rsqrt and the two products.
// (An unrefined _mm_rsqrt_ps, ~1e-4 relative, would fail.)

struct NormCase {
  int n, dim;
  size_t x_stride, out_stride;
  bool in_place;
};

TEST_P(CpuOps, RmsNorm) {
  const NormCase cases[] = {
      {1, 1024, 1024, 1024, false}, {3, 256, 264, 300, false}, {5, 100, 101, 100, false},
      {4, 128, 512, 128, false},    {7, 256, 512, 512, true},  {2, 4096, 4096, 4096, true},
      {6, 5, 9, 5, false},          {3, 1, 1, 2, false},
  };
  Rng rng(11);
  for (const NormCase& c : cases) {
    SCOPED_TRACE(at({{"n", c.n}, {"dim", c.dim}, {"x_stride", int64_t(c.x_stride)}, {"out_stride", int64_t(c.out_stride)},
                     {"in_place", c.in_place}}));
    const double eps = 1e-6;
    std::vector<float> x(c.n * c.x_stride + kGuard, kSentinel);
    for (int i = 0; i < c.n; ++i) {
      // vector 1: zeros; vector 2: tiny (mean square 1e-8 << eps: eps must be added inside the rsqrt);
      // vector 3: large values.
      const double s = i == 2 ? 1e-4 : i == 3 ? 1e4 : 1.0;
      for (int d = 0; d < c.dim; ++d) x[i * c.x_stride + d] = i == 1 ? 0.0f : float(rng.normal(s));
    }
    std::vector<float> w(static_cast<size_t>(c.dim));
    for (auto& v : w) v = float(rng.uniform(-0.5, 1.5));
    std::vector<float> o0(c.n * c.out_stride + kGuard, kSentinel);
    for (int i = 0; i < c.n; ++i) std::fill_n(&o0[i * c.out_stride], c.dim, kPoison);
    Dev<float> dx(be(), x), dw(be(), w), dout(be(), o0);
    float* out = c.in_place ? dx.p() : dout.p();
    const size_t out_stride = c.in_place ? c.x_stride : c.out_stride;
    be().rms_norm(dx.p(), c.x_stride, dw.p(), c.n, c.dim, float(eps), out, out_stride);
    be().synchronize();
    const auto got = c.in_place ? dx.get() : dout.get();
    const auto& before = c.in_place ? x : o0;
    const auto xin = to_double(x), wd = to_double(w);
    Cmp cmp("rms_norm");
    std::vector<double> ref(static_cast<size_t>(c.dim));
    for (int i = 0; i < c.n; ++i) {
      ref::rms_norm(&xin[i * c.x_stride], wd.data(), c.dim, eps, ref.data());
      for (int d = 0; d < c.dim; ++d)
        cmp(got[i * out_stride + d], ref[size_t(d)], std::fabs(ref[size_t(d)]) * (red_tol(c.dim) / 2 + 4 * kU),
            [&] { return at({{"vector", i}, {"d", d}}); });
    }
    check_untouched(cmp, before, got, [&](size_t k) { return k < c.n * out_stride && k % out_stride < size_t(c.dim); },
                    "out");
    if (!c.in_place) {  // the input must be left alone
      const auto x_after = dx.get();
      check_untouched(cmp, x, x_after, [](size_t) { return false; }, "x");
    }
    cmp.report();
  }
}

// ---------------------------------------------------------------------------------------------
// add: x += y. fp32 addition is correctly rounded, and the double sum of two floats rounded to
// float is the same correctly rounded value, so the result must be exact.

TEST_P(CpuOps, Add) {
  Rng rng(12);
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(8), int64_t(31), int64_t(1000), int64_t(4099)}) {
    SCOPED_TRACE(n);
    std::vector<float> x(size_t(n) + kGuard, kSentinel), y(size_t(n) + kGuard, kSentinel);
    for (int64_t i = 0; i < n; ++i) {
      x[size_t(i)] = float(rng.normal(i % 3 == 0 ? 100 : 1));
      y[size_t(i)] = float(rng.normal(1e-3));
    }
    Dev<float> dx(be(), x), dy(be(), y);
    be().add(dx.p(), dy.p(), n);
    be().synchronize();
    const auto got = dx.get();
    Cmp cmp("add");
    for (int64_t i = 0; i < n; ++i) cmp(got[size_t(i)], double(float(double(x[size_t(i)]) + double(y[size_t(i)]))), 0.0, [&] { return at({{"i", i}}); });
    check_untouched(cmp, x, got, [&](size_t i) { return i < size_t(n); }, "x");
    check_untouched(cmp, y, dy.get(), [](size_t) { return false; }, "y");
    cmp.report();
  }
}

// ---------------------------------------------------------------------------------------------
// swiglu and mul_sigmoid. silu(g) u = g u / (1 + e^-g): error = that of e^-g (relative, attenuated
// by e^-g/(1+e^-g) <= 1) plus ~3 roundings. We allow 16u (~1e-6) relative: a libm expf (<1 ulp)
// or ggml's SIMD expf (~1.5 ulp) pass with a wide margin; a crude approximation (1e-4) fails.
// The absolute floor 1e-30 only covers results that underflow in fp32 (silu(-100) = -3.7e-42 is
// denormal; e^90 overflows so silu(-90) may come out as -0): nothing that size can matter. Gates include +-100, +-30, +-88 where a careless formula
// (e^g / (1 + e^g), or overflow of e^-g) gives NaN.

std::vector<float> gate_values(Rng& rng, size_t n) {
  const float specials[] = {0.0f, -0.0f, 100.0f, -100.0f, 30.0f, -30.0f, 88.0f, -88.0f, 1e-30f, -17.5f, 20.0f};
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = i % 13 == 5 ? specials[(i / 13) % std::size(specials)] : float(rng.normal(3.0));
  return g;
}

TEST_P(CpuOps, Swiglu) {
  Rng rng(13);
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(33), int64_t(4096 + 5)}) {
    SCOPED_TRACE(n);
    std::vector<float> gate = gate_values(rng, size_t(n)), up = rng.normals(static_cast<size_t>(n), 2.0);
    gate.resize(size_t(n) + kGuard, kSentinel);
    up.resize(size_t(n) + kGuard, kSentinel);
    std::vector<float> o0(size_t(n) + kGuard, kSentinel);
    std::fill_n(o0.begin(), n, kPoison);
    Dev<float> dg(be(), gate), du(be(), up), dout(be(), o0);
    be().swiglu(dg.p(), du.p(), 1, int(n), dout.p());
    be().synchronize();
    const auto got = dout.get();
    Cmp cmp("swiglu");
    for (int64_t i = 0; i < n; ++i) {
      const double ref = ref::silu(gate[size_t(i)]) * up[size_t(i)];
      cmp(got[size_t(i)], ref, 16 * kU * std::fabs(ref) + 1e-30,
          [&] { return at({{"i", i}}) + " gate=" + std::to_string(gate[size_t(i)]); });
    }
    check_untouched(cmp, o0, got, [&](size_t i) { return i < size_t(n); }, "out");
    check_untouched(cmp, gate, dg.get(), [](size_t) { return false; }, "gate");
    check_untouched(cmp, up, du.get(), [](size_t) { return false; }, "up");
    cmp.report();
  }
}

TEST_P(CpuOps, MulSigmoid) {
  struct Case {
    int rows, n;  // rows: vectors, in groups of `heads` (the op's rows x n_heads)
    size_t xs, gs;
    int heads = 1;
  };
  // (16, 256, 256, 512, 4) is the attention output gate: 4 rows x 4 heads vectors of head_dim,
  // the gate of head h at [q_h | gate_h] interleaved rows (stride 2 head_dim).
  const Case cases[] = {{1, 1, 1, 1}, {3, 7, 7, 9}, {16, 256, 256, 512, 4}, {2, 2051, 2060, 2051}};
  Rng rng(14);
  for (const Case& c : cases) {
    SCOPED_TRACE(at({{"rows", c.rows}, {"n", c.n}, {"x_stride", int64_t(c.xs)}, {"g_stride", int64_t(c.gs)}}));
    std::vector<float> x(c.rows * c.xs + kGuard, kSentinel), g(c.rows * c.gs + kGuard, kSentinel);
    for (int r = 0; r < c.rows; ++r) {
      const auto gv = gate_values(rng, size_t(c.n));
      for (int i = 0; i < c.n; ++i) {
        x[r * c.xs + i] = float(rng.normal(2.0));
        g[r * c.gs + i] = gv[size_t(i)];
      }
    }
    Dev<float> dx(be(), x), dg(be(), g);
    be().mul_sigmoid(dx.p(), c.xs, dg.p(), c.gs, c.rows / c.heads, c.heads, c.n);
    be().synchronize();
    const auto got = dx.get();
    Cmp cmp("mul_sigmoid");
    for (int r = 0; r < c.rows; ++r)
      for (int i = 0; i < c.n; ++i) {
        const double ref = double(x[r * c.xs + i]) * ref::sigmoid(g[r * c.gs + i]);
        cmp(got[r * c.xs + i], ref, 16 * kU * std::fabs(ref) + 1e-30,
            [&] { return at({{"r", r}, {"i", i}}) + " g=" + std::to_string(g[r * c.gs + i]); });
      }
    check_untouched(cmp, x, got, [&](size_t k) { return k < c.rows * c.xs && k % c.xs < size_t(c.n); }, "x");
    check_untouched(cmp, g, dg.get(), [](size_t) { return false; }, "g");
    cmp.report();
  }
}

// ---------------------------------------------------------------------------------------------
// rope_neox. Reference angles theta_i = pos theta^(-2i/n_rot) in double. Any fp32 implementation
// computes the angle with a relative error of up to (2i + ln(theta) + few) u (the frequency via
// powf(theta, -2i/n_rot) loses (2i/n_rot) ln(theta) u; via repeated multiplication, 2i u), which
// at pos = 100000 is up to ~0.1 rad for the fastest pairs. So per pair (a, b) we allow
//   |err| <= (dtheta_i + 8u) hypot(a, b),  dtheta_i = (2i + ln(theta) + 6) u theta_i,
// the error of rotating by a slightly wrong angle plus the roundings of cos/sin and the products.
// Small positions test the formula tightly; dims >= n_rot and everything outside the heads must
// be bit-identical.

struct RopeCase {
  int rows, n_heads, head_dim, n_rot;
  size_t head_stride, row_stride;
  float theta;
  std::vector<int32_t> pos;
};

TEST_P(CpuOps, RopeNeox) {
  const RopeCase cases[] = {
      // Qwen3.5 queries: [q_h | gate_h] interleaved (head_stride = 2 head_dim), partial rotary 64 of 256.
      {5, 8, 256, 64, 512, 8 * 512, 1e7f, {0, 1, 17, 65535, 100000}},
      // Qwen3.5 keys: contiguous heads, rows padded.
      {3, 2, 256, 64, 256, 512 + 16, 1e7f, {2, 99999, 31}},
      // Qwen3 dense: full rotary 128 of 128, theta 1e6.
      {4, 16, 128, 128, 128, 16 * 128, 1e6f, {3, 0, 99999, 4096}},
      // small odd layout
      {3, 3, 64, 32, 64, 200, 1e4f, {7, 12345, 1}},
  };
  Rng rng(15);
  for (const RopeCase& c : cases) {
    SCOPED_TRACE(at({{"head_dim", c.head_dim}, {"n_rot", c.n_rot}, {"head_stride", int64_t(c.head_stride)}}));
    std::vector<float> x(c.rows * c.row_stride + kGuard, kSentinel);
    for (int r = 0; r < c.rows; ++r)
      for (int h = 0; h < c.n_heads; ++h)
        for (size_t d = 0; d < c.head_stride && r * c.row_stride + h * c.head_stride + d < c.rows * c.row_stride; ++d)
          x[r * c.row_stride + h * c.head_stride + d] = float(rng.normal());
    Dev<float> dx(be(), x);
    Dev<int32_t> dpos(be(), c.pos);
    be().rope_neox(dx.p(), c.row_stride, c.head_stride, c.rows, c.n_heads, dpos.p(), c.n_rot, c.theta);
    be().synchronize();
    const auto got = dx.get();
    Cmp cmp("rope_neox");
    const int half = c.n_rot / 2;
    for (int r = 0; r < c.rows; ++r)
      for (int h = 0; h < c.n_heads; ++h) {
        const size_t base = r * c.row_stride + h * c.head_stride;
        std::vector<double> head(x.begin() + long(base), x.begin() + long(base) + c.head_dim);
        const std::vector<double> orig = head;
        ref::rope_neox(head.data(), c.n_rot, c.pos[size_t(r)], c.theta);
        for (int i = 0; i < half; ++i) {
          const double ang = c.pos[size_t(r)] * std::pow(double(c.theta), -2.0 * i / c.n_rot);
          const double dth = (2.0 * i + std::log(double(c.theta)) + 6) * kU * ang;
          const double tol = (dth + 8 * kU) * std::hypot(orig[size_t(i)], orig[size_t(i + half)]);
          for (int d : {i, i + half})
            cmp(got[base + size_t(d)], head[size_t(d)], tol,
                [&] { return at({{"row", r}, {"pos", c.pos[size_t(r)]}, {"head", h}, {"dim", d}}); });
        }
      }
    // Only the first n_rot dims of each head may change (the rest must keep their bits, which are
    // also the reference values).
    check_untouched(cmp, x, got,
                    [&](size_t k) {
                      if (k >= c.rows * c.row_stride) return false;
                      const size_t in_row = k % c.row_stride;
                      return in_row / c.head_stride < size_t(c.n_heads) && in_row % c.head_stride < size_t(c.n_rot);
                    },
                    "x");
    cmp.report();
  }
}

// ---------------------------------------------------------------------------------------------
// kv_store + attention over a paged cache, with f16 storage (the default: values rounded to
// nearest-even f16, checked bit-for-bit), f32 storage (exact copies) and q8_0 storage (each
// token row exactly the bytes quantize_row(Q8_0) writes: 34-byte blocks, f16 scale amax/127,
// int8 quants rounded half away from zero). The attention reference uses the values the stored
// bytes represent (for q8_0, q * d: exact in double and in float), so every type has the same
// tolerance: only the arithmetic differs, not the inputs.

struct PagedCache {
  GgmlType type = GgmlType::F16;
  int block_tokens = 16, n_head_kv = 0, head_dim = 0, n_phys = 0;
  std::vector<int32_t> table;      // logical block -> physical block (a shuffled, non-identity map)
  std::vector<uint8_t> k0, v0;     // initial raw contents: finite garbage (+-1000..30000)
  std::vector<double> kref, vref;  // logical [pos][kv head][dim], stored (rounded) values written so far
  std::vector<std::vector<uint8_t>> kraw, vraw;  // per logical position: the bytes its row must hold
  std::vector<bool> written;       // per logical position
  size_t tok() const { return size_t(n_head_kv) * head_dim; }
  size_t tok_bytes() const { return row_size(type, int64_t(tok())); }
  size_t phys_offset(int pos) const {
    return (size_t(table[size_t(pos / block_tokens)]) * block_tokens + size_t(pos % block_tokens)) * tok_bytes();
  }
  // Encodes one token row (tok() floats) as the cache must store it (raw, tok_bytes()) and the
  // values those bytes represent (val, tok()).
  void encode(const float* x, uint8_t* raw, double* val) const {
    const size_t n = tok();
    if (type == GgmlType::F32) {
      std::memcpy(raw, x, n * 4);
      for (size_t i = 0; i < n; ++i) val[i] = x[i];
    } else if (type == GgmlType::F16) {
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = ref::f16_bits(x[i]);
        std::memcpy(raw + 2 * i, &h, 2);
        val[i] = ref::f16_value(h);
      }
    } else {  // Q8_0
      quantize_row(GgmlType::Q8_0, x, raw, int64_t(n));
      for (size_t b = 0; b < n / 32; ++b) {
        uint16_t d;
        std::memcpy(&d, raw + 34 * b, 2);
        for (size_t j = 0; j < 32; ++j) val[32 * b + j] = double(int8_t(raw[34 * b + 2 + j])) * ref::f16_value(d);
      }
    }
  }
  // Finite garbage of magnitude 1000..30000 for one token row.
  void garbage(uint8_t* raw, Rng& rng) const {
    const size_t n = tok();
    auto big = [&] { return float((rng.integer(0, 1) ? 1 : -1) * rng.uniform(1000, 30000)); };
    if (type == GgmlType::F32) {
      for (size_t i = 0; i < n; ++i) {
        const float f = big();
        std::memcpy(raw + 4 * i, &f, 4);
      }
    } else if (type == GgmlType::F16) {
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = ref::f16_bits(big());
        std::memcpy(raw + 2 * i, &h, 2);
      }
    } else {  // scales 8..236, quants of magnitude >= 125: values ~1000..30000
      for (size_t b = 0; b < n / 32; ++b) {
        const uint16_t d = ref::f16_bits(std::fabs(big()) / 127.0);
        std::memcpy(raw + 34 * b, &d, 2);
        for (size_t j = 0; j < 32; ++j) raw[34 * b + 2 + j] = uint8_t(int8_t((rng.integer(0, 1) ? 1 : -1) * rng.integer(125, 127)));
      }
    }
  }
};

PagedCache make_cache(GgmlType type, int n_head_kv, int head_dim, int max_pos, Rng& rng) {
  PagedCache c;
  c.type = type;
  c.n_head_kv = n_head_kv;
  c.head_dim = head_dim;
  const int n_logical = (max_pos + c.block_tokens - 1) / c.block_tokens;
  c.n_phys = n_logical + 3;  // blocks of "other sequences" stay in the pool
  std::vector<int32_t> perm(static_cast<size_t>(c.n_phys));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng.g);
  if (n_logical >= 1 && perm[0] == 0) std::swap(perm[0], perm[size_t(c.n_phys - 1)]);  // never the identity
  c.table.assign(perm.begin(), perm.begin() + n_logical);
  const size_t slots = size_t(c.n_phys) * c.block_tokens, tb = c.tok_bytes();
  c.k0.resize(slots * tb);
  c.v0.resize(slots * tb);
  for (size_t i = 0; i < slots; ++i) {
    c.garbage(&c.k0[i * tb], rng);
    c.garbage(&c.v0[i * tb], rng);
  }
  c.kref.assign(size_t(n_logical * c.block_tokens) * c.tok(), 0.0);
  c.vref.assign(c.kref.size(), 0.0);
  c.kraw.assign(size_t(n_logical * c.block_tokens), {});
  c.vraw.assign(c.kraw.size(), {});
  c.written.assign(size_t(n_logical * c.block_tokens), false);
  return c;
}

class AttentionHarness {
 public:
  AttentionHarness(Backend& be, PagedCache& c)
      : be_(be), c_(c), dk_(be, c.k0), dv_(be, c.v0), dtable_(be, c.table) {
    view_.k = dk_.p();
    view_.v = dv_.p();
    view_.block_tokens = c.block_tokens;
    view_.n_head_kv = c.n_head_kv;
    view_.head_dim = c.head_dim;
    view_.type = c.type;
    seq_.block_table = dtable_.p();
    seq_.n_blocks = int(c.table.size());
  }

  // Stores rows of random K/V at the given positions (and records the stored values and bytes).
  void store(const std::vector<int32_t>& pos, Rng& rng, double k_scale) {
    const int rows = int(pos.size());
    std::vector<float> k(rows * c_.tok()), v(rows * c_.tok());
    for (auto& f : k) f = float(rng.normal(k_scale));
    for (auto& f : v) f = float(rng.normal(1.0));
    if (rows > 0 && c_.type != GgmlType::Q8_0) {  // exact f16 ties and f16-subnormal values: rounding must be RNE
      k[0] = float(1.0 + 0x1p-11);        // tie -> 1.0
      k[1] = float(1.0 + 3 * 0x1p-11);    // tie -> 1 + 2^-9
      v[0] = 1e-6f;                       // f16 subnormal
      v[1] = -float(0x1p-25 * 3);         // tie between 1 and 2 quanta of 2^-24 -> 2 (even)
    }
    if (rows > 0 && c_.type == GgmlType::Q8_0) {
      // K block 0: amax 127/32 makes d = 1/32 and 1/d = 32, both exact, so x / d is exact: halves
      // of both signs round away from zero, the float just below a half rounds down. K block 1:
      // d = 1/8 and x / d = j - 16.5, a half for every element. (Scaled down so that these keys do
      // not dominate the softmax: weights that underflow fp32 are outside the tolerance model.)
      const float ties[8] = {127.0f, 0.5f, -0.5f, 1.5f, -2.5f, 0.49999997f, 0.0f, -126.5f};
      for (int j = 0; j < 32; ++j) k[size_t(j)] = j < 8 ? ties[j] / 32 : float(rng.uniform(-3.9, 3.9));
      for (int j = 0; j < 32; ++j) k[size_t(32 + j)] = j < 31 ? (float(j) - 16.5f) / 8 : 127.0f / 8;
      for (int j = 0; j < 32; ++j) v[size_t(j)] = 0.0f;            // V block 0: all zero (d = 0, 1/d taken as 0)
      for (int j = 32; j < 64; ++j) v[size_t(j)] = float(rng.normal(5e-7));  // V block 1: d below f16's subnormals
    }
    Dev<float> dkk(be_, k), dvv(be_, v);
    Dev<int32_t> dpos(be_, pos);
    be_.kv_store(view_, seq_, dkk.p(), dvv.p(), dpos.p(), rows);
    be_.synchronize();
    for (int r = 0; r < rows; ++r) {
      const size_t p = size_t(pos[size_t(r)]), dst = p * c_.tok();
      c_.kraw[p].assign(c_.tok_bytes(), 0);
      c_.vraw[p].assign(c_.tok_bytes(), 0);
      c_.encode(&k[r * c_.tok()], c_.kraw[p].data(), &c_.kref[dst]);
      c_.encode(&v[r * c_.tok()], c_.vraw[p].data(), &c_.vref[dst]);
      c_.written[p] = true;
    }
    if (rows > 0 && c_.type == GgmlType::Q8_0) {  // the expected bytes themselves, spelled out for the special blocks
      const auto& kb = c_.kraw[size_t(pos[0])];
      const auto& vb = c_.vraw[size_t(pos[0])];
      const int8_t want_q[8] = {127, 1, -1, 2, -3, 0, 0, -127};
      EXPECT_EQ(kb[0] | kb[1] << 8, 0x2800) << "q8_0 K block 0 scale is not f16(1/32)";
      for (int j = 0; j < 8; ++j) EXPECT_EQ(int8_t(kb[size_t(2 + j)]), want_q[j]) << "q8_0 K block 0 quant " << j;
      EXPECT_EQ(kb[34] | kb[35] << 8, 0x3000) << "q8_0 K block 1 scale is not f16(1/8)";
      for (int j = 0; j < 32; ++j)
        EXPECT_EQ(int8_t(kb[size_t(36 + j)]), j == 31 ? 127 : j <= 16 ? j - 17 : j - 16) << "q8_0 K block 1 quant " << j;
      for (size_t b = 0; b < 34; ++b) EXPECT_EQ(vb[b], 0) << "q8_0 V block 0 (all zero) byte " << b;
      EXPECT_EQ(vb[34] | vb[35] << 8, 0) << "q8_0 V block 1: d ~ 1e-8 must round to the f16 zero";
    }
  }

  // The physical cache must hold exactly the stored bytes at the mapped slots, garbage elsewhere.
  void check_cache(Cmp& cmp) {
    const auto k = dk_.get(), v = dv_.get();
    const size_t tb = c_.tok_bytes(), slots = k.size() / tb;
    std::vector<int> owner(slots, -1);  // logical position stored at each physical slot
    for (size_t p = 0; p < c_.written.size(); ++p)
      if (c_.written[p]) owner[c_.phys_offset(int(p)) / tb] = int(p);
    for (size_t i = 0; i < slots; ++i) {
      const int p = owner[i];
      for (int which = 0; which < 2; ++which) {
        const uint8_t* got = (which ? v : k).data() + i * tb;
        const uint8_t* want = p < 0 ? (which ? c_.v0 : c_.k0).data() + i * tb : (which ? c_.vraw : c_.kraw)[size_t(p)].data();
        if (std::memcmp(got, want, tb) != 0) {
          size_t b = 0;
          while (got[b] == want[b]) ++b;
          std::ostringstream os;
          os << (which ? "V" : "K") << " cache slot " << i << " (logical pos " << p << "): byte " << b << " is "
             << int(got[b]) << ", want " << int(want[b]);
          cmp.fail(os.str());
        }
      }
    }
  }

  // Tolerance per output element d, from first-order perturbation of the softmax: if the scores
  // s_j = scale q.k_j come out as s_j + e_j, the weights become p_j (1 + e_j - sum_l p_l e_l), so the
  // output moves by sum_j p_j e_j (v_jd - o_d). Each score is an fp32 dot product of length
  // head_dim: |e_j| <= scale red_tol(head_dim) sum_i |q_i k_ji| + 2u |s_j|, plus 8u for exp. The
  // weighted sum and its normalisation add 2 red_tol(n_ctx) sum_j p_j |v_jd|:
  //   tol_d = sum_j p_j (|e_j| + 8u) |v_jd - o_d| + 2 red_tol(n_ctx) sum_j p_j |v_jd|.
  void check_attention(const std::vector<int32_t>& pos, int n_head, bool interleaved_q, Rng& rng, double q_scale,
                       const std::string& label) {
    const int hd = c_.head_dim, rows = int(pos.size());
    const size_t q_head_stride = interleaved_q ? 2 * size_t(hd) : size_t(hd);
    const size_t q_row_stride = size_t(n_head) * q_head_stride + (interleaved_q ? 0 : 8);
    std::vector<float> q(rows * q_row_stride + kGuard, kSentinel);
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < n_head; ++h)
        for (int d = 0; d < hd; ++d) q[r * q_row_stride + h * q_head_stride + size_t(d)] = float(rng.normal(q_scale));
    const size_t out_n = size_t(rows) * n_head * hd;
    std::vector<float> o0(out_n + kGuard, kSentinel);
    std::fill_n(o0.begin(), out_n, kPoison);
    Dev<float> dq(be_, q), dout(be_, o0);
    Dev<int32_t> dpos(be_, pos);
    const double scale = 1.0 / std::sqrt(double(hd));
    be_.attention(dq.p(), q_row_stride, q_head_stride, rows, dpos.p(), n_head, view_, seq_, float(scale), dout.p());
    be_.synchronize();
    const auto out = dout.get();
    Cmp cmp("attention " + label);
    const int group = n_head / c_.n_head_kv;
    std::vector<double> ref(static_cast<size_t>(hd)), qd(static_cast<size_t>(hd));
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < n_head; ++h) {
        const int kvh = h / group;
        const int n_ctx = pos[size_t(r)] + 1;
        std::vector<const double*> ks(static_cast<size_t>(n_ctx)), vs(static_cast<size_t>(n_ctx));
        std::vector<double> e(static_cast<size_t>(n_ctx)), p;
        for (int d = 0; d < hd; ++d) qd[size_t(d)] = q[r * q_row_stride + h * q_head_stride + size_t(d)];
        for (int j = 0; j < n_ctx; ++j) {
          ASSERT_TRUE(c_.written[size_t(j)]) << "test bug: position " << j << " not stored";
          ks[size_t(j)] = &c_.kref[(size_t(j) * c_.n_head_kv + kvh) * hd];
          vs[size_t(j)] = &c_.vref[(size_t(j) * c_.n_head_kv + kvh) * hd];
          double a = 0, s = 0;
          for (int d = 0; d < hd; ++d) {
            a += std::fabs(qd[size_t(d)] * ks[size_t(j)][d]);
            s += qd[size_t(d)] * ks[size_t(j)][d];
          }
          e[size_t(j)] = scale * red_tol(hd) * a + 2 * kU * std::fabs(s * scale) + 8 * kU;
        }
        ref::attention_head(qd.data(), ks, vs, hd, scale, ref.data(), &p);
        for (int d = 0; d < hd; ++d) {
          double t1 = 0, t2 = 0;
          for (int j = 0; j < n_ctx; ++j) {
            t1 += p[size_t(j)] * e[size_t(j)] * std::fabs(vs[size_t(j)][d] - ref[size_t(d)]);
            t2 += p[size_t(j)] * std::fabs(vs[size_t(j)][d]);
          }
          cmp(out[(size_t(r) * n_head + h) * hd + size_t(d)], ref[size_t(d)], t1 + 2 * red_tol(n_ctx) * t2,
              [&] { return at({{"row", r}, {"pos", pos[size_t(r)]}, {"head", h}, {"kv_head", kvh}, {"d", d}}); });
        }
      }
    check_untouched(cmp, o0, out, [&](size_t i) { return i < out_n; }, "out");
    check_untouched(cmp, q, dq.get(), [](size_t) { return false; }, "q");
    cmp.report();
  }

 private:
  Backend& be_;
  PagedCache& c_;
  Dev<uint8_t> dk_, dv_;
  Dev<int32_t> dtable_;
  KvLayerView view_;
  SeqKv seq_;
};

struct AttnCase {
  int head_dim, n_head, n_head_kv;
  std::vector<int> lengths;
  GgmlType type = GgmlType::F16;
};

// For each length P: store positions 0..P-R-1 in calls of odd sizes (one call with its rows in
// reverse position order), check the paged cache bit-for-bit, then store the last R = min(P, 5)
// positions in one call and run (a) the R-row prefill chunk at positions P-R..P-1 (later rows'
// keys are in the cache: the causal mask must hide them from earlier rows), (b) one decode row at
// P-1, (c) rows at random earlier positions (attend to 0..pos only, even though more is cached).
// Unwritten slots hold large finite garbage, so a mask or block-table error shows up as a big error.
void run_attention_cases(Backend& be, const AttnCase& ac, uint64_t seed) {
  for (int P : ac.lengths) {
    SCOPED_TRACE(at({{"head_dim", ac.head_dim}, {"n_head", ac.n_head}, {"n_head_kv", ac.n_head_kv}, {"P", P}}) +
                 " kv " + type_name(ac.type));
    Rng rng(seed + uint64_t(P));
    PagedCache cache = make_cache(ac.type, ac.n_head_kv, ac.head_dim, P, rng);
    AttentionHarness hz(be, cache);
    const int R = std::min(P, 5);
    const int sizes[] = {1, 7, 3, 16, 29, 2, 13};
    int p = 0;
    for (int call = 0; p < P - R; ++call) {
      const int n = std::min(sizes[call % 7], P - R - p);
      std::vector<int32_t> pos(static_cast<size_t>(n));
      std::iota(pos.begin(), pos.end(), p);
      if (call == 1) std::reverse(pos.begin(), pos.end());
      hz.store(pos, rng, 1.0);
      p += n;
    }
    {
      Cmp cmp("kv_store prefix");
      hz.check_cache(cmp);
      cmp.report();
    }
    std::vector<int32_t> chunk(static_cast<size_t>(R));
    std::iota(chunk.begin(), chunk.end(), P - R);
    hz.store(chunk, rng, 1.0);
    {
      Cmp cmp("kv_store chunk");
      hz.check_cache(cmp);
      cmp.report();
    }
    hz.check_attention(chunk, ac.n_head, true, rng, 1.0, "prefill chunk");
    hz.check_attention({P - 1}, ac.n_head, false, rng, 1.0, "decode");
    hz.check_attention({P - 1}, ac.n_head, true, rng, 4.0, "decode sharp");  // peaked softmax
    std::vector<int32_t> rnd = {int32_t(rng.integer(0, P - 1)), 0, int32_t(rng.integer(0, P - 1))};
    hz.check_attention(rnd, ac.n_head, false, rng, 1.0, "random positions");
    if (P >= 64) {  // many rows: several row tiles (the last one partial) and partial position blocks
      const int n = std::min(P, 45);
      std::vector<int32_t> tail(static_cast<size_t>(n));
      std::iota(tail.begin(), tail.end(), P - n);
      hz.check_attention(tail, ac.n_head, true, rng, 1.0, "long prefill chunk");
      std::vector<int32_t> scattered(41);  // increasing with gaps: rows of one tile reach different blocks
      for (auto& sp : scattered) sp = int32_t(rng.integer(0, P - 1));
      std::sort(scattered.begin(), scattered.end());
      hz.check_attention(scattered, ac.n_head, false, rng, 1.0, "many rows at scattered positions");
    }
    Cmp cmp("cache unchanged by attention");
    hz.check_cache(cmp);
    cmp.report();
  }
}

TEST_P(CpuOps, AttentionHd256Gqa8x2) { run_attention_cases(be(), {256, 8, 2, {1, 15, 16, 17, 100, 515}}, 300); }
TEST_P(CpuOps, AttentionHd128Gqa16x8) { run_attention_cases(be(), {128, 16, 8, {1, 16, 17, 100}}, 400); }
TEST_P(CpuOps, AttentionHd128Mha4x4) { run_attention_cases(be(), {128, 4, 4, {15, 515}}, 500); }
TEST_P(CpuOps, AttentionHd256Mha4x4) { run_attention_cases(be(), {256, 4, 4, {17}}, 600); }
TEST_P(CpuOps, AttentionF32KvHd256Gqa8x2) { run_attention_cases(be(), {256, 8, 2, {1, 17, 100}, GgmlType::F32}, 700); }
TEST_P(CpuOps, AttentionF32KvHd128Gqa16x8) { run_attention_cases(be(), {128, 16, 8, {16, 515}, GgmlType::F32}, 800); }
TEST_P(CpuOps, AttentionQ8KvHd256Gqa8x2) { run_attention_cases(be(), {256, 8, 2, {1, 17, 100}, GgmlType::Q8_0}, 900); }
TEST_P(CpuOps, AttentionQ8KvHd128Gqa16x8) { run_attention_cases(be(), {128, 16, 8, {16, 515}, GgmlType::Q8_0}, 1000); }
TEST_P(CpuOps, AttentionQ8KvHd128Mha4x4) { run_attention_cases(be(), {128, 4, 4, {15}, GgmlType::Q8_0}, 1100); }
// Head dims that are not whole SIMD vectors (72 = 4.5 x 16), odd GQA groups, and one kv head
// (a decode row's group is then split over threads).
TEST_P(CpuOps, AttentionHd72Gqa6x2) { run_attention_cases(be(), {72, 6, 2, {1, 17, 100}}, 1200); }
TEST_P(CpuOps, AttentionF32KvHd72Gqa6x2) { run_attention_cases(be(), {72, 6, 2, {17, 100}, GgmlType::F32}, 1300); }
TEST_P(CpuOps, AttentionHd64Gqa8x1) { run_attention_cases(be(), {64, 8, 1, {1, 33, 100}}, 1400); }

// A q8_0 cache needs whole 32-element blocks per head; other head dims are refused, not misread.
TEST_P(CpuOps, Q8KvRejectsHeadDimNotMultipleOf32) {
  std::vector<uint8_t> buf(4096);
  std::vector<int32_t> table = {0};
  std::vector<float> x(2 * 80, 1.0f);
  std::vector<int32_t> pos = {0};
  Dev<uint8_t> k(be(), buf), v(be(), buf);
  Dev<int32_t> t(be(), table), p(be(), pos);
  Dev<float> dx(be(), x), out(be(), x);
  const KvLayerView view{k.p(), v.p(), 16, 2, 80, GgmlType::Q8_0};
  const SeqKv seq{t.p(), 1};
  EXPECT_THROW(be().kv_store(view, seq, dx.p(), dx.p(), p.p(), 1), Error);
  EXPECT_THROW(be().attention(dx.p(), 160, 80, 1, p.p(), 2, view, seq, 0.1f, out.p()), Error);
  EXPECT_THROW(check_kv_type(GgmlType::Q8_0, 80), Error);
  EXPECT_THROW(check_kv_type(GgmlType::Q4_0, 128), Error);
  EXPECT_NO_THROW(check_kv_type(GgmlType::Q8_0, 64));
  const KvLayerView v128{nullptr, nullptr, 16, 2, 128, GgmlType::Q8_0};
  EXPECT_EQ(v128.token_bytes(), 2u * 4 * 34);
  EXPECT_EQ(v128.head_bytes(), 4u * 34);
}

// ---------------------------------------------------------------------------------------------
// conv1d_silu. y_c(t) = silu(sum_j w_c[j] x_c(t-K+1+j)) with the state as left context.
// Tolerance: the K-term fp32 sum errs by <= (K+1) u sum_j |w_j x_j| (silu' <= 1.1), the SiLU by
// 16u relative (see swiglu). The new state is a copy of inputs: it must be bit-exact.

struct ConvRun {
  std::vector<float> out;    // rows × channels (gaps stripped)
  std::vector<float> state;  // (K-1) × channels
};

ConvRun run_conv(Backend& be, Cmp& cmp, const std::vector<float>& x, int rows, int channels, const std::vector<float>& w,
                 int kernel, std::vector<float> state, size_t x_stride, size_t out_stride) {
  std::vector<float> xb(rows * x_stride + kGuard, kSentinel);
  for (int t = 0; t < rows; ++t)
    for (int c = 0; c < channels; ++c) xb[t * x_stride + size_t(c)] = x[size_t(t) * channels + size_t(c)];
  std::vector<float> o0(rows * out_stride + kGuard, kSentinel);
  for (int t = 0; t < rows; ++t) std::fill_n(&o0[t * out_stride], channels, kPoison);
  const size_t ns = size_t(kernel - 1) * channels;
  state.resize(ns + kGuard, kSentinel);
  Dev<float> dx(be, xb), dw(be, w), ds(be, state), dout(be, o0);
  be.conv1d_silu(dx.p(), x_stride, rows, channels, dw.p(), kernel, ds.p(), dout.p(), out_stride);
  be.synchronize();
  const auto out = dout.get(), st = ds.get();
  check_untouched(cmp, o0, out, [&](size_t i) { return i < rows * out_stride && i % out_stride < size_t(channels); }, "out");
  check_untouched(cmp, state, st, [&](size_t i) { return i < ns; }, "state");
  check_untouched(cmp, xb, dx.get(), [](size_t) { return false; }, "x");
  ConvRun r;
  r.out.resize(size_t(rows) * channels);
  for (int t = 0; t < rows; ++t)
    for (int c = 0; c < channels; ++c) r.out[size_t(t) * channels + size_t(c)] = out[t * out_stride + size_t(c)];
  r.state.assign(st.begin(), st.begin() + long(ns));
  return r;
}

// Returns the tolerance used for each output.
std::vector<double> compare_conv(Cmp& cmp, const ConvRun& got, const std::vector<float>& x, int rows, int channels,
                                 const std::vector<float>& w, int kernel, const std::vector<float>& state0) {
  std::vector<double> tols(size_t(rows) * channels);
  std::vector<double> st = to_double(state0), out;
  ref::conv1d_silu(to_double(x), rows, channels, to_double(w), kernel, st, out);
  const int hist = kernel - 1;
  for (int t = 0; t < rows; ++t)
    for (int c = 0; c < channels; ++c) {
      double a = 0;
      for (int j = 0; j < kernel; ++j) {
        const int tt = t - hist + j;
        const double in = tt < 0 ? state0[size_t(hist + tt) * channels + size_t(c)] : x[size_t(tt) * channels + size_t(c)];
        a += std::fabs(w[size_t(c) * kernel + size_t(j)] * in);
      }
      const double ref = out[size_t(t) * channels + size_t(c)];
      const double tol = 1.1 * (kernel + 1) * kU * a + 16 * kU * std::fabs(ref) + 1e-30;
      tols[size_t(t) * channels + size_t(c)] = tol;
      cmp(got.out[size_t(t) * channels + size_t(c)], ref, tol, [&] { return at({{"t", t}, {"c", c}, {"kernel", kernel}}); });
    }
  for (size_t i = 0; i < st.size(); ++i)
    cmp(got.state[i], st[i], 0.0, [&] { return at({{"state row", int64_t(i) / channels}, {"c", int64_t(i) % channels}}); });
  return tols;
}

TEST_P(CpuOps, Conv1dSilu) {
  Rng rng(16);
  for (int channels : {1, 7, 96, 1030})
    for (int rows : {1, 2, 3, 4, 5, 17}) {
      SCOPED_TRACE(at({{"channels", channels}, {"rows", rows}}));
      const int K = 4;
      const auto x = rng.normals(size_t(rows) * channels, 2.0), w = rng.normals(size_t(channels) * K, 0.5);
      const auto st0 = rng.normals(size_t(K - 1) * channels, 2.0);
      Cmp cmp("conv1d_silu");
      const ConvRun got = run_conv(be(), cmp, x, rows, channels, w, K, st0, size_t(channels) + 5, size_t(channels) + 3);
      compare_conv(cmp, got, x, rows, channels, w, K, st0);
      cmp.report();
    }
}

TEST_P(CpuOps, Conv1dSiluSequenceStart) {  // zero state = the start of a sequence
  Rng rng(17);
  const int channels = 64, K = 4;
  const auto x = rng.normals(size_t(2) * channels), w = rng.normals(size_t(channels) * K, 0.5);
  const std::vector<float> st0(size_t(K - 1) * channels, 0.0f);
  Cmp cmp("conv1d_silu from zero state");
  const ConvRun got = run_conv(be(), cmp, x, 2, channels, w, K, st0, channels, channels);
  compare_conv(cmp, got, x, 2, channels, w, K, st0);
  cmp.report();
}

TEST_P(CpuOps, Conv1dSiluOtherKernels) {
  Rng rng(18);
  for (int K : {2, 3, 5})
    for (int rows : {1, 2, 6}) {
      SCOPED_TRACE(at({{"kernel", K}, {"rows", rows}}));
      const int channels = 40;
      const auto x = rng.normals(size_t(rows) * channels), w = rng.normals(size_t(channels) * K, 0.5);
      const auto st0 = rng.normals(size_t(K - 1) * channels);
      Cmp cmp("conv1d_silu");
      const ConvRun got = run_conv(be(), cmp, x, rows, channels, w, K, st0, channels, channels + 1);
      compare_conv(cmp, got, x, rows, channels, w, K, st0);
      cmp.report();
    }
}

// Several calls carrying the state equal one call over the concatenation, including calls with
// fewer rows than K-1: both match the reference (state bit-exact), and chained vs one call agree
// within twice the reference tolerance (each may differ from the reference by one tolerance).
TEST_P(CpuOps, Conv1dSiluChained) {
  Rng rng(19);
  const int channels = 136, K = 4;
  const std::vector<int> splits = {1, 2, 5, 1, 14, 3};
  const int total = std::accumulate(splits.begin(), splits.end(), 0);
  const auto x = rng.normals(size_t(total) * channels, 2.0), w = rng.normals(size_t(channels) * K, 0.5);
  const auto st0 = rng.normals(size_t(K - 1) * channels, 2.0);
  Cmp cmp("conv1d_silu chained");
  const ConvRun whole = run_conv(be(), cmp, x, total, channels, w, K, st0, channels, channels);
  const std::vector<double> tols = compare_conv(cmp, whole, x, total, channels, w, K, st0);
  ConvRun chained;
  std::vector<float> st = st0;
  int t0 = 0;
  for (int n : splits) {
    const std::vector<float> xs(x.begin() + long(t0) * channels, x.begin() + long(t0 + n) * channels);
    const ConvRun part = run_conv(be(), cmp, xs, n, channels, w, K, st, channels, channels);
    chained.out.insert(chained.out.end(), part.out.begin(), part.out.end());
    st = part.state;
    t0 += n;
  }
  chained.state = st;
  compare_conv(cmp, chained, x, total, channels, w, K, st0);
  for (size_t i = 0; i < whole.out.size(); ++i)
    cmp(chained.out[i], whole.out[i], 2 * tols[i],
        [&] { return "chained vs one call, element " + std::to_string(i); });
  cmp.report();
}

// ---------------------------------------------------------------------------------------------
// l2_norm_heads: x / max(|x|, eps) * scale, in place. Tolerance |ref| (red_tol(dim)/2 + 4u) as for
// rms_norm. Heads include a zero vector (-> 0), one with |x| < eps (-> x / eps * scale, so the max
// must be taken on the norm, not added) and one with large values.

TEST_P(CpuOps, L2NormHeads) {
  struct Case {
    int rows, n_heads, dim;
    size_t row_stride;
    float eps, scale;
  };
  const Case cases[] = {
      {3, 4, 128, 2 * 4 * 128 + 64, 1e-6f, float(1 / std::sqrt(128.0))},  // q heads inside a qkv row
      {2, 16, 128, 16 * 128, 1e-6f, 1.0f},
      {5, 3, 64, 200, 1e-6f, 0.125f},
      {1, 2, 7, 14, 1e-3f, 2.0f},
  };
  Rng rng(20);
  for (const Case& c : cases) {
    SCOPED_TRACE(at({{"rows", c.rows}, {"n_heads", c.n_heads}, {"dim", c.dim}}));
    std::vector<float> x(c.rows * c.row_stride + kGuard, kSentinel);
    int special = 0;
    for (int r = 0; r < c.rows; ++r)
      for (int h = 0; h < c.n_heads; ++h, ++special) {
        const double s = special == 1 ? 0.0 : special == 2 ? 1e-3 * c.eps / std::sqrt(double(c.dim)) : special == 3 ? 1e4 : 1.0;
        for (int d = 0; d < c.dim; ++d) x[r * c.row_stride + size_t(h * c.dim + d)] = float(rng.normal(s));
      }
    Dev<float> dx(be(), x);
    be().l2_norm_heads(dx.p(), c.row_stride, c.rows, c.n_heads, c.dim, c.eps, c.scale);
    be().synchronize();
    const auto got = dx.get();
    Cmp cmp("l2_norm_heads");
    for (int r = 0; r < c.rows; ++r)
      for (int h = 0; h < c.n_heads; ++h) {
        const size_t base = r * c.row_stride + size_t(h * c.dim);
        std::vector<double> v(x.begin() + long(base), x.begin() + long(base) + c.dim);
        ref::l2_normalize(v.data(), c.dim, c.eps, c.scale);
        for (int d = 0; d < c.dim; ++d)
          cmp(got[base + size_t(d)], v[size_t(d)], std::fabs(v[size_t(d)]) * (red_tol(c.dim) / 2 + 4 * kU),
              [&] { return at({{"r", r}, {"h", h}, {"d", d}}); });
      }
    check_untouched(cmp, x, got,
                    [&](size_t i) { return i < c.rows * c.row_stride && i % c.row_stride < size_t(c.n_heads * c.dim); }, "x");
    cmp.report();
  }
}

// ---------------------------------------------------------------------------------------------
// gdn_gates: in place, b -> beta = sigmoid(b), a -> g = a_coef[h] softplus(a + dt_bias[h]).
// Tolerance: beta 16u relative (as swiglu) + 1e-30 for denormals; g: |a_coef| (4u + 16u softplus):
// the common fp32 form log(1 + e^x) has an absolute error ~u when e^x << 1 (1 + e^x rounds) and a
// few ulp relative otherwise; the x > 20 -> x shortcut errs by < 2e-9 relative. |a| up to 1000:
// softplus(1000) must be 1000 (not inf), softplus(-1000) must be 0 (not NaN).

TEST_P(CpuOps, GdnGates) {
  Rng rng(21);
  const float specials[] = {100.f, -100.f, 1000.f, -1000.f, 25.f, -25.f, 20.f, -20.f, 0.f, 88.f, -88.f, 1e-8f};
  for (auto [rows, n_v] : {std::pair{5, 16}, std::pair{1, 48}, std::pair{7, 3}}) {
    SCOPED_TRACE(at({{"rows", rows}, {"n_v", n_v}}));
    const size_t n = size_t(rows) * n_v;
    std::vector<float> b(n + kGuard, kSentinel), a(n + kGuard, kSentinel), coef(static_cast<size_t>(n_v)), dt(static_cast<size_t>(n_v));
    for (size_t i = 0; i < n; ++i) {
      b[i] = i % 5 == 2 ? specials[(i / 5) % std::size(specials)] : float(rng.normal(3));
      a[i] = i % 5 == 3 ? specials[(i / 5 + 3) % std::size(specials)] : float(rng.normal(3));
    }
    for (int h = 0; h < n_v; ++h) {
      coef[size_t(h)] = float(-std::exp(rng.uniform(-2, 2)));  // ssm_a = -exp(A_log)
      dt[size_t(h)] = float(rng.uniform(-1, 1));
    }
    Dev<float> db(be(), b), da(be(), a), dcoef(be(), coef), ddt(be(), dt);
    be().gdn_gates(db.p(), da.p(), dcoef.p(), ddt.p(), rows, n_v);
    be().synchronize();
    const auto gb = db.get(), ga = da.get();
    Cmp cmp("gdn_gates");
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < n_v; ++h) {
        const size_t i = size_t(r) * n_v + size_t(h);
        const double beta = ref::sigmoid(b[i]);
        cmp(gb[i], beta, 16 * kU * beta + 1e-30, [&] { return at({{"r", r}, {"h", h}}) + " beta, b=" + std::to_string(b[i]); });
        const double xin = double(a[i]) + double(dt[size_t(h)]);
        // The op may add a + dt_bias in fp32 first: the softplus derivative is <= 1, so that
        // rounding adds <= u |a + dt| to the softplus.
        const double sp = ref::softplus(xin);
        const double g = double(coef[size_t(h)]) * sp;
        const double tol = std::fabs(coef[size_t(h)]) * (4 * kU + 16 * kU * sp + kU * std::fabs(xin) * ref::sigmoid(xin));
        cmp(ga[i], g, tol, [&] { return at({{"r", r}, {"h", h}}) + " g, a=" + std::to_string(a[i]); });
      }
    check_untouched(cmp, b, gb, [&](size_t i) { return i < n; }, "b");
    check_untouched(cmp, a, ga, [&](size_t i) { return i < n; }, "a");
    cmp.report();
  }
}

// ---------------------------------------------------------------------------------------------
// gated_rms_norm: x[r][h] <- rms_norm(x[r][h]; w, eps) * silu(z[r][h]), in place, w shared by heads.
// Tolerance |ref| (red_tol(dim)/2 + 24u): rms_norm's bound plus the SiLU's 16u.

TEST_P(CpuOps, GatedRmsNorm) {
  struct Case {
    int rows, n_heads, dim;
  };
  const Case cases[] = {{3, 4, 128}, {1, 16, 128}, {2, 3, 64}, {4, 2, 100}};
  Rng rng(22);
  for (const Case& c : cases) {
    SCOPED_TRACE(at({{"rows", c.rows}, {"n_heads", c.n_heads}, {"dim", c.dim}}));
    const double eps = 1e-6;
    const size_t n = size_t(c.rows) * c.n_heads * c.dim;
    std::vector<float> x(n + kGuard, kSentinel), z(n + kGuard, kSentinel), w(static_cast<size_t>(c.dim));
    for (size_t i = 0; i < n; ++i) {
      const size_t head = i / size_t(c.dim);
      x[i] = head == 1 ? 0.0f : float(rng.normal(head == 2 ? 1e-4 : 1.0));  // zero head, tiny head
      z[i] = i % 17 == 3 ? (i % 2 ? 90.0f : -90.0f) : float(rng.normal(2.0));
    }
    for (auto& v : w) v = float(rng.uniform(0.2, 1.8));
    Dev<float> dx(be(), x), dz(be(), z), dw(be(), w);
    be().gated_rms_norm(dx.p(), dz.p(), dw.p(), c.rows, c.n_heads, c.dim, float(eps));
    be().synchronize();
    const auto got = dx.get();
    Cmp cmp("gated_rms_norm");
    const auto xd = to_double(x), zd = to_double(z), wd = to_double(w);
    std::vector<double> ref(static_cast<size_t>(c.dim));
    for (size_t head = 0; head < n / size_t(c.dim); ++head) {
      ref::gated_rms_norm(&xd[head * c.dim], &zd[head * c.dim], wd.data(), c.dim, eps, ref.data());
      for (int d = 0; d < c.dim; ++d)
        cmp(got[head * c.dim + size_t(d)], ref[size_t(d)], std::fabs(ref[size_t(d)]) * (red_tol(c.dim) / 2 + 24 * kU) + 1e-30,
            [&] { return at({{"row", int64_t(head) / c.n_heads}, {"head", int64_t(head) % c.n_heads}, {"d", d}}); });
    }
    check_untouched(cmp, x, got, [&](size_t i) { return i < n; }, "x");
    check_untouched(cmp, z, dz.get(), [](size_t) { return false; }, "z");
    cmp.report();
  }
}

// ---------------------------------------------------------------------------------------------
// gdn_delta_rule.
//
// Inputs: k unit vectors, q unit vectors / sqrt(d_k) (what l2_norm_heads produces), v ~ N(0,1),
// g ~ U[-3, 0] (so a 64-token chunk's cumulative decay reaches e^-96: a chunked form that computes
// e^{-Gamma} on its own overflows fp32), beta ~ U(0.02, 0.98), a random nonzero S0. qkv rows have
// padding filled with NaN sentinels that must not be read.
//
// Tolerance vs the double reference: 1e-4 of the largest |output| of the head (and 1e-4 of the
// largest |S| of the head for the final state). Reasoning: every step does length-d_k fp32 dot
// products and rank-1 updates (relative rounding ~sqrt(d_k) u ~ 7e-7 for d_k = 128); the update
// S <- alpha (I - beta k k^T) S + beta k v^T is non-expansive (alpha <= 1, |I - beta k k^T| <= 1
// for |k| = 1), so rounding errors do not grow, they add up, at worst linearly: 200 steps x 7e-7
// = 1.4e-4 in the absurd case that all roundings align, ~sqrt(200) x 7e-7 = 1e-5 as a random walk,
// and decay forgets old errors. The chunked form adds the forward substitution for (I + L)^-1,
// whose entries are bounded for unit k and beta < 1. 1e-4 leaves >= 10x margin over the expected
// error while any mistake in the recurrence (head mapping, decay order, reading o before the
// update, chunk carry) changes outputs by O(1) relative.
// Chunked vs recurrent: |o_c - o_r|_2 <= 1e-5 |o_r|_2 over the call (the doc's fp32 agreement).

struct GdnCase {
  int n_k, n_v, d_k, d_v;
};

struct GdnData {
  GdnCase s;
  int rows = 0;
  size_t stride = 0;           // qkv row stride (conv_dim + 8 padding)
  std::vector<float> qkv;      // rows × stride (padding = sentinel)
  std::vector<float> g, beta;  // rows × n_v
  std::vector<float> S0;       // n_v × d_k × d_v
  int conv_dim() const { return 2 * s.n_k * s.d_k + s.n_v * s.d_v; }
};

GdnData make_gdn_data(const GdnCase& s, int rows, uint64_t seed, double g_lo = -3.0) {
  Rng rng(seed);
  GdnData d;
  d.s = s;
  d.rows = rows;
  d.stride = size_t(d.conv_dim()) + 8;
  d.qkv.assign(rows * d.stride, kSentinel);
  for (int t = 0; t < rows; ++t) {
    float* row = &d.qkv[t * d.stride];
    for (int part = 0; part < 2; ++part)  // q, then k
      for (int h = 0; h < s.n_k; ++h) {
        float* v = row + size_t(part * s.n_k + h) * s.d_k;
        double nrm = 0;
        std::vector<double> tmp(static_cast<size_t>(s.d_k));
        for (auto& e : tmp) {
          e = rng.normal();
          nrm += e * e;
        }
        const double sc = (part == 0 ? 1.0 / std::sqrt(double(s.d_k)) : 1.0) / std::sqrt(nrm);
        for (int i = 0; i < s.d_k; ++i) v[i] = float(tmp[size_t(i)] * sc);
      }
    for (int i = 0; i < s.n_v * s.d_v; ++i) row[2 * s.n_k * s.d_k + i] = float(rng.normal());
  }
  d.g.resize(size_t(rows) * s.n_v);
  d.beta.resize(d.g.size());
  for (auto& x : d.g) x = float(rng.uniform(g_lo, 0.0));
  for (auto& x : d.beta) x = float(rng.uniform(0.02, 0.98));
  d.S0 = rng.normals(size_t(s.n_v) * s.d_k * s.d_v, 0.3);
  return d;
}

struct GdnOut {
  std::vector<double> out, S;
};

// Reference over [t0, t1) starting from S (double).
GdnOut gdn_reference(const GdnData& d, int t0, int t1, std::vector<double> S) {
  const int cd = d.conv_dim(), rows = t1 - t0;
  std::vector<double> qkv(size_t(rows) * cd), g(size_t(rows) * d.s.n_v), beta(g.size());
  for (int t = 0; t < rows; ++t) {
    for (int i = 0; i < cd; ++i) qkv[size_t(t) * cd + size_t(i)] = d.qkv[size_t(t0 + t) * d.stride + size_t(i)];
    for (int h = 0; h < d.s.n_v; ++h) {
      g[size_t(t) * d.s.n_v + size_t(h)] = d.g[size_t(t0 + t) * d.s.n_v + size_t(h)];
      beta[size_t(t) * d.s.n_v + size_t(h)] = d.beta[size_t(t0 + t) * d.s.n_v + size_t(h)];
    }
  }
  GdnOut o;
  ref::gdn_delta_rule({d.s.n_k, d.s.n_v, d.s.d_k, d.s.d_v}, qkv, g, beta, rows, S, o.out);
  o.S = std::move(S);
  return o;
}

// Runs the op over the given segments of rows [0, sum) carrying the state; each segment may use
// its own mode. Outputs of all segments are concatenated.
GdnOut gdn_run(Backend& be, Cmp& guard, const GdnData& d, const std::vector<std::pair<int, bool>>& segments,
               int t0 = 0) {
  const int total = std::accumulate(segments.begin(), segments.end(), 0, [](int a, auto& s) { return a + s.first; });
  const size_t ns = d.S0.size(), vw = size_t(d.s.n_v) * d.s.d_v;
  std::vector<float> qkv(d.qkv.begin() + long(size_t(t0) * d.stride), d.qkv.begin() + long(size_t(t0 + total) * d.stride));
  std::vector<float> g(d.g.begin() + long(size_t(t0) * d.s.n_v), d.g.begin() + long(size_t(t0 + total) * d.s.n_v));
  std::vector<float> beta(d.beta.begin() + long(size_t(t0) * d.s.n_v), d.beta.begin() + long(size_t(t0 + total) * d.s.n_v));
  qkv.resize(qkv.size() + kGuard, kSentinel);
  g.resize(g.size() + kGuard, kSentinel);
  beta.resize(beta.size() + kGuard, kSentinel);
  std::vector<float> S = d.S0, o0(size_t(total) * vw + kGuard, kSentinel);
  S.resize(ns + kGuard, kSentinel);
  std::fill_n(o0.begin(), size_t(total) * vw, kPoison);
  Dev<float> dqkv(be, qkv), dg(be, g), db(be, beta), dS(be, S), dout(be, o0);
  GdnShape shape;
  shape.n_k = d.s.n_k;
  shape.n_v = d.s.n_v;
  shape.d_k = d.s.d_k;
  shape.d_v = d.s.d_v;
  int t = 0;
  for (auto [n, chunked] : segments) {
    be.gdn_delta_rule(shape, dqkv.p() + size_t(t) * d.stride, d.stride, dg.p() + size_t(t) * d.s.n_v,
                      db.p() + size_t(t) * d.s.n_v, n, dS.p(), dout.p() + size_t(t) * vw, chunked);
    t += n;
  }
  be.synchronize();
  const auto out = dout.get(), Sg = dS.get();
  check_untouched(guard, o0, out, [&](size_t i) { return i < size_t(total) * vw; }, "out");
  check_untouched(guard, S, Sg, [&](size_t i) { return i < ns; }, "S");
  check_untouched(guard, qkv, dqkv.get(), [](size_t) { return false; }, "qkv");
  GdnOut r;
  r.out.assign(out.begin(), out.begin() + long(size_t(total) * vw));
  r.S.assign(Sg.begin(), Sg.begin() + long(ns));
  return r;
}

void compare_gdn(Cmp& cmp, const GdnCase& s, const GdnOut& got, const GdnOut& ref, int rows, double rel = 1e-4) {
  const size_t vw = size_t(s.n_v) * s.d_v, hs = size_t(s.d_k) * s.d_v;
  for (int h = 0; h < s.n_v; ++h) {
    double mo = 0, ms = 0;
    for (int t = 0; t < rows; ++t)
      for (int j = 0; j < s.d_v; ++j) mo = std::max(mo, std::fabs(ref.out[size_t(t) * vw + size_t(h * s.d_v + j)]));
    for (size_t e = 0; e < hs; ++e) ms = std::max(ms, std::fabs(ref.S[size_t(h) * hs + e]));
    for (int t = 0; t < rows; ++t)
      for (int j = 0; j < s.d_v; ++j) {
        const size_t i = size_t(t) * vw + size_t(h * s.d_v + j);
        cmp(got.out[i], ref.out[i], rel * mo, [&] { return at({{"out t", t}, {"head", h}, {"j", j}}); });
      }
    for (size_t e = 0; e < hs; ++e)
      cmp(got.S[size_t(h) * hs + e], ref.S[size_t(h) * hs + e], rel * ms,
          [&] { return at({{"S head", h}, {"key i", int64_t(e) / s.d_v}, {"value j", int64_t(e) % s.d_v}}); });
  }
}

double rel_l2(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

const GdnCase kGdnCases[] = {
    {2, 4, 64, 64}, {2, 4, 128, 128}, {16, 16, 128, 128}, {2, 6, 64, 128}, {2, 6, 128, 64},
};

std::string gdn_label(const GdnCase& s) {
  return at({{"n_k", s.n_k}, {"n_v", s.n_v}, {"d_k", s.d_k}, {"d_v", s.d_v}});
}

// Both forms against the reference for rows in {1, 2, 63, 64, 65, 130, 200} (each a separate call
// from S0), and chunked vs recurrent.
TEST_P(CpuOps, GdnDeltaRuleMatchesReference) {
  const int kRows[] = {1, 2, 63, 64, 65, 130, 200};
  struct Cached {
    GdnData d;
    GdnOut full;                          // outputs of all 200 tokens
    std::vector<std::vector<double>> S_at;  // state after each prefix length in kRows
  };
  static std::vector<std::unique_ptr<Cached>> cache;  // shared by the 1- and 2-thread instances
  for (size_t ci = 0; ci < std::size(kGdnCases); ++ci) {
    const GdnCase& s = kGdnCases[ci];
    const bool big = s.n_v == 16;  // keep the 16-head case cheaper
    if (cache.size() <= ci) {
      auto c = std::make_unique<Cached>();
      c->d = make_gdn_data(s, 200, 700 + ci);
      // One reference pass, saving the state at every prefix length (outputs of a prefix are a prefix).
      std::vector<double> S(c->d.S0.begin(), c->d.S0.end());
      int t = 0;
      for (int R : kRows) {
        GdnOut part = gdn_reference(c->d, t, R, S);
        c->full.out.insert(c->full.out.end(), part.out.begin(), part.out.end());
        S = part.S;
        c->S_at.push_back(S);
        t = R;
      }
      cache.push_back(std::move(c));
    }
    const GdnData& d = cache[ci]->d;
    const GdnOut& full = cache[ci]->full;
    const std::vector<std::vector<double>>& S_at = cache[ci]->S_at;
    for (size_t ri = 0; ri < std::size(kRows); ++ri) {
      const int R = kRows[ri];
      if (big && R != 1 && R != 64 && R != 130) continue;
      SCOPED_TRACE(gdn_label(s) + " rows=" + std::to_string(R));
      GdnOut ref;
      ref.out.assign(full.out.begin(), full.out.begin() + long(size_t(R) * s.n_v * s.d_v));
      ref.S = S_at[ri];
      Cmp guard("gdn_delta_rule buffers");
      GdnOut res[2];
      for (int chunked = 0; chunked < 2; ++chunked) {
        Cmp cmp(std::string("gdn_delta_rule ") + (chunked ? "chunked " : "recurrent ") + gdn_label(s) +
                " rows=" + std::to_string(R));
        res[chunked] = gdn_run(be(), guard, d, {{R, chunked == 1}});
        compare_gdn(cmp, s, res[chunked], ref, R);
        cmp.report();
      }
      const double eo = rel_l2(res[1].out, res[0].out), es = rel_l2(res[1].S, res[0].S);
      if (verbose()) std::cout << "  [margin] chunked vs recurrent " << gdn_label(s) << " rows=" << R << ": out " << eo << ", S " << es << "\n";
      EXPECT_LE(eo, 1e-5) << "chunked vs recurrent outputs, relative L2";
      EXPECT_LE(es, 1e-5) << "chunked vs recurrent state, relative L2";
      guard.report();
    }
  }
}

// Slow decay (g in [-0.05, 0]): the state carries information across many chunks, so a wrong
// chunk-to-chunk carry or a wrong decay inside a long chunk is visible; errors also accumulate
// longer, which the 1e-4 bound still covers.
TEST_P(CpuOps, GdnDeltaRuleSlowDecay) {
  const GdnCase s = {2, 4, 128, 128};
  const GdnData d = make_gdn_data(s, 200, 800, -0.05);
  const GdnOut ref = gdn_reference(d, 0, 200, std::vector<double>(d.S0.begin(), d.S0.end()));
  Cmp guard("gdn_delta_rule buffers");
  for (bool chunked : {false, true}) {
    Cmp cmp(std::string("gdn_delta_rule slow decay ") + (chunked ? "chunked" : "recurrent"));
    compare_gdn(cmp, s, gdn_run(be(), guard, d, {{200, chunked}}), ref, 200);
    cmp.report();
  }
  guard.report();
}

// One 200-token sequence split across calls (at chunk boundaries, at odd points, chunked prefill
// followed by single-token recurrent decode) gives the same outputs and final state as one call:
// against the reference (1e-4 as above) and against the single chunked call (relative L2 1e-5).
TEST_P(CpuOps, GdnDeltaRuleSplitCalls) {
  for (const GdnCase& s : {GdnCase{2, 6, 64, 128}, GdnCase{2, 4, 128, 128}}) {
    const GdnData d = make_gdn_data(s, 200, 900 + uint64_t(s.d_k));
    const GdnOut ref = gdn_reference(d, 0, 200, std::vector<double>(d.S0.begin(), d.S0.end()));
    Cmp guard("gdn_delta_rule buffers");
    const GdnOut whole = gdn_run(be(), guard, d, {{200, true}});
    std::vector<std::pair<std::string, std::vector<std::pair<int, bool>>>> plans = {
        {"chunk boundaries", {{64, true}, {64, true}, {72, true}}},
        {"odd points", {{37, true}, {1, true}, {90, true}, {72, true}}},
        {"odd points recurrent", {{37, false}, {1, false}, {90, false}, {72, false}}},
        {"prefill then decode", {{130, true}, {1, false}, {1, false}, {1, false}, {67, true}}},
    };
    std::vector<std::pair<int, bool>> decode_tail = {{150, true}};
    for (int i = 0; i < 50; ++i) decode_tail.push_back({1, false});
    plans.push_back({"prefill then 50 decode steps", decode_tail});
    for (auto& [name, plan] : plans) {
      SCOPED_TRACE(gdn_label(s) + " " + name);
      Cmp cmp("gdn_delta_rule split: " + name + " " + gdn_label(s));
      const GdnOut got = gdn_run(be(), guard, d, plan);
      compare_gdn(cmp, s, got, ref, 200);
      cmp.report();
      EXPECT_LE(rel_l2(got.out, whole.out), 1e-5) << "outputs vs one chunked call, relative L2";
      EXPECT_LE(rel_l2(got.S, whole.S), 1e-5) << "state vs one chunked call, relative L2";
    }
    guard.report();
  }
}

// keep_state (speculative verification): a 16-row recurrent call leaves S bit for bit as it
// was and gives the outputs of the same call without keep_state bit for bit; and a replay of
// the first t + 1 rows from that untouched S (what commit runs) ends in the state a plain call
// over those rows ends in, within the 1e-4 bound of the double reference.
TEST_P(CpuOps, GdnDeltaRuleKeepState) {
  const GdnCase s = {2, 6, 64, 32};
  const int rows = 16;
  const GdnData d = make_gdn_data(s, rows, 990);
  GdnShape shape;
  shape.n_k = s.n_k;
  shape.n_v = s.n_v;
  shape.d_k = s.d_k;
  shape.d_v = s.d_v;
  const size_t vw = size_t(s.n_v) * s.d_v;
  std::vector<float> out(size_t(rows) * vw, kPoison);
  Dev<float> dqkv(be(), d.qkv), dg(be(), d.g), db(be(), d.beta), dS(be(), d.S0), dout(be(), out);
  be().gdn_delta_rule(shape, dqkv.p(), d.stride, dg.p(), db.p(), rows, dS.p(), dout.p(), false, /*keep_state=*/true);
  be().synchronize();
  const std::vector<float> S_after = dS.get(), kept_out = dout.get();
  for (size_t i = 0; i < S_after.size(); ++i) ASSERT_TRUE(same_bits(S_after[i], d.S0[i])) << "state element " << i;
  Cmp guard("gdn_delta_rule buffers");
  const GdnOut whole = gdn_run(be(), guard, d, {{rows, false}});
  for (size_t i = 0; i < kept_out.size(); ++i)
    ASSERT_TRUE(same_bits(kept_out[i], float(whole.out[i]))) << "output element " << i;
  std::vector<double> Sref(d.S0.begin(), d.S0.end());
  for (int t = 0; t < rows; ++t) {
    SCOPED_TRACE("replay of " + std::to_string(t + 1) + " rows");
    Sref = gdn_reference(d, t, t + 1, Sref).S;
    const GdnOut replay = gdn_run(be(), guard, d, {{t + 1, false}});
    double max_ref = 0, max_err = 0;
    for (size_t i = 0; i < Sref.size(); ++i) {
      max_ref = std::max(max_ref, std::abs(Sref[i]));
      max_err = std::max(max_err, std::abs(replay.S[i] - Sref[i]));
    }
    EXPECT_LE(max_err, 1e-4 * max_ref);
  }
  guard.report();
}

// The doc's sanity properties, exact up to a few roundings:
// beta = 0, g = 0 leaves S unchanged (and o = S^T q); from S = 0 one step gives S = beta k v^T and
// o = beta (k.q) v. Also the head mapping alone: with n_k = 2, n_v = 6, value head h must read
// key head h % 2.
TEST_P(CpuOps, GdnDeltaRuleSanity) {
  const GdnCase s = {2, 6, 64, 64};
  for (bool chunked : {false, true}) {
    SCOPED_TRACE(chunked ? "chunked" : "recurrent");
    GdnData d = make_gdn_data(s, 1, 950);
    Cmp guard("gdn_delta_rule buffers");
    {
      Cmp cmp("beta = 0, g = 0 leaves S unchanged");
      GdnData z = d;
      std::fill(z.g.begin(), z.g.end(), 0.0f);
      std::fill(z.beta.begin(), z.beta.end(), 0.0f);
      const GdnOut got = gdn_run(be(), guard, z, {{1, chunked}});
      const GdnOut ref = gdn_reference(z, 0, 1, std::vector<double>(z.S0.begin(), z.S0.end()));
      for (size_t i = 0; i < got.S.size(); ++i) cmp(got.S[i], z.S0[i], 1e-6 * std::fabs(z.S0[i]), [&] { return "S[" + std::to_string(i) + "]"; });
      compare_gdn(cmp, s, got, ref, 1, 1e-5);  // o = S^T q: a length-64 fp32 dot, relative to the head's max |o|
      cmp.report();
    }
    {
      Cmp cmp("one step from S = 0");
      GdnData z = d;
      std::fill(z.S0.begin(), z.S0.end(), 0.0f);
      const GdnOut got = gdn_run(be(), guard, z, {{1, chunked}});
      const float* row = z.qkv.data();
      for (int h = 0; h < s.n_v; ++h) {
        const int kh = h % s.n_k;
        const float* q = row + kh * s.d_k;
        const float* k = row + (s.n_k + kh) * s.d_k;
        const float* v = row + 2 * s.n_k * s.d_k + h * s.d_v;
        const double b = z.beta[size_t(h)];
        double kq = 0;
        for (int i = 0; i < s.d_k; ++i) kq += double(k[i]) * q[i];
        for (int i = 0; i < s.d_k; ++i)
          for (int j = 0; j < s.d_v; ++j) {
            const double want = b * k[i] * v[j];
            cmp(got.S[(size_t(h) * s.d_k + size_t(i)) * s.d_v + size_t(j)], want, 1e-6 * std::fabs(want) + 1e-12,
                [&] { return at({{"S head", h}, {"i", i}, {"j", j}}); });
          }
        for (int j = 0; j < s.d_v; ++j) {
          const double want = b * kq * v[j];
          // o = sum_i S_ij q_i: a length-d_k sum with cancellation, so relative to sum_i |S_ij q_i|.
          double scale = 0;
          for (int i = 0; i < s.d_k; ++i) scale += std::fabs(b * k[i] * v[j] * q[i]);
          cmp(got.out[size_t(h) * s.d_v + size_t(j)], want, red_tol(s.d_k) * scale + 1e-12,
              [&] { return at({{"o head", h}, {"j", j}}); });
        }
      }
      cmp.report();
    }
    guard.report();
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuOps, ::testing::Values(1, 2), threads_name);

}  // namespace
}  // namespace df
