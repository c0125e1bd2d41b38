// Attention over the paged KV cache (f16, f32 or q8_0 storage), blocked in the flash-attention
// way. A work item is a tile of consecutive query rows x the heads of one kv head's GQA group (up
// to kTileVectors query vectors), so every K and V row read serves all of them. Positions are
// walked in blocks of kBlock: a register-blocked kernel scores all the tile's vectors against the
// block, the online softmax (running max and sum) rescales a vector's accumulator once a block
// instead of once a position, and a second register-blocked kernel accumulates the weighted V
// rows. Large tiles convert a block's f16 or q8_0 rows to f32 once; f32 rows, and f16 rows of a
// decode tile, are read in place, so a decode step on such a cache touches no scratch memory. Each row has its
// own causal limit (rows may sit at any positions), and no scratch grows with the context. Q8_0
// rows are written by quantize_row (the weight quantizer, ggml's rounding) and dequantized into
// the block: q * d has at most 7 + 11 significant bits, so those floats are exact and the math
// after them is the f32/f16 path's.

// GCC 12's AVX-512 headers build some results from _mm512_undefined_*(), which its own
// -Wuninitialized then reports at every inlined use; the warning is spurious (as in quant/simd_x86.h).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/simd.h"
#include "quant/blocks.h"
#include "quant/quantize.h"
#include "util/half.h"

namespace df {

namespace {

inline float load(const float* p, int i) { return p[i]; }
inline float load(const uint16_t* p, int i) { return f16_to_f32(p[i]); }

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
#endif

template <typename T>
inline float dot(const float* q, const T* k, int n) {
  int i = 0;
  float s = 0;
#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k + i), acc);
  __m128 lo = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  lo = _mm_hadd_ps(lo, lo);
  lo = _mm_hadd_ps(lo, lo);
  s = _mm_cvtss_f32(lo);
#endif
  for (; i < n; ++i) s += q[i] * load(k, i);
  return s;
}

// acc = acc * decay + w * v
template <typename T>
inline void scale_add(float* acc, float decay, float w, const T* v, int n) {
  int i = 0;
#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
  const __m256 d = _mm256_set1_ps(decay), ww = _mm256_set1_ps(w);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(ww, load8(v + i), _mm256_mul_ps(d, _mm256_loadu_ps(acc + i))));
#endif
  for (; i < n; ++i) acc[i] = acc[i] * decay + w * load(v, i);
}

inline void store(float* dst, float x) { *dst = x; }
inline void store(uint16_t* dst, float x) { *dst = f32_to_f16(x); }

// Byte offset of position p's token row (tb = kv.token_bytes()) in the layer's K (or V) buffer.
inline size_t token_offset(const KvLayerView& kv, const SeqKv& seq, int p, size_t tb) {
  return (size_t(seq.block_table[p / kv.block_tokens]) * kv.block_tokens + size_t(p % kv.block_tokens)) * tb;
}

template <typename T>
void kv_store_impl(const KvLayerView& kv, const SeqKv& seq, const float* k, const float* v, const int32_t* pos, int rows) {
  const size_t ts = kv.token_stride(), tb = kv.token_bytes();
  auto* kd = static_cast<uint8_t*>(kv.k);
  auto* vd = static_cast<uint8_t*>(kv.v);
  for (int r = 0; r < rows; ++r) {
    const size_t at = token_offset(kv, seq, pos[r], tb);
    T* kt = reinterpret_cast<T*>(kd + at);
    T* vt = reinterpret_cast<T*>(vd + at);
    for (size_t i = 0; i < ts; ++i) {
      store(kt + i, k[r * ts + i]);
      store(vt + i, v[r * ts + i]);
    }
  }
}

void kv_store_q8_0(const KvLayerView& kv, const SeqKv& seq, const float* k, const float* v, const int32_t* pos,
                   int rows) {
  const size_t ts = kv.token_stride(), tb = kv.token_bytes();
  auto* kd = static_cast<uint8_t*>(kv.k);
  auto* vd = static_cast<uint8_t*>(kv.v);
  for (int r = 0; r < rows; ++r) {
    const size_t at = token_offset(kv, seq, pos[r], tb);
    // Blocks never straddle heads (head_dim % 32 == 0), so the whole token row at once is the
    // same as head by head.
    quantize_row(GgmlType::Q8_0, k + r * ts, kd + at, int64_t(ts));
    quantize_row(GgmlType::Q8_0, v + r * ts, vd + at, int64_t(ts));
  }
}

// How attention reads head rows of K or V: every type can be converted to f32 into `dst` (q8_0
// dequantized); f32 and f16 rows can also be read where they are (Stored: their element type).
struct ReadF32 {
  using Stored = float;
  static constexpr bool kInPlace = true;
  static void to_f32(const uint8_t* p, int n, float* dst) { std::memcpy(dst, p, size_t(n) * sizeof(float)); }
};
struct ReadF16 {
  using Stored = uint16_t;
  static constexpr bool kInPlace = true;
  static void to_f32(const uint8_t* p, int n, float* dst) {
    const auto* h = reinterpret_cast<const uint16_t*>(p);
    int i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i))));
