// The delta rule in chunks of 64 tokens (prefill, chunked = true): the CPU backend's WY form
// (ops_gdn.cpp chunked_head), split into a parallel part and a sequential one. fp32 on CUDA
// cores; tensor cores (tf32 / 3xTF32) are a later step.
//
// Per value head h and chunk (n <= 64 tokens, G_t the cumulative log-decay inside it, L the
// strictly lower beta_t (k_t . k_s) e^{G_t - G_s}, T = (I + L)^-1):
//   prepare (grid chunks x heads, no S needed): G; L and QK in shared memory from the chunk's
//     K K^T and Q K^T; U = T diag(beta) V and W = T diag(beta e^G) K by forward substitution
//     (one thread per column of [U | W], the column in registers); Qg = e^G Q, Kd = e^{G_last
//     - G} K, e^{G_last}. All into the scratch record of (chunk, head) (gdn_chunk_layout.h).
//   state (grid heads x d_v / 16, sequential over the chunks; the columns of S are independent
//     given the record): per chunk, v_new = U - W S_prev and o = Qg S_prev + QK v_new, then
//     S = e^{G_last} S_prev + Kd^T v_new, with the block's 16 columns of S in shared memory.
// A call longer than kPieceRows runs as consecutive pieces (prepare, state, prepare, ...), so
// the scratch stays bounded (113 MB at n_v = 48, d_k = d_v = 128).
//
// Cost per chunk per head at d_k = d_v = 128 (FLOP = 2 per FMA; the Gram products are computed
// full, the mask applied after): prepare K K^T + Q K^T 2.1 M, substitution 64*63/2 * 256
// columns 1.0 M; state W S 2.1 M, Qg S 2.1 M, QK v_new 0.5 M (lower half), Kd^T v_new 2.1 M:
// ~10 MFLOP, vs ~7.3 for the recurrence over the same 64 tokens (7 d_k d_v per token), but the
// sequential part walks rows / 64 chunks with 384 blocks instead of rows tokens with 192.
// Expected at the 27B shape (48 value heads, 48 layers), assuming ~20 TFLOP/s for prepare and
// ~15 for state (fp32 peak ~67; state is 1 wave of 3 blocks per SM, L2-fed, ~0.35 GB of L2
// reads per layer at 512 rows): 512 rows = 384 records per layer: prepare 1.2 GFLOP ~ 0.06
// ms, state 2.6 GFLOP ~ 0.17 ms; ~0.23 ms per layer, ~11 ms per prefill (recurrence: 38.5 ms).
// 4096 rows: 8x, ~90 ms (recurrence, linear in rows: ~310 ms).
// Measured on the H200 (docs/performance.md, session 6): 20.1 ms per 512-row prefill chunk of the
// 27B shape (48 layers), twice the estimate. Timed alone (H100, session 11, one layer, 512 rows):
// prepare 156-167 us, state 305 us, so both are ~2-3x the estimate. A likely cause in state: each
// of a head's d_v / 16 column blocks reads the chunk's whole record (W, Qg, Kd, QK: ~112 KB) from
// L2 again, with float4 loads of which a warp's 32 lanes use two addresses (its two row groups);
// staging the record in shared memory per chunk (coalesced, once per block) or tf32 mma for
// W S_prev, Qg S_prev and Kd^T v_new are the next steps (not yet tried).
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gdn_chunk_layout.h"
#include "backend/cuda/kernels.h"

