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
//   state (grid heads x d_v / kCols, sequential over the chunks; the columns of S are
//     independent given the record): per chunk, v_new = U - W S_prev and o = Qg S_prev + QK
//     v_new, then S = e^{G_last} S_prev + Kd^T v_new, with the block's kCols columns of S in
//     shared memory (and each thread's share of them in registers while it updates them).
// A call longer than kPieceRows runs as consecutive pieces (prepare, state, prepare, ...), so
// the scratch stays bounded (113 MB at n_v = 48, d_k = d_v = 128).
//
// Cost per chunk per head at d_k = d_v = 128 (FLOP = 2 per FMA; the Gram products are computed
// full, the mask applied after): prepare K K^T + Q K^T 2.1 M, substitution 64*63/2 * 256
// columns 1.0 M; state W S 2.1 M, Qg S 2.1 M, QK v_new 0.5 M (lower half), Kd^T v_new 2.1 M:
// ~10 MFLOP, vs ~7.3 for the recurrence over the same 64 tokens (7 d_k d_v per token), but the
// sequential part walks rows / 64 chunks with 384 blocks instead of rows tokens with 192.
// Measured on the H200 (docs/performance.md, session 6): 20.1 ms per 512-row prefill chunk of the
// 27B shape (48 layers). Timed alone (H100, session 11, one layer, 512 rows), the first version
// took prepare 156-167 us, state 305 us, ~2-3x its estimates (~60 and ~170 us): its state
// blocks read the record from L2 with float4 loads of which a warp's 32 lanes used two addresses
// (one LDG.128 per 4 FMAs: load-instruction bound), and its prepare read shared memory one
// float at a time (Gram: 12 loads per 32 FMAs; substitution: one load per FMA).
//
// How the kernels now spend their time (session 12; reads counted in shared-memory wavefronts,
// which a warp's broadcast lanes share):
//   state: per chunk, each block copies the record's W, Qg, QK and Kd (112 KB) into a ring of
//     3 shared stages with cp.async (coalesced 128-byte lines, issued two 18 KB tiles ahead,
//     across chunk boundaries), and each thread computes 4 rows x kCols / 8 columns of [W; Qg]
//     S_prev, 2 rows of outputs and d_k / 32 keys x kCols / 8 columns of the state update from
//     float4 shared reads: phase A 6 reads per 32 FMAs, the update 6 per 32, the outputs 4 per
//     16. 256 threads, 68 KB of shared memory and <= 80 registers give 3 blocks per SM, so the
//     384 blocks at 48 heads are one wave. At 512 rows a layer's state pass reads 384 blocks x
//     8 chunks x 112 KB = 344 MB from L2 (~50-70 us at the H100's L2 bandwidth) and does 1.3 G
//     FMAs (~45 us at 3 blocks per SM at the fp32 peak): expected ~80-100 us, bound by both.
//     kCols = 32 (192 blocks, 2 an SM) halves the L2 reads at the cost of the wave's balance.
//   prepare: the Gram products read k and q 4 keys at a time (12 float4 reads per 128 FMAs) and
//     the substitution reads L 4 entries at a time (one broadcast float4 per 4 FMAs); same
//     sums in the same order as before, so the record is bit for bit the same. 86 KB of shared
//     memory: 2 blocks per SM, 384 blocks in 1.45 waves.
// Measured (H100, one layer, bench/gdn_kernels.cpp and Nsight Compute): not yet.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gdn_chunk_layout.h"
#include "backend/cuda/kernels.h"

