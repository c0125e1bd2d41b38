// Double-precision reference ops; see reference_ops.h.
#include "support/reference_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace df::ref {

double silu(double x) { return x / (1.0 + std::exp(-x)); }  // exp overflow -> inf -> x/inf = -0: correct limit

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double softplus(double x) {
  // log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow for large x, no cancellation for x << 0.
  return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x)));
}

uint16_t f16_bits(double x) {
  if (std::isnan(x)) return 0x7e00;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (a == 0) return sign;
  int e = 0;
  std::frexp(a, &e);                       // a = m * 2^e, m in [0.5, 1): floor(log2 a) = e - 1
  const int E = std::max(e - 1, -14);      // binade (subnormals share the quantum of 2^-14)
  const double quantum = std::ldexp(1.0, E - 10);
  const double r = std::nearbyint(a / quantum) * quantum;  // a/quantum is exact; ties to even
  if (r > 65504.0) return uint16_t(sign | 0x7c00);
  if (r < std::ldexp(1.0, -14)) return uint16_t(sign | uint16_t(r / std::ldexp(1.0, -24)));  // subnormal (or 0)
  int e2 = 0;
  const double m = std::frexp(r, &e2);     // r = m * 2^e2, m in [0.5, 1)
  const int biased = e2 - 1 + 15;
  const auto mant = uint16_t(std::lround((m * 2.0 - 1.0) * 1024.0));
  return uint16_t(sign | uint16_t(biased << 10) | mant);
}

double f16_value(uint16_t h) {
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  const int ex = (h >> 10) & 31;
  const int mant = h & 1023;
  if (ex == 31) return mant ? std::numeric_limits<double>::quiet_NaN() : s * std::numeric_limits<double>::infinity();
  if (ex == 0) return s * std::ldexp(double(mant), -24);
  return s * std::ldexp(1.0 + mant / 1024.0, ex - 15);
}