#elif defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load8(h + i));
#endif
    for (; i < n; ++i) dst[i] = f16_to_f32(h[i]);
  }
};
struct ReadQ8_0 {
  static constexpr bool kInPlace = false;
  static void to_f32(const uint8_t* p, int n, float* dst) {
    const auto* b = reinterpret_cast<const quant::BlockQ8_0*>(p);
    for (int i = 0; i < n / 32; ++i) {
      const float d = f16_to_f32(b[i].d);
      float* y = dst + 32 * i;
#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
      const __m256 dv = _mm256_set1_ps(d);
      for (int j = 0; j < 32; j += 8) {
        const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[i].qs + j));
        _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), dv));
      }
#else
      for (int j = 0; j < 32; ++j) y[j] = float(b[i].qs[j]) * d;
#endif
    }
  }
};

// Sizes measured on Zen 4 (head_dim 256, f16 cache): 64 x 32 ran a 512-token prompt's attention
// ~15% faster than 32 x 16 and ~5% slower than 64 x 64 or 128 x 32, whose scratch doubles.
constexpr int kBlock = 64;         // positions a block (a multiple of 16: whole AVX-512 registers of scores)
constexpr int kTileVectors = 32;   // query vectors (rows x heads of one kv head) sharing each K/V row read
constexpr int kKernelVectors = 4;  // query vectors a kernel call keeps in registers

// Head rows are handled as whole 16-float vectors; other head dims are padded with zeros.
inline int padded_dim(int d) { return (d + 15) & ~15; }

// Per-thread memory for what cannot be used where it is: converted K/V blocks, and the query
// vectors and accumulators of head dims that need padding. Sized once; a decode step of an f16
// or f32 cache with whole-vector head dims touches none of it (cold memory would cost more than
// the work at short contexts).
struct TileScratch {
  std::vector<float> mem;
  float *q = nullptr, *acc = nullptr, *k = nullptr, *v = nullptr;

  void size_for(int dp) {
    const size_t vecs = size_t(kTileVectors) * size_t(dp), block = size_t(kBlock) * size_t(dp);
    const size_t need = 2 * vecs + 2 * block + 16;
    if (mem.size() < need) mem.resize(need);  // grows once: later calls reuse it
    // Every part is a multiple of 16 floats, so all start on a cache line once the base does.
    const auto base = (reinterpret_cast<uintptr_t>(mem.data()) + 63) & ~uintptr_t(63);
    q = reinterpret_cast<float*>(base);
    acc = q + vecs;
    k = acc + vecs;
    v = k + block;
  }
};

TileScratch& thread_scratch(int dp) {
  thread_local TileScratch s;
  s.size_for(dp);
  return s;
}

// The query vectors of one tile and their online-softmax state (on the stack).
struct TileVectors {
  const float* q[kTileVectors];
  float* acc[kTileVectors];  // unnormalised sum of weighted V rows
  int row[kTileVectors];
  float m[kTileVectors], l[kTileVectors], alpha[kTileVectors];  // running max, sum, this block's rescale
  alignas(64) float w[kTileVectors * kBlock];                     // a block's scores, then weights
};

#if defined(__AVX512F__)
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// The lane sums of a, b, c and d, in that order.
inline __m128 sum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  auto halves = [](__m512 x) {
    return _mm256_add_ps(_mm512_castps512_ps256(x), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
  };
  const __m256 ab = _mm256_hadd_ps(halves(a), halves(b)), cd = _mm256_hadd_ps(halves(c), halves(d));
  const __m256 abcd = _mm256_hadd_ps(ab, cd);
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}
#endif