namespace df::cuda {

namespace {

using gdn_chunk::kChunk;
using gdn_chunk::kCols;
using gdn_chunk::kPieceRows;
using gdn_chunk::Layout;

constexpr int kThreads = 256;  // both kernels; their thread tilings (16 x 16, 32 x 8) assume it

// 16 bytes global -> shared without a register round trip (L2 only: the record is read once
// per block); the wait's argument is how many of this thread's latest commit groups may still
// be in flight. (The GEMMs' helpers in imma_tiles.cuh come with headers this file does not need.)
__device__ __forceinline__ void copy16_async(uint32_t dst, const float* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void copy_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void copy_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Element i of a float4 / float2 (i a compile-time constant after unrolling: stays in registers).
__device__ __forceinline__ float elem(const float4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }
__device__ __forceinline__ float elem(const float2& v, int i) { return i == 0 ? v.x : v.y; }

// The prepare kernel's shared rows, padded by 4 floats: float4 reads stay aligned, and the Gram
// loop's reads of 8 rows at the same keys hit distinct banks.
template <int DK>
constexpr int kPrepKS = DK + 4;             // Ks, Qs rows
constexpr int kPrepLS = kChunk + 4;         // Ls rows

template <int DK>
constexpr size_t prepare_smem_bytes() {
  return (size_t(2) * kChunk * kPrepKS<DK> + size_t(kChunk) * kPrepLS + 4 * kChunk) * sizeof(float);
}

// grid (chunks of the piece, n_v). qkv, g, beta point at the piece's first row.
template <int DK>
__global__ void __launch_bounds__(kThreads)
    gdn_chunk_prepare_k(int n_k, int n_v, int dv, const float* __restrict__ qkv, size_t qkv_stride,
                        const float* __restrict__ g, const float* __restrict__ beta, int rows,
                        float* __restrict__ scratch) {
  pdl_wait();  // the previous state kernel may still read the scratch
  pdl_trigger();
  constexpr int C = kChunk, KS = kPrepKS<DK>, LS = kPrepLS;
  extern __shared__ __align__(16) float smem[];
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

  // Gram products: thread (ty, tx) owns rows t = ty + 16 a, columns s = tx + 16 b; keys in
  // order, read 4 at a time (12 float4 reads per 128 FMAs).
  const int tx = tid % 16, ty = tid / 16;
  float kk[4][4] = {}, qk[4][4] = {};
  for (int i4 = 0; i4 < DK / 4; ++i4) {
    float4 ka[4], qa[4], kb[4];
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      ka[a] = *reinterpret_cast<const float4*>(Ks + (ty + 16 * a) * KS + 4 * i4);
      qa[a] = *reinterpret_cast<const float4*>(Qs + (ty + 16 * a) * KS + 4 * i4);
      kb[a] = *reinterpret_cast<const float4*>(Ks + (tx + 16 * a) * KS + 4 * i4);
    }
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          kk[a][b] = fmaf(elem(ka[a], q), elem(kb[b], q), kk[a][b]);
          qk[a][b] = fmaf(elem(qa[a], q), elem(kb[b], q), qk[a][b]);
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
  if (tid < 32) rec[lay.el() + tid] = tid == 0 ? expf(gl) : 0.0f;

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
      for (int s4 = 0; s4 < (t + 3) / 4; ++s4) {  // L row t, 4 at a time (one broadcast read)
        const float4 l = *reinterpret_cast<const float4*>(Ls + t * LS + 4 * s4);
#pragma unroll
        for (int q = 0; q < 4; ++q)
          if (4 * s4 + q < t) x[t] = fmaf(-elem(l, q), x[4 * s4 + q], x[t]);
      }
      dst[size_t(t) * stride] = x[t];
    }
  }
}

// The state pass streams each chunk's record through a ring of kStages shared-memory stages
// (cp.async, issued kStages - 1 tiles ahead, across chunk boundaries), tile by tile in the
// order it is used: the W|Qg rows in 32-key slices (phase A), QK, then Kd in slices of 4096
// floats (phase B). Every tile is 4096 floats (A slices and QK padded: rows read as float4 by 8
// consecutive rows of a warp hit distinct banks).
template <int DK>
struct StateTiles {
  static constexpr int kA = DK / 32;                 // W|Qg slices: keys 32 j .. 32 j + 31
  static constexpr int kKd = DK / 64;                // Kd slices
  static constexpr int kKdTokens = 4096 / DK;        // tokens per Kd slice
  static constexpr int kPerChunk = kA + 1 + kKd;     // A slices, QK, Kd slices
  static constexpr int kAS = 36, kQS = kChunk + 4;   // A slice rows (128 = W then Qg), QK rows
  static constexpr int kStageFloats = 2 * kChunk * kAS;  // the largest tile (4608 floats)
  static constexpr int kStages = 3;
  static constexpr int kSS = DK + 4, kVS = kChunk + 4;  // St and Vt rows (float4-aligned, bank-shifted)
  static constexpr size_t smem_bytes() {
    return (size_t(kStages) * kStageFloats + size_t(kCols) * (kSS + kVS)) * sizeof(float);
  }
  static_assert(kChunk * kQS <= kStageFloats && kKdTokens * DK == 4096 && kChunk % kKdTokens == 0, "tiles");
};

// grid (n_v, d_v / kCols): one head's kCols value columns, over the piece's chunks in order.
// out points at the piece's first row. Thread (rg, cg), rg = 0..31, cg = 0..7, owns value
// columns j0 + cg + 8 j (j < kCols / 8) and, per chunk:
//   phase A: rows rg + 32 a of [W; Qg] times S_prev (a = 0, 1: W rows t = rg, rg + 32; a = 2,
//     3: Qg rows), summed over keys in order; then v_new = U - W S_prev of its W rows into Vt;
//   phase B: o_t = (Qg S_prev)_t + sum_{s <= t} QK[t][s] v_new_s for its rows t (s in order);
//     S = e^{G_last} S_prev + sum_s Kd[s]^T v_new_s (s in order, all 64 rows: masked rows add
//     exact zeros) for keys (d_k / 32) rg .. + d_k / 32 - 1: those elements of St are only
//     ever written by this thread, so it reads them into registers for phase B and writes them
//     back at its end, where the next chunk's phase A reads them (after a barrier). U waits in
//     Vt (again this thread's elements) from the chunk's start, so phase A holds no U registers.
// A warp is 8 consecutive rg x 4 consecutive cg, so each shared read is 4 or 8 distinct
// float4 (one bank wavefront), broadcast to the other lanes.
template <int DK>
__global__ void __launch_bounds__(kThreads, kCols == 16 ? 3 : 2)
    gdn_chunk_state_k(int n_v, int dv, int rows, const float* __restrict__ scratch, float* __restrict__ S,
                      float* __restrict__ out, size_t out_stride) {
  using T = StateTiles<DK>;
  constexpr int C = kChunk, J = kCols, CPT = J / 8, KPT = DK / 32;
  constexpr int AS = T::kAS, QS = T::kQS, SS = T::kSS, VS = T::kVS, NST = T::kStages;
  static_assert(kThreads == 256 && (J == 16 || J == 32) && (KPT == 2 || KPT == 4), "thread tiling");
  using KdVec = std::conditional_t<KPT == 4, float4, float2>;
  extern __shared__ __align__(16) float smem[];
  float* ring = smem;                          // [NST][kStageFloats]
  float* St = ring + NST * T::kStageFloats;    // [J][SS]: St[c][i] = S_prev[i][j0 + c]
  float* Vt = St + J * SS;                     // [J][VS]: Vt[c][t] = v_new[t][j0 + c]
  const int h = blockIdx.x, j0 = blockIdx.y * J, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int rg = 8 * (warp % 4) + lane % 8, cg = 4 * (warp / 4) + lane / 8;
  const Layout lay{DK, dv};
  const float* rec_h = scratch + size_t(h) * lay.record_floats();  // chunk k's record: rec_h + k * chunk_floats
  const int chunk_floats = n_v * int(lay.record_floats());           // < 2^31 for any shape supports() takes
  pdl_wait();  // S and the scratch come from earlier kernels
  pdl_trigger();
  float* Sh = S + size_t(h) * DK * dv;
#pragma unroll
  for (int ii = 0; ii < KPT; ++ii)
#pragma unroll
    for (int j = 0; j < CPT; ++j) St[(cg + 8 * j) * SS + KPT * rg + ii] = Sh[size_t(KPT * rg + ii) * dv + j0 + cg + 8 * j];

  const int n_chunks = (rows + C - 1) / C, n_tiles = n_chunks * T::kPerChunk;
  const uint32_t ring_s = uint32_t(__cvta_generic_to_shared(ring));
  // Tile g (chunk g / kPerChunk) into stage g % NST: 1024 float4 copies, 4 a thread, each
  // warp reading whole 128-byte lines. [W; Qg] are adjacent in the record (rows of d_k floats).
  auto load = [&](int g) {
    const int k = g / T::kPerChunk, jt = g % T::kPerChunk;
    const float* rec = rec_h + size_t(k) * chunk_floats;
    const uint32_t dst = ring_s + uint32_t((g % NST) * T::kStageFloats) * 4u;
    if (jt < T::kA) {  // rows tid / 8 + 32 it, keys 32 jt + 4 (tid % 8) ..
      const float* src = rec + lay.w() + 32 * jt + (tid / 8) * DK + 4 * (tid % 8);
      const uint32_t d = dst + uint32_t((tid / 8) * AS + 4 * (tid % 8)) * 4u;
#pragma unroll
      for (int it = 0; it < 4; ++it) copy16_async(d + uint32_t(it * 32 * AS) * 4u, src + it * 32 * DK);
    } else if (jt == T::kA) {  // QK: rows tid / 16 + 16 it (64 contiguous floats each)
      const float* src = rec + lay.qk() + 4 * tid;
      const uint32_t d = dst + uint32_t((tid / 16) * QS + 4 * (tid % 16)) * 4u;
#pragma unroll
      for (int it = 0; it < 4; ++it) copy16_async(d + uint32_t(it * 16 * QS) * 4u, src + it * 1024);
    } else {  // a Kd slice: 4096 contiguous floats
      const float* src = rec + lay.kd() + size_t(jt - T::kA - 1) * 4096 + 4 * tid;
#pragma unroll
      for (int it = 0; it < 4; ++it) copy16_async(dst + uint32_t(4 * tid + it * 1024) * 4u, src + it * 1024);
    }
  };
#pragma unroll
  for (int g = 0; g < NST - 1; ++g) {
    if (g < n_tiles) load(g);
    copy_commit();  // empty past the end: the wait counts stay uniform
  }

  float acc[4][CPT];  // phase A sums of rows rg + 32 a of [W; Qg]
  float st[KPT][CPT];  // phase B: S[KPT rg + ii][j0 + cg + 8 j], from and back to St
  float el = 0.0f;
  int n = 0;
  for (int g = 0; g < n_tiles; ++g) {
    copy_wait<NST - 2>();  // tile g has landed (this thread's copies) ...
    __syncthreads();        // ... everyone's; and tile g - 1's stage, Vt and St writes are settled
    if (g + NST - 1 < n_tiles) load(g + NST - 1);
    copy_commit();
    const int k = g / T::kPerChunk, jt = g % T::kPerChunk;
    const float* tile = ring + (g % NST) * T::kStageFloats;
    if (jt == 0) {  // a new chunk
      const float* rec = rec_h + size_t(k) * chunk_floats;
      n = min(C, rows - k * C);
      el = __ldg(rec + lay.el());
#pragma unroll
      for (int j = 0; j < CPT; ++j) {
#pragma unroll
        for (int a = 0; a < 4; ++a) acc[a][j] = 0.0f;
#pragma unroll
        for (int a = 0; a < 2; ++a)  // U into Vt: the barrier above retired the last chunk's reads of it
          Vt[(cg + 8 * j) * VS + rg + 32 * a] = __ldg(rec + lay.u() + size_t(rg + 32 * a) * dv + j0 + cg + 8 * j);
      }
    }
    if (jt < T::kA) {  // phase A, keys 32 jt ..
#pragma unroll 2  // fully unrolled, ptxas hoists the loads past 80 registers and spills
      for (int i4 = 0; i4 < 8; ++i4) {
        float4 av[4], sv[CPT];
#pragma unroll
        for (int a = 0; a < 4; ++a) av[a] = *reinterpret_cast<const float4*>(tile + (rg + 32 * a) * AS + 4 * i4);
#pragma unroll
        for (int j = 0; j < CPT; ++j)
          sv[j] = *reinterpret_cast<const float4*>(St + (cg + 8 * j) * SS + 32 * jt + 4 * i4);
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
          for (int j = 0; j < CPT; ++j) {
            float x = acc[a][j];
            x = fmaf(av[a].x, sv[j].x, x);
            x = fmaf(av[a].y, sv[j].y, x);
            x = fmaf(av[a].z, sv[j].z, x);
            acc[a][j] = fmaf(av[a].w, sv[j].w, x);
          }
      }
      if (jt == T::kA - 1)  // every row, masked ones too (0 - 0): phase B reads them
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
          for (int j = 0; j < CPT; ++j) Vt[(cg + 8 * j) * VS + rg + 32 * a] -= acc[a][j];
    } else if (jt == T::kA) {  // outputs; QK is 0 above the diagonal, so groups of 4 may overrun t
      const int t0 = rg, t1 = rg + 32;
      float o0[CPT], o1[CPT];
#pragma unroll
      for (int j = 0; j < CPT; ++j) o0[j] = acc[2][j], o1[j] = acc[3][j];
      for (int s4 = 0; s4 <= t1 / 4; ++s4) {
        const float4 q1 = *reinterpret_cast<const float4*>(tile + t1 * QS + 4 * s4);
        const bool row0 = s4 <= t0 / 4;
        const float4 q0 = row0 ? *reinterpret_cast<const float4*>(tile + t0 * QS + 4 * s4) : make_float4(0, 0, 0, 0);
#pragma unroll
        for (int j = 0; j < CPT; ++j) {
          const float4 v = *reinterpret_cast<const float4*>(Vt + (cg + 8 * j) * VS + 4 * s4);
          o1[j] = fmaf(q1.w, v.w, fmaf(q1.z, v.z, fmaf(q1.y, v.y, fmaf(q1.x, v.x, o1[j]))));
          if (row0) o0[j] = fmaf(q0.w, v.w, fmaf(q0.z, v.z, fmaf(q0.y, v.y, fmaf(q0.x, v.x, o0[j]))));
        }
      }
      float* o_row = out + size_t(k * C) * out_stride + size_t(h) * dv + j0 + cg;
#pragma unroll
      for (int j = 0; j < CPT; ++j) {
        if (t0 < n) o_row[size_t(t0) * out_stride + 8 * j] = o0[j];
        if (t1 < n) o_row[size_t(t1) * out_stride + 8 * j] = o1[j];
      }
    } else {  // state update, tokens s0 .. s0 + kKdTokens - 1
      const int p = jt - T::kA - 1, s0 = p * T::kKdTokens;
      if (p == 0)  // this thread's elements of St: no other thread writes them
#pragma unroll
        for (int ii = 0; ii < KPT; ++ii)
#pragma unroll
          for (int j = 0; j < CPT; ++j) st[ii][j] = St[(cg + 8 * j) * SS + KPT * rg + ii] * el;
#pragma unroll 2  // as phase A: more would spill
      for (int s4 = 0; s4 < T::kKdTokens / 4; ++s4) {
        float4 v[CPT];
#pragma unroll
        for (int j = 0; j < CPT; ++j) v[j] = *reinterpret_cast<const float4*>(Vt + (cg + 8 * j) * VS + s0 + 4 * s4);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const KdVec kd = *reinterpret_cast<const KdVec*>(tile + (4 * s4 + q) * DK + KPT * rg);
#pragma unroll
          for (int j = 0; j < CPT; ++j)
#pragma unroll
            for (int ii = 0; ii < KPT; ++ii) st[ii][j] = fmaf(elem(kd, ii), elem(v[j], q), st[ii][j]);
        }
      }
      if (p == T::kKd - 1)  // S for the next chunk's phase A (read after the next barrier)
#pragma unroll
        for (int ii = 0; ii < KPT; ++ii)
#pragma unroll
          for (int j = 0; j < CPT; ++j) St[(cg + 8 * j) * SS + KPT * rg + ii] = st[ii][j];
    }
  }
  copy_wait<0>();  // nothing is pending past the last tile, but leave no copy in flight
#pragma unroll
  for (int ii = 0; ii < KPT; ++ii)  // this thread's own St writes: no barrier needed
#pragma unroll
    for (int j = 0; j < CPT; ++j) Sh[size_t(KPT * rg + ii) * dv + j0 + cg + 8 * j] = St[(cg + 8 * j) * SS + KPT * rg + ii];
}