double bf16_value(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::vector<double> matmul(const std::vector<double>& W, int64_t n_out, int64_t n_in, const std::vector<double>& x,
                           int rows) {
  std::vector<double> y(size_t(rows) * size_t(n_out));
  for (int r = 0; r < rows; ++r)
    for (int64_t o = 0; o < n_out; ++o) {
      double s = 0;
      const double* wr = &W[size_t(o) * size_t(n_in)];
      const double* xr = &x[size_t(r) * size_t(n_in)];
      for (int64_t k = 0; k < n_in; ++k) s += wr[k] * xr[k];
      y[size_t(r) * size_t(n_out) + size_t(o)] = s;
    }
  return y;
}

void rms_norm(const double* x, const double* w, int dim, double eps, double* out) {
  double ss = 0;
  for (int i = 0; i < dim; ++i) ss += x[i] * x[i];
  const double r = 1.0 / std::sqrt(ss / dim + eps);
  for (int i = 0; i < dim; ++i) out[i] = x[i] * r * w[i];
}

void rope_neox(double* head, int n_rot, double pos, double theta) {
  const int half = n_rot / 2;
  for (int i = 0; i < half; ++i) {
    const double ang = pos * std::pow(theta, -2.0 * i / n_rot);
    const double c = std::cos(ang), s = std::sin(ang);
    const double a = head[i], b = head[i + half];
    head[i] = a * c - b * s;
    head[i + half] = b * c + a * s;
  }
}

void attention_head(const double* q, const std::vector<const double*>& k, const std::vector<const double*>& v,
                    int head_dim, double scale, double* out, std::vector<double>* p) {
  const size_t n = k.size();
  std::vector<double> s(n);
  double mx = -std::numeric_limits<double>::infinity();
  for (size_t j = 0; j < n; ++j) {
    double d = 0;
    for (int i = 0; i < head_dim; ++i) d += q[i] * k[j][i];
    s[j] = d * scale;
    mx = std::max(mx, s[j]);
  }
  double z = 0;
  for (size_t j = 0; j < n; ++j) z += (s[j] = std::exp(s[j] - mx));
  for (size_t j = 0; j < n; ++j) s[j] /= z;
  for (int i = 0; i < head_dim; ++i) out[i] = 0;
  for (size_t j = 0; j < n; ++j)
    for (int i = 0; i < head_dim; ++i) out[i] += s[j] * v[j][i];
  if (p) *p = std::move(s);
}

void conv1d_silu(const std::vector<double>& x, int rows, int channels, const std::vector<double>& w, int kernel,
                 std::vector<double>& state, std::vector<double>& out) {
  const int hist = kernel - 1;
  // seq = [state rows | x rows], time-major.
  std::vector<double> seq(size_t(hist + rows) * channels);
  std::copy(state.begin(), state.begin() + size_t(hist) * channels, seq.begin());
  std::copy(x.begin(), x.begin() + size_t(rows) * channels, seq.begin() + size_t(hist) * channels);
  out.assign(size_t(rows) * channels, 0.0);
  for (int t = 0; t < rows; ++t)
    for (int c = 0; c < channels; ++c) {
      double s = 0;
      for (int j = 0; j < kernel; ++j) s += w[size_t(c) * kernel + j] * seq[size_t(t + j) * channels + c];
      out[size_t(t) * channels + c] = silu(s);
    }
  for (int i = 0; i < hist; ++i)
    for (int c = 0; c < channels; ++c) state[size_t(i) * channels + c] = seq[size_t(rows + i) * channels + c];
}

void l2_normalize(double* x, int dim, double eps, double scale) {
  double ss = 0;
  for (int i = 0; i < dim; ++i) ss += x[i] * x[i];
  const double d = std::max(std::sqrt(ss), eps);
  for (int i = 0; i < dim; ++i) x[i] = x[i] / d * scale;
}

void gdn_delta_rule(const GdnDims& d, const std::vector<double>& qkv, const std::vector<double>& g,
                    const std::vector<double>& beta, int rows, std::vector<double>& S, std::vector<double>& out) {
  const size_t conv_dim = size_t(2 * d.n_k * d.d_k + d.n_v * d.d_v);
  out.assign(size_t(rows) * d.n_v * d.d_v, 0.0);
  std::vector<double> m(d.d_v), delta(d.d_v);
  for (int t = 0; t < rows; ++t) {
    const double* row = &qkv[size_t(t) * conv_dim];
    for (int h = 0; h < d.n_v; ++h) {
      const int kh = h % d.n_k;
      const double* q = row + size_t(kh) * d.d_k;
      const double* k = row + size_t(d.n_k) * d.d_k + size_t(kh) * d.d_k;
      const double* v = row + size_t(2 * d.n_k) * d.d_k + size_t(h) * d.d_v;
      double* Sh = &S[size_t(h) * d.d_k * d.d_v];
      const double alpha = std::exp(g[size_t(t) * d.n_v + h]);
      const double b = beta[size_t(t) * d.n_v + h];
      for (size_t e = 0; e < size_t(d.d_k) * d.d_v; ++e) Sh[e] *= alpha;  // S <- alpha S
      for (int j = 0; j < d.d_v; ++j) {                                   // m = S^T k
        double s = 0;
        for (int i = 0; i < d.d_k; ++i) s += Sh[size_t(i) * d.d_v + j] * k[i];
        m[j] = s;
      }
      for (int j = 0; j < d.d_v; ++j) delta[j] = b * (v[j] - m[j]);  // delta = beta (v - m)
      for (int i = 0; i < d.d_k; ++i)                                  // S <- S + k delta^T
        for (int j = 0; j < d.d_v; ++j) Sh[size_t(i) * d.d_v + j] += k[i] * delta[j];
      double* o = &out[(size_t(t) * d.n_v + h) * d.d_v];
      for (int j = 0; j < d.d_v; ++j) {  // o = S^T q with the updated state
        double s = 0;
        for (int i = 0; i < d.d_k; ++i) s += Sh[size_t(i) * d.d_v + j] * q[i];
        o[j] = s;
      }
    }
  }
}

void gated_rms_norm(const double* x, const double* z, const double* w, int dim, double eps, double* out) {
  rms_norm(x, w, dim, eps, out);
  for (int i = 0; i < dim; ++i) out[i] *= silu(z[i]);
}

}  // namespace df::ref