namespace df::cuda {

namespace {

using gdn_chunk::kChunk;
using gdn_chunk::kCols;
using gdn_chunk::kPieceRows;
using gdn_chunk::Layout;

constexpr int kThreads = 256;  // both kernels; the 16 x 16 thread tilings below assume it

template <int DK>
constexpr size_t prepare_smem_bytes() {
  return (size_t(2) * kChunk * (DK + 1) + size_t(kChunk) * (kChunk + 1) + 4 * kChunk) * sizeof(float);
}

// grid (chunks of the piece, n_v). qkv, g, beta point at the piece's first row.
template <int DK>
__global__ void __launch_bounds__(kThreads)
    gdn_chunk_prepare_k(int n_k, int n_v, int dv, const float* __restrict__ qkv, size_t qkv_stride,
                        const float* __restrict__ g, const float* __restrict__ beta, int rows,
                        float* __restrict__ scratch) {
  pdl_wait();  // the previous state kernel may still read the scratch
  pdl_trigger();
  constexpr int C = kChunk, KS = DK + 1, LS = C + 1;  // padded rows: the Gram loop reads 16 rows at once
  extern __shared__ float smem[];
  float* Ks = smem;            // [C][KS] the chunk's k (zero rows past n)
  float* Qs = Ks + C * KS;     // [C][KS] q
  float* Ls = Qs + C * KS;     // [C][LS] L
  float* gam = Ls + C * LS;    // [C] G_t
  float* bet = gam + C;        // [C] beta_t
  float* eg = bet + C;         // [C] e^{G_t}
  float* ed = eg + C;          // [C] e^{G_last - G_t}
  const int c = blockIdx.x, h = blockIdx.y, kh = h % n_k, tid = threadIdx.x;  // GGUF tiles value heads over key heads
  const int c0 = c * C, n = min(C, rows - c0);
  const Layout lay{DK, dv};
  float* rec = scratch + (size_t(c) * n_v + h) * lay.record_floats();
  const size_t q_off = size_t(kh) * DK, k_off = size_t(n_k + kh) * DK, v_off = size_t(2 * n_k) * DK + size_t(h) * dv;

  for (int e = tid; e < C * DK; e += kThreads) {
    const int t = e / DK, i = e % DK;
    float q = 0.0f, k = 0.0f;
    if (t < n) {
      const float* row = qkv + size_t(c0 + t) * qkv_stride;
      q = row[q_off + i];
      k = row[k_off + i];
    }
    Qs[t * KS + i] = q;
    Ks[t * KS + i] = k;
  }
  if (tid < C) {
    gam[tid] = tid < n ? g[size_t(c0 + tid) * n_v + h] : 0.0f;
    bet[tid] = tid < n ? beta[size_t(c0 + tid) * n_v + h] : 0.0f;
  }
  __syncthreads();
  if (tid == 0) {  // in order, as the CPU sums it, so G matches it bit for bit
    float cum = 0.0f;
    for (int t = 0; t < n; ++t) gam[t] = cum += gam[t];
    for (int t = n; t < C; ++t) gam[t] = cum;  // masked rows: keeps every exponent <= 0
  }
  __syncthreads();
  const float gl = gam[n - 1];
  if (tid < C) {
    eg[tid] = tid < n ? expf(gam[tid]) : 0.0f;
    ed[tid] = tid < n ? expf(gl - gam[tid]) : 0.0f;
  }

  // Gram products: thread (ty, tx) owns rows t = ty + 16 a, columns s = tx + 16 b.
  const int tx = tid % 16, ty = tid / 16;
  float kk[4][4] = {}, qk[4][4] = {};
  for (int i = 0; i < DK; ++i) {
    float ka[4], qa[4], kb[4];
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      ka[a] = Ks[(ty + 16 * a) * KS + i];
      qa[a] = Qs[(ty + 16 * a) * KS + i];
      kb[a] = Ks[(tx + 16 * a) * KS + i];
    }
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        kk[a][b] = fmaf(ka[a], kb[b], kk[a][b]);
        qk[a][b] = fmaf(qa[a], kb[b], qk[a][b]);
      }
  }
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int t = ty + 16 * a, s = tx + 16 * b;
      const float dec = (s <= t && t < n) ? expf(gam[t] - gam[s]) : 0.0f;  // 0 masks the rest
      Ls[t * LS + s] = s < t ? bet[t] * kk[a][b] * dec : 0.0f;
      rec[lay.qk() + size_t(t) * C + s] = qk[a][b] * dec;
    }
  __syncthreads();  // Ls, eg, ed complete

  for (int e = tid; e < C * DK; e += kThreads) {
    const int t = e / DK, i = e % DK;
    rec[lay.qg() + e] = Qs[t * KS + i] * eg[t];
    rec[lay.kd() + e] = Ks[t * KS + i] * ed[t];
  }
  if (tid < 4) rec[lay.el() + tid] = tid == 0 ? expf(gl) : 0.0f;

  // Forward substitution (I + L) X = B, one column of [U | W] per thread, in registers:
  // B = beta V (U columns) or beta e^G K (W columns); masked rows give 0.
  for (int col = tid; col < dv + DK; col += kThreads) {
    const bool is_v = col < dv;
    float x[C];
#pragma unroll
    for (int t = 0; t < C; ++t) {
      float b = 0.0f;
      if (t < n) b = is_v ? bet[t] * qkv[size_t(c0 + t) * qkv_stride + v_off + col] : bet[t] * eg[t] * Ks[t * KS + col - dv];
      x[t] = b;
    }
    float* dst = rec + (is_v ? lay.u() + col : lay.w() + (col - dv));
    const int stride = is_v ? dv : DK;
#pragma unroll
    for (int t = 0; t < C; ++t) {
#pragma unroll
      for (int s = 0; s < t; ++s) x[t] = fmaf(-Ls[t * LS + s], x[s], x[t]);
      dst[size_t(t) * stride] = x[t];
    }
  }
}

