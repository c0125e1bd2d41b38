// The Gated DeltaNet delta rule, per value head (heads run in parallel; each owns its state).
// State layout S[h][i][j]: i = key index, j = value index, so the inner loops run over the
// contiguous value dimension.
//   recurrent: per token, S = a S; d = b (v - S^T k); S += k d^T; o = S^T q   (decode, verify)
//   chunked:   the same in blocks of 64 tokens with the WY form (prefill); see
//              docs/architecture notes: T = (I + L)^-1 by forward substitution.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/simd.h"
#include "util/error.h"

namespace df {

namespace {

constexpr int kChunk = 64;
constexpr int kMaxHeadDim = 512;  // validated at model load

struct HeadIo {
  const float* qkv;
  size_t qkv_stride;
  const float* g;
  const float* beta;
  int n_v;
  size_t q_off, k_off, v_off;  // offsets of this head's q, k, v inside a qkv row
  float* out;                  // this head's output at row 0
  size_t out_stride;
};

void recurrent_head(const GdnShape& sh, const HeadIo& io, int h, int rows, float* S) {
  const int dk = sh.d_k, dv = sh.d_v;
  float m[kMaxHeadDim], delta[kMaxHeadDim];  // no allocation on the decode path
  for (int t = 0; t < rows; ++t) {
    const float* row = io.qkv + size_t(t) * io.qkv_stride;
    const float* q = row + io.q_off;
    const float* k = row + io.k_off;
    const float* v = row + io.v_off;
    const float alpha = std::exp(io.g[size_t(t) * io.n_v + h]);
    const float b = io.beta[size_t(t) * io.n_v + h];
    std::fill(m, m + dv, 0.0f);
    for (int i = 0; i < dk; ++i) {  // decay and read the memory in one pass
      float* Si = S + size_t(i) * dv;
      const float ki = k[i];
      for (int j = 0; j < dv; ++j) {
        Si[j] *= alpha;
        m[j] += Si[j] * ki;
      }
    }
    for (int j = 0; j < dv; ++j) delta[j] = b * (v[j] - m[j]);
    float* o = io.out + size_t(t) * io.out_stride;
    std::fill(o, o + dv, 0.0f);
    for (int i = 0; i < dk; ++i) {  // write, then read with the updated state
      float* Si = S + size_t(i) * dv;
      const float ki = k[i], qi = q[i];
      for (int j = 0; j < dv; ++j) {
        Si[j] += ki * delta[j];
        o[j] += Si[j] * qi;
      }
    }
  }
}

void chunked_head(const GdnShape& sh, const HeadIo& io, int h, int rows, float* S) {
  const int dk = sh.d_k, dv = sh.d_v;
  std::vector<float> gam(kChunk), L(kChunk * kChunk), W(size_t(kChunk) * dv), Kc(size_t(kChunk) * dk),
      QK(kChunk * kChunk);
  for (int c0 = 0; c0 < rows; c0 += kChunk) {
    const int n = std::min(kChunk, rows - c0);
    auto q = [&](int t) { return io.qkv + size_t(c0 + t) * io.qkv_stride + io.q_off; };
    auto k = [&](int t) { return io.qkv + size_t(c0 + t) * io.qkv_stride + io.k_off; };
    auto v = [&](int t) { return io.qkv + size_t(c0 + t) * io.qkv_stride + io.v_off; };
    auto beta = [&](int t) { return io.beta[size_t(c0 + t) * io.n_v + h]; };
    float cum = 0;
    for (int t = 0; t < n; ++t) gam[t] = cum += io.g[size_t(c0 + t) * io.n_v + h];
    using cpu::dot;
    // L[t][s] = beta_t (k_t . k_s) exp(G_t - G_s) for s < t;  QK[t][s] = (q_t . k_s) exp(G_t - G_s) for s <= t.
    for (int t = 0; t < n; ++t) {
      for (int s = 0; s < t; ++s) L[t * kChunk + s] = beta(t) * dot(k(t), k(s), dk) * std::exp(gam[t] - gam[s]);
      for (int s = 0; s <= t; ++s) QK[t * kChunk + s] = dot(q(t), k(s), dk) * std::exp(gam[t] - gam[s]);
    }
    // Forward substitution with (I + L): W = T (beta V), Kc = T (beta K e^G).
    for (int t = 0; t < n; ++t) {
      float* Wt = &W[size_t(t) * dv];
      float* Kt = &Kc[size_t(t) * dk];
      const float bt = beta(t), et = std::exp(gam[t]);
      for (int j = 0; j < dv; ++j) Wt[j] = bt * v(t)[j];
      for (int i = 0; i < dk; ++i) Kt[i] = bt * et * k(t)[i];
      for (int s = 0; s < t; ++s) {
        const float l = L[t * kChunk + s];
        const float* Ws = &W[size_t(s) * dv];
        const float* Ks = &Kc[size_t(s) * dk];
        for (int j = 0; j < dv; ++j) Wt[j] -= l * Ws[j];
        for (int i = 0; i < dk; ++i) Kt[i] -= l * Ks[i];
      }
    }
    // V_new = W - Kc S0 (stored over W).
    for (int t = 0; t < n; ++t) {
      float* Wt = &W[size_t(t) * dv];
      const float* Kt = &Kc[size_t(t) * dk];
      for (int i = 0; i < dk; ++i) {
        const float* Si = S + size_t(i) * dv;
        for (int j = 0; j < dv; ++j) Wt[j] -= Kt[i] * Si[j];
      }
    }
    // O_t = e^{G_t} S0^T q_t + sum_{s<=t} QK[t][s] V_new_s
    for (int t = 0; t < n; ++t) {
      float* o = io.out + size_t(c0 + t) * io.out_stride;
      const float et = std::exp(gam[t]);
      std::fill(o, o + dv, 0.0f);
      for (int i = 0; i < dk; ++i) {
        const float qi = q(t)[i] * et;
        const float* Si = S + size_t(i) * dv;
        for (int j = 0; j < dv; ++j) o[j] += qi * Si[j];
      }
      for (int s = 0; s <= t; ++s) {
        const float w = QK[t * kChunk + s];
        const float* Vs = &W[size_t(s) * dv];
        for (int j = 0; j < dv; ++j) o[j] += w * Vs[j];
      }
    }
    // S = e^{G_last} S0 + sum_s (k_s e^{G_last - G_s}) V_new_s^T
    const float glast = gam[n - 1], elast = std::exp(glast);
    for (int i = 0; i < dk; ++i) {
      float* Si = S + size_t(i) * dv;
      for (int j = 0; j < dv; ++j) Si[j] *= elast;
    }
    for (int s = 0; s < n; ++s) {
      const float f = std::exp(glast - gam[s]);
      const float* Vs = &W[size_t(s) * dv];
      const float* ks = k(s);
      for (int i = 0; i < dk; ++i) {
        const float ki = ks[i] * f;
        float* Si = S + size_t(i) * dv;
        for (int j = 0; j < dv; ++j) Si[j] += ki * Vs[j];
      }
    }
  }
}

}  // namespace

void CpuBackend::gdn_delta_rule(const GdnShape& shape, const float* qkv, size_t qkv_stride, const float* g,
                                const float* beta, int rows, float* S, float* out, bool chunked,
                                bool keep_state, const int32_t* rows_limit) {
  const size_t head_state = size_t(shape.d_k) * shape.d_v;
  if ((keep_state || rows_limit) && chunked) fail("gdn_delta_rule: keep_state and rows_limit need the recurrent form");
  if (rows_limit) rows = std::min(rows, *rows_limit);  // (backend memory is host memory here)
  pool_.parallel_for(shape.n_v, 1, [&](int64_t hb, int64_t he, int) {
    for (int64_t h = hb; h < he; ++h) {
      const int kh = int(h % shape.n_k);  // GGUF tiles value heads over key heads
      HeadIo io{qkv, qkv_stride, g, beta, shape.n_v,
                size_t(kh) * shape.d_k, size_t(shape.n_k + kh) * shape.d_k,
                size_t(2 * shape.n_k) * shape.d_k + size_t(h) * shape.d_v,
                out + size_t(h) * shape.d_v, size_t(shape.n_v) * shape.d_v};
      float* Sh = S + size_t(h) * head_state;
      if (chunked) {
        chunked_head(shape, io, int(h), rows, Sh);
      } else if (keep_state) {  // run on a copy of the head's state
        thread_local std::vector<float> work;
        work.assign(Sh, Sh + head_state);
        recurrent_head(shape, io, int(h), rows, work.data());
      } else {
        recurrent_head(shape, io, int(h), rows, Sh);
      }
    }
  });
}

}  // namespace df