// out[a][j] = scale * (q_a . k_j) for N query vectors and the keys j < n_keys (a multiple of 4),
// rows of dp elements. 4 keys x N vectors in registers: each key load serves N vectors and each
// query load 4 keys.
template <int N, typename T>
void score_vectors(const float* const* qv, const T* const* keys, int n_keys, int dp, float scale, float* const* out) {
#if defined(__AVX512F__)
  const __m128 sc = _mm_set1_ps(scale);
  for (int j = 0; j < n_keys; j += 4) {
    __m512 c[N][4];
    for (int a = 0; a < N; ++a)
      for (int i = 0; i < 4; ++i) c[a][i] = _mm512_setzero_ps();
    for (int d = 0; d < dp; d += 16) {
      __m512 k[4];
      for (int i = 0; i < 4; ++i) k[i] = load16(keys[j + i] + d);
      for (int a = 0; a < N; ++a) {
        const __m512 x = _mm512_loadu_ps(qv[a] + d);
        for (int i = 0; i < 4; ++i) c[a][i] = _mm512_fmadd_ps(x, k[i], c[a][i]);
      }
    }
    for (int a = 0; a < N; ++a) _mm_storeu_ps(out[a] + j, _mm_mul_ps(sc, sum4(c[a][0], c[a][1], c[a][2], c[a][3])));
  }
#else
  for (int a = 0; a < N; ++a)
    for (int j = 0; j < n_keys; ++j) out[a][j] = dot(qv[a], keys[j], dp) * scale;
#endif
}

// acc_a = alpha_a acc_a + sum_{j < n_keys} w_a[j] v_j over dims [d0, d0 + 16 NV), N vectors:
// N x NV accumulators in registers, each V load feeding N FMAs. alpha_a = 0 (a vector's first
// block) starts from zero without reading acc_a, which may be the output's old contents.
template <int N, int NV, typename T>
void accumulate_dims(float* const* acc, const float* alpha, const float* const* w, const T* const* vals, int n_keys,
                     int d0) {
#if defined(__AVX512F__)
  __m512 c[N][NV];
  for (int a = 0; a < N; ++a) {
    const __m512 s = _mm512_set1_ps(alpha[a]);
    for (int i = 0; i < NV; ++i)
      c[a][i] = alpha[a] == 0.0f ? _mm512_setzero_ps() : _mm512_mul_ps(s, _mm512_loadu_ps(acc[a] + d0 + 16 * i));
  }
  for (int j = 0; j < n_keys; ++j) {
    __m512 x[NV];
    for (int i = 0; i < NV; ++i) x[i] = load16(vals[j] + d0 + 16 * i);
    for (int a = 0; a < N; ++a) {
      const __m512 wa = _mm512_set1_ps(w[a][j]);
      for (int i = 0; i < NV; ++i) c[a][i] = _mm512_fmadd_ps(wa, x[i], c[a][i]);
    }
  }
  for (int a = 0; a < N; ++a)
    for (int i = 0; i < NV; ++i) _mm512_storeu_ps(acc[a] + d0 + 16 * i, c[a][i]);
#else
  for (int a = 0; a < N; ++a) {
    float* o = acc[a] + d0;
    for (int i = 0; i < 16 * NV; ++i) o[i] = alpha[a] == 0.0f ? 0.0f : o[i] * alpha[a];
    for (int j = 0; j < n_keys; ++j) scale_add(o, 1.0f, w[a][j], vals[j] + d0, 16 * NV);
  }
#endif
}

template <int N, typename T>
void accumulate_vectors(float* const* acc, const float* alpha, const float* const* w, const T* const* vals, int dp,
                        int n_keys) {
  int d0 = 0;
  for (; d0 + 64 <= dp; d0 += 64) accumulate_dims<N, 4>(acc, alpha, w, vals, n_keys, d0);
  switch ((dp - d0) / 16) {
    case 3: accumulate_dims<N, 3>(acc, alpha, w, vals, n_keys, d0); break;
    case 2: accumulate_dims<N, 2>(acc, alpha, w, vals, n_keys, d0); break;
    case 1: accumulate_dims<N, 1>(acc, alpha, w, vals, n_keys, d0); break;
    default: break;
  }
}