template <int DK>
void run_chunked(const GdnShape& sh, const float* qkv, size_t qkv_stride, const float* g, const float* beta,
                 int rows, float* S, float* out, float* scratch, cudaStream_t s) {
  constexpr size_t smem = prepare_smem_bytes<DK>(), state_smem = StateTiles<DK>::smem_bytes();  // > 48 KiB
  (void)raise_smem_limit<gdn_chunk_prepare_k<DK>>(int(smem));  // a refusal shows as the launch error
  (void)raise_smem_limit<gdn_chunk_state_k<DK>>(int(state_smem), true);  // 3 blocks an SM need the carveout
  const size_t out_stride = size_t(sh.n_v) * sh.d_v;
  for (int p0 = 0; p0 < rows; p0 += kPieceRows) {
    const int pr = std::min(kPieceRows, rows - p0);
    const size_t gate0 = size_t(p0) * sh.n_v;
    launch(gdn_chunk_prepare_k<DK>, dim3(ceil_div(pr, kChunk), unsigned(sh.n_v)), kThreads, smem, s, sh.n_k, sh.n_v,
           sh.d_v, qkv + size_t(p0) * qkv_stride, qkv_stride, g + gate0, beta + gate0, pr, scratch);
    launch(gdn_chunk_state_k<DK>, dim3(unsigned(sh.n_v), unsigned(sh.d_v / kCols)), kThreads, state_smem, s, sh.n_v,
           sh.d_v, pr,
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