// grid (n_v, d_v / kCols): one head's kCols value columns, over the piece's chunks in order.
// out points at the piece's first row.
template <int DK>
__global__ void __launch_bounds__(kThreads)
    gdn_chunk_state_k(int n_v, int dv, int rows, const float* __restrict__ scratch, float* __restrict__ S,
                      float* __restrict__ out, size_t out_stride) {
  pdl_wait();
  pdl_trigger();
  constexpr int C = kChunk, J = kCols, SS = DK + 4;  // S rows padded: float4 reads of 8 columns hit distinct banks
  constexpr int kKeys = DK / 16;                     // keys per thread in the state update
  static_assert(kThreads == 16 * J && kKeys % 4 == 0, "thread tiling");
  __shared__ __align__(16) float St[J * SS];  // St[c][i] = S[h][i][j0 + c]
  __shared__ __align__(16) float Vn[C * J];   // Vn[t][c]: the chunk's v_new
  const int h = blockIdx.x, j0 = blockIdx.y * J, tid = threadIdx.x;
  const int c = tid % J, grp = tid / J;  // column; row group 0..15
  const Layout lay{DK, dv};
  float* Sh = S + size_t(h) * DK * dv;
  for (int e = tid; e < DK * J; e += kThreads) St[(e % J) * SS + e / J] = Sh[size_t(e / J) * dv + j0 + e % J];
  const int n_chunks = (rows + C - 1) / C;
  for (int k = 0; k < n_chunks; ++k) {
    const float* rec = scratch + (size_t(k) * n_v + h) * lay.record_floats();
    const int n = min(C, rows - k * C);
    __syncthreads();  // the previous update of St (or its load) is complete; Vn is free
    // Reads of S_prev for rows t = grp + 16 m: aw = W S_prev, aq = Qg S_prev.
    float aw[4] = {}, aq[4] = {};
    const float4* s4 = reinterpret_cast<const float4*>(St + c * SS);
    const float4* w4 = reinterpret_cast<const float4*>(rec + lay.w());
    const float4* q4 = reinterpret_cast<const float4*>(rec + lay.qg());
    for (int i4 = 0; i4 < DK / 4; ++i4) {
      const float4 sv = s4[i4];
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const int t = grp + 16 * m;
        const float4 w = __ldg(w4 + t * (DK / 4) + i4), q = __ldg(q4 + t * (DK / 4) + i4);
        aw[m] = fmaf(w.x, sv.x, fmaf(w.y, sv.y, fmaf(w.z, sv.z, fmaf(w.w, sv.w, aw[m]))));
        aq[m] = fmaf(q.x, sv.x, fmaf(q.y, sv.y, fmaf(q.z, sv.z, fmaf(q.w, sv.w, aq[m]))));
      }
    }
#pragma unroll
    for (int m = 0; m < 4; ++m) {  // every row, masked ones too (0 - 0): the loops below read them
      const int t = grp + 16 * m;
      Vn[t * J + c] = __ldg(rec + lay.u() + size_t(t) * dv + j0 + c) - aw[m];
    }
    __syncthreads();  // Vn complete
    // Outputs: o_t = aq + sum_{s <= t} QK[t][s] v_new_s (QK is 0 above the diagonal).
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int t = grp + 16 * m;
      if (t >= n) continue;
      const float4* qk4 = reinterpret_cast<const float4*>(rec + lay.qk() + size_t(t) * C);
      float o = aq[m];
      for (int s4i = 0; s4i <= t / 4; ++s4i) {
        const float4 a = __ldg(qk4 + s4i);
        const float* v = Vn + 4 * s4i * J + c;
        o = fmaf(a.x, v[0], o);
        o = fmaf(a.y, v[J], o);
        o = fmaf(a.z, v[2 * J], o);
        o = fmaf(a.w, v[3 * J], o);
      }
      out[size_t(k * C + t) * out_stride + size_t(h) * dv + j0 + c] = o;
    }
    // State: S = e^{G_last} S_prev + Kd^T v_new, keys i0 .. i0 + kKeys of column c. Only this
    // thread touches those St elements until the next chunk's barrier.
    const float el = __ldg(rec + lay.el());
    const int i0 = grp * kKeys;
    float st[kKeys];