// Folds one block of a vector's scores s[0, n_keys), the first `valid` of them unmasked, into its
// running max m and sum l; leaves the weights e^(s - m) in s (0 where masked) and returns the
// factor e^(m_old - m) the accumulator must be rescaled by (0 on the first block: m_old = -inf).
inline float softmax_block(float* s, int n_keys, int valid, float& m, float& l) {
#if defined(__AVX512F__)
  constexpr int kRegs = kBlock / 16;
  const int regs = (n_keys + 15) / 16;  // a short context's block (decode) spends no exponentials on empty lanes
  __mmask16 mask[kRegs];
  __m512 x[kRegs];
  __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int c = 0; c < regs; ++c) {
    const int n = std::clamp(valid - 16 * c, 0, 16);
    mask[c] = n == 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
    x[c] = _mm512_load_ps(s + 16 * c);
    mx = _mm512_mask_max_ps(mx, mask[c], mx, x[c]);
  }
  const float m_new = std::max(m, _mm512_reduce_max_ps(mx));
  const __m512 mv = _mm512_set1_ps(m_new);
  __m512 sum = _mm512_setzero_ps();
  for (int c = 0; c < regs; ++c) {
    const __m512 e = _mm512_maskz_mov_ps(mask[c], cpu::exp16(_mm512_sub_ps(x[c], mv)));
    _mm512_store_ps(s + 16 * c, e);
    sum = _mm512_add_ps(sum, e);
  }
  const float alpha = std::exp(m - m_new);
  l = l * alpha + _mm512_reduce_add_ps(sum);
#else
  float m_new = m;
  for (int j = 0; j < valid; ++j) m_new = std::max(m_new, s[j]);
  float sum = 0;
  for (int j = 0; j < n_keys; ++j) {
    s[j] = j < valid ? std::exp(s[j] - m_new) : 0.0f;
    sum += s[j];
  }
  const float alpha = std::exp(m - m_new);
  l = l * alpha + sum;
#endif
  m = m_new;
  return alpha;
}

// Splits `idx` (vector indices) into kernel calls of up to kKernelVectors vectors.
template <typename Call>
void for_vector_groups(const int* idx, int n, Call&& call) {
  for (int i = 0; i < n; i += kKernelVectors) {
    switch (std::min(kKernelVectors, n - i)) {
      case 4: call(std::integral_constant<int, 4>{}, idx + i); break;
      case 3: call(std::integral_constant<int, 3>{}, idx + i); break;
      case 2: call(std::integral_constant<int, 2>{}, idx + i); break;
      default: call(std::integral_constant<int, 1>{}, idx + i); break;
    }
  }
}

// One attention call's operands.
struct AttnCall {
  const float* q;
  size_t q_row_stride, q_head_stride;
  const int32_t* pos;
  int n_head, group, dim, dp;
  const KvLayerView& kv;
  const SeqKv& seq;
  float scale;
  float* out;
};

// A work item: rows [r0, r1) x heads [h0, h1), all heads of kv head kvh.
struct Tile {
  int r0, r1, h0, h1, kvh;
};

// How a call is cut into tiles. Up to kTileVectors vectors a tile, as many of a GQA group's heads
// as fit; heads are split further only when there would be fewer tiles than threads (a decode
// row with few kv heads), since each split reads the kv head's K/V rows again.
struct Tiling {
  int heads, rows_per_tile, head_splits, row_tiles, n_head_kv, group;
  int64_t items;

  Tiling(int rows, int group_, int n_head_kv_, int threads) : n_head_kv(n_head_kv_), group(group_) {
    with_heads(std::min(group, kTileVectors), rows);
    while (items < threads && heads > 1) with_heads((heads + 1) / 2, rows);
  }
  void with_heads(int h, int rows) {
    heads = h;
    rows_per_tile = std::max(1, kTileVectors / h);
    head_splits = (group + h - 1) / h;
    row_tiles = (rows + rows_per_tile - 1) / rows_per_tile;
    items = int64_t(n_head_kv) * head_splits * row_tiles;
  }
  // Last rows first: in a prompt they attend to the most positions, and threads that take items
  // one at a time then finish together.
  Tile tile(int64_t i, int rows) const {
    const int64_t per_row_tile = int64_t(n_head_kv) * head_splits;
    const int rt = row_tiles - 1 - int(i / per_row_tile);
    const int kvh = int(i % per_row_tile) / head_splits, split = int(i % per_row_tile) % head_splits;
    const int h0 = kvh * group + split * heads;
    return {rt * rows_per_tile, std::min(rows, (rt + 1) * rows_per_tile), h0, std::min(h0 + heads, (kvh + 1) * group),
            kvh};
  }
};

