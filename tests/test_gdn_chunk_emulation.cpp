// Host emulation of the CUDA chunked delta rule (src/backend/cuda/deltanet_chunked.cu): the same
// two phases (prepare per chunk and head; state per head and kCols value columns, in chunk
// order) over the same scratch records (gdn_chunk_layout.h), pieces of kPieceRows included, in
// the kernels' order of operations, against the CPU backend's recurrent form. CI has no GPU:
// this proves the restructured math there; test_cuda_ops checks the kernels themselves.
//
// Tolerance: the CPU delta-rule tests' 1e-4 of max |value| + 1e-4 relative (the worst case seen
// here is ~1% of it, printed per case as [gdn-emu]).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/gdn_chunk_layout.h"

namespace df {
namespace {

using cuda::gdn_chunk::kChunk;
using cuda::gdn_chunk::kCols;
using cuda::gdn_chunk::kPieceRows;
using cuda::gdn_chunk::Layout;

struct Inputs {
  GdnShape sh;
  int rows = 0;
  size_t stride = 0;  // qkv row stride
  std::vector<float> qkv, g, beta, S0;
};

Inputs make_inputs(const GdnShape& sh, int rows, double g_lo, double g_hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Inputs in;
  in.sh = sh;
  in.rows = rows;
  in.stride = size_t(sh.conv_dim()) + 3;
  in.qkv.assign(size_t(rows) * in.stride, 0.0f);
  for (int t = 0; t < rows; ++t) {
    float* row = &in.qkv[size_t(t) * in.stride];
    for (int i = 0; i < sh.conv_dim(); ++i) row[i] = float(normal(rng));
    for (int part = 0; part < 2; ++part)  // L2-normalised q (scaled by 1/sqrt(d_k)) and k
      for (int h = 0; h < sh.n_k; ++h) {
        float* v = row + size_t(part * sh.n_k + h) * sh.d_k;
        double nn = 0;
        for (int i = 0; i < sh.d_k; ++i) nn += double(v[i]) * v[i];
        const double f = (part == 0 ? 1.0 / std::sqrt(double(sh.d_k)) : 1.0) / std::sqrt(nn);
        for (int i = 0; i < sh.d_k; ++i) v[i] = float(v[i] * f);
      }
  }
  std::uniform_real_distribution<double> gate(g_lo, g_hi), b(0.05, 0.95);
  in.g.resize(size_t(rows) * sh.n_v);
  in.beta.resize(in.g.size());
  for (auto& x : in.g) x = float(gate(rng));
  for (auto& x : in.beta) x = float(b(rng));
  in.S0.resize(sh.state_floats());
  for (auto& x : in.S0) x = float(0.3 * normal(rng));
  return in;
}

// gdn_chunk_prepare_k for chunk c of the piece starting at row p0 (pr rows), value head h.
void prepare(const Inputs& in, int p0, int pr, int c, int h, float* scratch) {
  const GdnShape& sh = in.sh;
  const int DK = sh.d_k, dv = sh.d_v, C = kChunk, kh = h % sh.n_k;
  const int c0 = p0 + c * C, n = std::min(C, pr - c * C);
  const Layout lay{DK, dv};
  float* rec = scratch + (size_t(c) * sh.n_v + h) * lay.record_floats();
  std::vector<float> Ks(size_t(C) * DK, 0.0f), Qs(Ks.size(), 0.0f), L(size_t(C) * C, 0.0f);
  std::vector<float> gam(C), bet(C, 0.0f), eg(C, 0.0f), ed(C, 0.0f);
  const size_t v_off = size_t(2 * sh.n_k) * DK + size_t(h) * dv;
  for (int t = 0; t < n; ++t) {
    const float* row = &in.qkv[size_t(c0 + t) * in.stride];
    for (int i = 0; i < DK; ++i) {
      Qs[size_t(t) * DK + i] = row[size_t(kh) * DK + i];
      Ks[size_t(t) * DK + i] = row[size_t(sh.n_k + kh) * DK + i];
    }
    bet[t] = in.beta[size_t(c0 + t) * sh.n_v + h];
  }
  float cum = 0.0f;
  for (int t = 0; t < n; ++t) gam[t] = cum += in.g[size_t(c0 + t) * sh.n_v + h];
  for (int t = n; t < C; ++t) gam[t] = cum;
  const float gl = gam[n - 1];
  for (int t = 0; t < n; ++t) eg[t] = std::exp(gam[t]), ed[t] = std::exp(gl - gam[t]);
  for (int t = 0; t < C; ++t)
    for (int s = 0; s < C; ++s) {
      float kk = 0.0f, qk = 0.0f;
      for (int i = 0; i < DK; ++i) {
        kk = std::fma(Ks[size_t(t) * DK + i], Ks[size_t(s) * DK + i], kk);
        qk = std::fma(Qs[size_t(t) * DK + i], Ks[size_t(s) * DK + i], qk);
      }
      const float dec = (s <= t && t < n) ? std::exp(gam[t] - gam[s]) : 0.0f;
      L[size_t(t) * C + s] = s < t ? bet[t] * kk * dec : 0.0f;
      rec[lay.qk() + size_t(t) * C + s] = qk * dec;
    }
  for (int t = 0; t < C; ++t)
    for (int i = 0; i < DK; ++i) {
      rec[lay.qg() + size_t(t) * DK + i] = Qs[size_t(t) * DK + i] * eg[t];
      rec[lay.kd() + size_t(t) * DK + i] = Ks[size_t(t) * DK + i] * ed[t];
    }
  for (int i = 0; i < 32; ++i) rec[lay.el() + i] = i == 0 ? std::exp(gl) : 0.0f;
  for (int col = 0; col < dv + DK; ++col) {  // one column of [U | W] per thread
    const bool is_v = col < dv;
    float x[kChunk];
    for (int t = 0; t < C; ++t)
      x[t] = t < n ? (is_v ? bet[t] * in.qkv[size_t(c0 + t) * in.stride + v_off + col]
                           : bet[t] * eg[t] * Ks[size_t(t) * DK + col - dv])
                   : 0.0f;
    float* dst = rec + (is_v ? lay.u() + col : lay.w() + (col - dv));
    const int stride = is_v ? dv : DK;
    for (int t = 0; t < C; ++t) {
      for (int s = 0; s < t; ++s) x[t] = std::fma(-L[size_t(t) * C + s], x[s], x[t]);
      dst[size_t(t) * stride] = x[t];
    }
  }
}

// gdn_chunk_state_k for value head h, columns j0 .. j0 + kCols, over the piece's pr rows. S is the
// whole state (n_v x d_k x d_v), out the piece's first output row. Each sum in the kernel's
// order: phase A over keys in order, outputs over s = 0 .. 4 (t / 4) + 3 (QK is 0 past t), the
// state update over all 64 rows (masked rows add exact zeros).
void state(const Inputs& in, int pr, int h, int j0, const float* scratch, float* S, float* out) {
  const GdnShape& sh = in.sh;
  const int DK = sh.d_k, dv = sh.d_v, C = kChunk, J = kCols;
  const Layout lay{DK, dv};
  const size_t out_stride = size_t(sh.n_v) * dv;
  float* Sh = S + size_t(h) * DK * dv;
  std::vector<float> Vn(size_t(C) * J), aq(size_t(C) * J);
  for (int k = 0; k * C < pr; ++k) {
    const float* rec = scratch + (size_t(k) * sh.n_v + h) * lay.record_floats();
    const int n = std::min(C, pr - k * C);
    for (int t = 0; t < C; ++t)  // phase A, every row: rows t of W and of Qg (the kernel's [W; Qg])
      for (int c = 0; c < J; ++c) {
        float aw = 0.0f, a = 0.0f;
        for (int i = 0; i < DK; ++i) {
          const float s = Sh[size_t(i) * dv + j0 + c];
          aw = std::fma(rec[lay.w() + size_t(t) * DK + i], s, aw);
          a = std::fma(rec[lay.qg() + size_t(t) * DK + i], s, a);
        }
        Vn[size_t(t) * J + c] = rec[lay.u() + size_t(t) * dv + j0 + c] - aw;
        aq[size_t(t) * J + c] = a;
      }
    for (int t = 0; t < n; ++t)
      for (int c = 0; c < J; ++c) {
        float o = aq[size_t(t) * J + c];
        for (int s = 0; s < 4 * (t / 4 + 1); ++s) o = std::fma(rec[lay.qk() + size_t(t) * C + s], Vn[size_t(s) * J + c], o);
        out[size_t(k * C + t) * out_stride + size_t(h) * dv + j0 + c] = o;
      }
    const float el = rec[lay.el()];
    for (int i = 0; i < DK; ++i)
      for (int c = 0; c < J; ++c) {
        float st = Sh[size_t(i) * dv + j0 + c] * el;
        for (int s = 0; s < C; ++s) st = std::fma(rec[lay.kd() + size_t(s) * DK + i], Vn[size_t(s) * J + c], st);
        Sh[size_t(i) * dv + j0 + c] = st;
      }
  }
}

// The whole call as the host launches it: pieces, each all prepare blocks then all state blocks.
void emulate(const Inputs& in, std::vector<float>& S, std::vector<float>& out) {
  const GdnShape& sh = in.sh;
  std::vector<float> scratch(cuda::gdn_chunk::scratch_floats(sh.n_v, sh.d_k, sh.d_v, in.rows),
                             std::numeric_limits<float>::quiet_NaN());
  const size_t out_stride = size_t(sh.n_v) * sh.d_v;
  for (int p0 = 0; p0 < in.rows; p0 += kPieceRows) {
    const int pr = std::min(kPieceRows, in.rows - p0);
    for (int c = 0; c * kChunk < pr; ++c)
      for (int h = 0; h < sh.n_v; ++h) prepare(in, p0, pr, c, h, scratch.data());
    for (int h = 0; h < sh.n_v; ++h)
      for (int j0 = 0; j0 < sh.d_v; j0 += kCols) state(in, pr, h, j0, scratch.data(), S.data(), out.data() + size_t(p0) * out_stride);
  }
}

// The CPU backend's form (chunked or recurrent) from S0.
void cpu_run(const Inputs& in, bool chunked, std::vector<float>& S, std::vector<float>& out) {
  std::unique_ptr<Backend> be = make_cpu_backend(1);
  auto put = [&](const std::vector<float>& v) {
    auto* p = static_cast<float*>(be->alloc(std::max<size_t>(v.size(), 1) * sizeof(float)));
    be->upload(p, v.data(), v.size() * sizeof(float));
    return p;
  };
  float *qkv = put(in.qkv), *g = put(in.g), *beta = put(in.beta), *Sd = put(in.S0), *od = put(out);
  be->gdn_delta_rule(in.sh, qkv, in.stride, g, beta, in.rows, Sd, od, chunked);
  be->download(S.data(), Sd, S.size() * sizeof(float));
  be->download(out.data(), od, out.size() * sizeof(float));
  for (float* p : {qkv, g, beta, Sd, od}) be->release(p);
}

// Number of elements outside |got - want| <= rtol (|want| + max|want|) (NaN counts as outside).
int64_t count_bad(const std::vector<float>& got, const std::vector<float>& want, double rtol, double* worst) {
  double mx = 0;
  for (float v : want) mx = std::max(mx, double(std::fabs(v)));
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = rtol * (std::fabs(double(want[i])) + mx), d = std::fabs(double(got[i]) - want[i]);
    if (!(d <= tol)) ++bad;
    if (std::isfinite(d)) *worst = std::max(*worst, d / tol);
  }
  return bad;
}

struct Regime {
  const char* name;
  double g_lo, g_hi;
};

TEST(GdnChunkEmulation, MatchesCpuRecurrentForm) {
  const Regime regimes[] = {{"typical", -1.5, 0.0}, {"strong decay", -30.0, -10.0}, {"near-1 decay", -1e-3, 0.0}};
  const GdnShape shapes[] = {{1, 2, 64, 64}, {2, 4, 128, 32}};
  uint64_t seed = 1;
  for (const GdnShape& sh : shapes)
    for (const Regime& r : regimes)
      for (int rows : {1, 33, 64, 65, 200, kPieceRows + 76}) {
        const std::string tag = std::string(r.name) + " k" + std::to_string(sh.n_k) + " v" + std::to_string(sh.n_v) +
                                " dk" + std::to_string(sh.d_k) + " dv" + std::to_string(sh.d_v) +
                                " rows=" + std::to_string(rows);
        SCOPED_TRACE(tag);
        const Inputs in = make_inputs(sh, rows, r.g_lo, r.g_hi, seed++);
        const size_t n_out = size_t(rows) * sh.n_v * sh.d_v;
        std::vector<float> S_emu = in.S0, out_emu(n_out, std::numeric_limits<float>::quiet_NaN());
        std::vector<float> S_ref(in.S0.size()), out_ref(n_out, std::numeric_limits<float>::quiet_NaN());
        emulate(in, S_emu, out_emu);
        cpu_run(in, false, S_ref, out_ref);
        const double rtol = 1e-4;
        double worst = 0;
        EXPECT_EQ(count_bad(out_emu, out_ref, rtol, &worst), 0) << "outputs";
        EXPECT_EQ(count_bad(S_emu, S_ref, rtol, &worst), 0) << "final state";
        std::cout << "[gdn-emu] " << tag << ": worst err/tol " << worst << "\n";
      }
}

// The check can fail: a 1% error in the final state (far below what a wrong decay, carry or
// head mapping gives) is outside the tolerance.
TEST(GdnChunkEmulation, ToleranceCatchesAOnePercentError) {
  const Inputs in = make_inputs({1, 2, 64, 64}, 130, -0.05, 0.0, 99);
  const size_t n_out = size_t(in.rows) * in.sh.n_v * in.sh.d_v;
  std::vector<float> S_emu = in.S0, out_emu(n_out), S_ref(in.S0.size()), out_ref(n_out);
  emulate(in, S_emu, out_emu);
  cpu_run(in, false, S_ref, out_ref);
  for (float& v : S_emu) v *= 1.01f;
  double worst = 0;
  EXPECT_GT(count_bad(S_emu, S_ref, 1e-4, &worst), 0);
}

}  // namespace
}  // namespace df