#pragma unroll
    for (int ii = 0; ii < kKeys; ++ii) st[ii] = St[c * SS + i0 + ii] * el;
    const float4* kd4 = reinterpret_cast<const float4*>(rec + lay.kd() + i0);
    for (int s = 0; s < n; ++s) {
      const float v = Vn[s * J + c];
#pragma unroll
      for (int p = 0; p < kKeys / 4; ++p) {
        const float4 kd = __ldg(kd4 + s * (DK / 4) + p);
        st[4 * p + 0] = fmaf(kd.x, v, st[4 * p + 0]);
        st[4 * p + 1] = fmaf(kd.y, v, st[4 * p + 1]);
        st[4 * p + 2] = fmaf(kd.z, v, st[4 * p + 2]);
        st[4 * p + 3] = fmaf(kd.w, v, st[4 * p + 3]);
      }
    }
#pragma unroll
    for (int ii = 0; ii < kKeys; ++ii) St[c * SS + i0 + ii] = st[ii];
  }
  __syncthreads();
  for (int e = tid; e < DK * J; e += kThreads) Sh[size_t(e / J) * dv + j0 + e % J] = St[(e % J) * SS + e / J];
}

template <int DK>
void run_chunked(const GdnShape& sh, const float* qkv, size_t qkv_stride, const float* g, const float* beta,
                 int rows, float* S, float* out, float* scratch, cudaStream_t s) {
  constexpr size_t smem = prepare_smem_bytes<DK>();  // above the default 48 KiB
  (void)raise_smem_limit<gdn_chunk_prepare_k<DK>>(int(smem));  // a refusal shows as the launch error
  const size_t out_stride = size_t(sh.n_v) * sh.d_v;
  for (int p0 = 0; p0 < rows; p0 += kPieceRows) {
    const int pr = std::min(kPieceRows, rows - p0);
    const size_t gate0 = size_t(p0) * sh.n_v;
    launch(gdn_chunk_prepare_k<DK>, dim3(ceil_div(pr, kChunk), unsigned(sh.n_v)), kThreads, smem, s, sh.n_k, sh.n_v,
           sh.d_v, qkv + size_t(p0) * qkv_stride, qkv_stride, g + gate0, beta + gate0, pr, scratch);
    launch(gdn_chunk_state_k<DK>, dim3(unsigned(sh.n_v), unsigned(sh.d_v / kCols)), kThreads, 0, s, sh.n_v, sh.d_v, pr,
           static_cast<const float*>(scratch), S, out + size_t(p0) * out_stride, out_stride);
  }
}

}  // namespace

size_t gdn_chunked_scratch_bytes(const GdnShape& sh, int rows) {
  return gdn_chunk::scratch_floats(sh.n_v, sh.d_k, sh.d_v, rows) * sizeof(float);
}

bool gdn_chunked_supports(const GdnShape& sh) { return gdn_chunk::supports(sh.d_k, sh.d_v); }

void gdn_delta_rule_chunked(const GdnShape& sh, const float* qkv, size_t qkv_stride, const float* g,
                            const float* beta, int rows, float* S, float* out, float* scratch, cudaStream_t s) {
  if (sh.d_k == 128) {
    run_chunked<128>(sh, qkv, qkv_stride, g, beta, rows, S, out, scratch, s);
  } else {
    run_chunked<64>(sh, qkv, qkv_stride, g, beta, rows, S, out, scratch, s);
  }
}

}  // namespace df::cuda