// The blocked online softmax of a tile's vectors over positions 0 .. last. rows(p0, n, keys,
// vals) points keys[j] and vals[j] at the K and V rows (dp elements of T) of positions p0 + j < p0 + n.
template <typename T, typename Rows>
void walk_blocks(const AttnCall& c, TileVectors& tv, int n_vec, int last, Rows&& rows) {
  const T* keys[kBlock];
  const T* vals[kBlock];
  for (int p0 = 0; p0 <= last; p0 += kBlock) {
    const int n = std::min(kBlock, last + 1 - p0), n4 = (n + 3) & ~3;
    rows(p0, n, keys, vals);
    for (int j = n; j < n4; ++j) keys[j] = keys[0];  // the kernel scores keys 4 at a time; these are masked
    int live[kTileVectors], n_live = 0;                // vectors whose row still sees positions of this block
    for (int v = 0; v < n_vec; ++v)
      if (c.pos[tv.row[v]] >= p0) live[n_live++] = v;
    for_vector_groups(live, n_live, [&](auto n_group, const int* idx) {
      constexpr int N = decltype(n_group)::value;
      const float* qv[N];
      float* sc[N];
      for (int a = 0; a < N; ++a) qv[a] = tv.q[idx[a]], sc[a] = tv.w + size_t(idx[a]) * kBlock;
      score_vectors<N>(qv, keys, n4, c.dp, c.scale, sc);
    });
    for (int i = 0; i < n_live; ++i) {
      const int v = live[i];
      const int valid = std::min(n, int(c.pos[tv.row[v]]) - p0 + 1);  // the causal limit of v's row
      tv.alpha[v] = softmax_block(tv.w + size_t(v) * kBlock, n, valid, tv.m[v], tv.l[v]);
    }
    for_vector_groups(live, n_live, [&](auto n_group, const int* idx) {
      constexpr int N = decltype(n_group)::value;
      float* acc[N];
      float alpha[N];
      const float* w[N];
      for (int a = 0; a < N; ++a) {
        acc[a] = tv.acc[idx[a]];
        alpha[a] = tv.alpha[idx[a]];
        w[a] = tv.w + size_t(idx[a]) * kBlock;
      }
      accumulate_vectors<N>(acc, alpha, w, vals, c.dp, n);
    });
  }
}

// Head kvh's K (or V) rows of positions p0 .. p0 + n - 1, as f32 rows of dp floats.
template <typename Read>
void convert_block(const uint8_t* base, const AttnCall& c, int kvh, int p0, int n, float* dst) {
  const size_t tb = c.kv.token_bytes(), hb = c.kv.head_bytes();
  for (int j = 0; j < n; ++j) {
    float* row = dst + size_t(j) * c.dp;
    Read::to_f32(base + token_offset(c.kv, c.seq, p0 + j, tb) + size_t(kvh) * hb, c.dim, row);
    for (int d = c.dim; d < c.dp; ++d) row[d] = 0;
  }
}

