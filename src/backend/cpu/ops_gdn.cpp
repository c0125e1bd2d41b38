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
#include "backend/cpu/small_gemm.h"
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

// e^{gam[t] - gam[s]} for s = 0 .. count - 1 into out, 16 at a time (a chunk needs ~64 x 64 of
// them). gam is non-increasing, so for s <= t the exponent is <= 0.
void exp_differences(float gt, const float* gam, int count, float* out) {
  int s = 0;
#if defined(__AVX512F__)
  const __m512 g = _mm512_set1_ps(gt);
  for (; s + 16 <= count; s += 16) _mm512_storeu_ps(out + s, cpu::exp16(_mm512_sub_ps(g, _mm512_loadu_ps(gam + s))));
#endif
  for (; s < count; ++s) out[s] = std::exp(gt - gam[s]);
}

// Per-thread work arrays of one chunk (no allocation per call once grown).
struct ChunkScratch {
  std::vector<float> gam, ex, KT, Q, L, QK, WK, KdT;
  void size_for(int dk, int dv) {
    const size_t c = kChunk;
    gam.resize(c), ex.resize(c), KT.resize(size_t(dk) * c), Q.resize(c * size_t(dk)), L.resize(c * c),
        QK.resize(c * c), WK.resize(c * size_t(dv + dk)), KdT.resize(size_t(dk) * c);
  }
};

// The chunked (WY) form over one head, chunk by chunk; its products run as small_gemm calls.
//   G = K K^T, P = Q K^T                       L[t][s] = beta_t G[t][s] e^{gam_t - gam_s} (s < t)
//                                              QK[t][s] = P[t][s] e^{gam_t - gam_s} (s <= t)
//   rows [W | Kc]_t = [beta_t v_t | beta_t e^{gam_t} k_t], then (I + L)^-1 by forward substitution
//   V_new = W - Kc S0                          (over W)
//   O = (e^{gam} Q) S0 + QK V_new
//   S = e^{gam_last} S0 + Kd^T V_new           Kd^T[i][s] = k_s[i] e^{gam_last - gam_s}
void chunked_head(const GdnShape& sh, const HeadIo& io, int h, int rows, float* S) {
  const int dk = sh.d_k, dv = sh.d_v, wk = dv + dk;
  thread_local ChunkScratch sc;
  sc.size_for(dk, dv);
  float *gam = sc.gam.data(), *ex = sc.ex.data(), *KT = sc.KT.data(), *Q = sc.Q.data(), *L = sc.L.data(),
        *QK = sc.QK.data(), *WK = sc.WK.data(), *KdT = sc.KdT.data();
  using cpu::GemmOperand;
  using cpu::small_gemm;
  for (int c0 = 0; c0 < rows; c0 += kChunk) {
    const int n = std::min(kChunk, rows - c0);
    auto row = [&](int t) { return io.qkv + size_t(c0 + t) * io.qkv_stride; };
    auto beta = [&](int t) { return io.beta[size_t(c0 + t) * io.n_v + h]; };
    float cum = 0;
    for (int t = 0; t < n; ++t) gam[t] = cum += io.g[size_t(c0 + t) * io.n_v + h];
    for (int t = 0; t < n; ++t) {  // K^T (keys as columns) and Q as rows
      const float* k = row(t) + io.k_off;
      for (int i = 0; i < dk; ++i) KT[size_t(i) * n + t] = k[i];
      std::copy(row(t) + io.q_off, row(t) + io.q_off + dk, Q + size_t(t) * dk);
    }
    // Gram products: rows t of K (read from the qkv rows) and of Q, times K^T.
    small_gemm(n, n, dk, GemmOperand{row(0) + io.k_off, int(io.qkv_stride)}, GemmOperand{KT, n}, L, kChunk, 0.0f);
    small_gemm(n, n, dk, GemmOperand{Q, dk}, GemmOperand{KT, n}, QK, kChunk, 0.0f);
    for (int t = 0; t < n; ++t) {
      exp_differences(gam[t], gam, t + 1, ex);
      float* Lt = L + size_t(t) * kChunk;
      float* Pt = QK + size_t(t) * kChunk;
      const float bt = beta(t);
      for (int s = 0; s < t; ++s) Lt[s] = bt * Lt[s] * ex[s];
      for (int s = 0; s <= t; ++s) Pt[s] *= ex[s];
      std::fill(Pt + t + 1, Pt + n, 0.0f);  // QK V_new below runs over all n columns
    }
    // Forward substitution with (I + L) over the rows [W | Kc] (dv + dk floats each).
    for (int t = 0; t < n; ++t) {
      float* Rt = WK + size_t(t) * wk;
      const float bt = beta(t), bet = bt * std::exp(gam[t]);
      const float* v = row(t) + io.v_off;
      const float* k = row(t) + io.k_off;
      for (int j = 0; j < dv; ++j) Rt[j] = bt * v[j];
      for (int i = 0; i < dk; ++i) Rt[dv + i] = bet * k[i];
      const float* Lt = L + size_t(t) * kChunk;
      for (int s = 0; s < t; ++s) {
        const float l = Lt[s];
        const float* Rs = WK + size_t(s) * wk;
        for (int j = 0; j < wk; ++j) Rt[j] -= l * Rs[j];
      }
    }
    // V_new = W - Kc S0, over W.
    small_gemm(n, dv, dk, GemmOperand{WK + dv, wk}, GemmOperand{S, dv}, WK, wk, 1.0f, /*subtract=*/true);
    // O = (e^{gam} Q) S0 + QK V_new.
    for (int t = 0; t < n; ++t) {
      const float et = std::exp(gam[t]);
      float* q = Q + size_t(t) * dk;
      for (int i = 0; i < dk; ++i) q[i] *= et;
    }
    float* out = io.out + size_t(c0) * io.out_stride;
    small_gemm(n, dv, dk, GemmOperand{Q, dk}, GemmOperand{S, dv}, out, int(io.out_stride), 0.0f);
    small_gemm(n, dv, n, GemmOperand{QK, kChunk}, GemmOperand{WK, wk}, out, int(io.out_stride), 1.0f);
    // S = e^{gam_last} S0 + Kd^T V_new.
    const float glast = gam[n - 1];
    exp_differences(glast, gam, n, ex);
    for (int i = 0; i < dk; ++i)
      for (int s = 0; s < n; ++s) KdT[size_t(i) * n + s] = KT[size_t(i) * n + s] * ex[s];
    small_gemm(dk, dv, n, GemmOperand{KdT, n}, GemmOperand{WK, wk}, S, dv, std::exp(glast));
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