template <typename Read>
void attend_tile(const AttnCall& c, const Tile& t, TileScratch& s) {
  const int nh = t.h1 - t.h0, n_vec = (t.r1 - t.r0) * nh, dp = c.dp;
  // With whole-vector head dims, queries are read and sums accumulated (in the output) in place.
  const bool whole = c.dim == dp;
  TileVectors tv;
  std::fill_n(tv.w, size_t(n_vec) * kBlock, 0.0f);  // score lanes past a block's keys are masked, but defined
  int last = 0;  // the tile reads positions 0 .. its rows' largest position
  for (int v = 0; v < n_vec; ++v) {
    const int r = t.r0 + v / nh, h = t.h0 + v % nh;
    const float* src = c.q + size_t(r) * c.q_row_stride + size_t(h) * c.q_head_stride;
    float* o = c.out + (size_t(r) * c.n_head + size_t(h)) * c.dim;
    if (whole) {
      tv.q[v] = src;
      tv.acc[v] = o;
    } else {
      float* qv = s.q + size_t(v) * dp;
      std::copy_n(src, c.dim, qv);
      std::fill(qv + c.dim, qv + dp, 0.0f);
      tv.q[v] = qv;
      tv.acc[v] = s.acc + size_t(v) * dp;
    }
    tv.row[v] = r;
    tv.m[v] = -std::numeric_limits<float>::infinity();
    tv.l[v] = 0;
    last = std::max(last, int(c.pos[r]));
  }
  const auto* kd = static_cast<const uint8_t*>(c.kv.k);
  const auto* vd = static_cast<const uint8_t*>(c.kv.v);
  const size_t tb = c.kv.token_bytes(), hb = c.kv.head_bytes();
  // f32 rows are read in place; f16 rows too when few vectors share them (decode), since each
  // kernel call converts what it loads: a larger tile converts the block once instead.
  bool in_place = false;
  if constexpr (Read::kInPlace) {
    using T = typename Read::Stored;
    in_place = whole && (std::is_same_v<T, float> || n_vec <= kKernelVectors);
    if (in_place)
      walk_blocks<T>(c, tv, n_vec, last, [&](int p0, int n, const T** keys, const T** vals) {
        for (int j = 0; j < n; ++j) {
          const size_t at = token_offset(c.kv, c.seq, p0 + j, tb) + size_t(t.kvh) * hb;
          keys[j] = reinterpret_cast<const T*>(kd + at);
          vals[j] = reinterpret_cast<const T*>(vd + at);
        }
      });
  }
  if (!in_place)
    walk_blocks<float>(c, tv, n_vec, last, [&](int p0, int n, const float** keys, const float** vals) {
      convert_block<Read>(kd, c, t.kvh, p0, n, s.k);
      convert_block<Read>(vd, c, t.kvh, p0, n, s.v);
      for (int j = 0; j < n; ++j) keys[j] = s.k + size_t(j) * dp, vals[j] = s.v + size_t(j) * dp;
    });
  for (int v = 0; v < n_vec; ++v) {
    float* o = c.out + (size_t(tv.row[v]) * c.n_head + size_t(t.h0 + v % nh)) * c.dim;
    const float* a = tv.acc[v];
    const float inv = 1.0f / tv.l[v];
    for (int d = 0; d < c.dim; ++d) o[d] = a[d] * inv;
  }
}

template <typename Read>
void attention_impl(ThreadPool& pool, const float* q, size_t q_row_stride, size_t q_head_stride, int rows,
                    const int32_t* pos, int n_head, const KvLayerView& kv, const SeqKv& seq, float scale, float* out) {
  const AttnCall c{q,   q_row_stride, q_head_stride, pos, n_head, n_head / kv.n_head_kv, kv.head_dim,
                   padded_dim(kv.head_dim), kv, seq, scale, out};
  const Tiling tiling(rows, c.group, kv.n_head_kv, pool.size());
  if (tiling.items <= pool.size()) {  // one item a thread (decode)
    pool.parallel_for(tiling.items, 1, [&](int64_t b, int64_t e, int) {
      TileScratch& s = thread_scratch(c.dp);
      for (int64_t i = b; i < e; ++i) attend_tile<Read>(c, tiling.tile(i, rows), s);
    });
    return;
  }
  // Items differ in cost (causal rows), so threads take them one at a time from a shared counter.
  std::atomic<int64_t> next{0};
  pool.parallel_for(pool.size(), 1, [&](int64_t, int64_t, int) {
    TileScratch& s = thread_scratch(c.dp);
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < tiling.items;
         i = next.fetch_add(1, std::memory_order_relaxed))
      attend_tile<Read>(c, tiling.tile(i, rows), s);
  });
}

}  // namespace

void CpuBackend::kv_store(const KvLayerView& kv, const SeqKv& seq, const float* k, const float* v, const int32_t* pos,
                          int rows) {
  check_kv_type(kv.type, kv.head_dim);
  switch (kv.type) {
    case GgmlType::F32: kv_store_impl<float>(kv, seq, k, v, pos, rows); break;
    case GgmlType::Q8_0: kv_store_q8_0(kv, seq, k, v, pos, rows); break;
    default: kv_store_impl<uint16_t>(kv, seq, k, v, pos, rows); break;
  }
}

void CpuBackend::attention(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos,
                           int n_head, const KvLayerView& kv, const SeqKv& seq, float scale, float* out) {
  check_kv_type(kv.type, kv.head_dim);
  switch (kv.type) {
    case GgmlType::F32:
      attention_impl<ReadF32>(pool_, q, q_row_stride, q_head_stride, rows, pos, n_head, kv, seq, scale, out);
      break;
    case GgmlType::Q8_0:
      attention_impl<ReadQ8_0>(pool_, q, q_row_stride, q_head_stride, rows, pos, n_head, kv, seq, scale, out);
      break;
    default:
      attention_impl<ReadF16>(pool_, q, q_row_stride, q_head_stride, rows, pos, n_head, kv, seq, scale, out);
      break;
  }
}

}  // namespace df
