// Attention over the paged KV cache (f16, f32 or q8_0 storage). One (query row, head) pair per
// work item, with an online softmax (running max and sum) so no per-position scratch is needed
// at any context length. Q8_0 rows are written by quantize_row (the weight quantizer, ggml's
// rounding) and read back dequantized into a scratch head row: q * d has at most 7 + 11
// significant bits, so those floats are exact and the math after them is the f32/f16 path's.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "backend/cpu/cpu_backend.h"
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

// How attention reads one head row of K or V: in place (f32, f16) or dequantized into `buf` (q8_0).
struct ReadF32 {
  static const float* row(const uint8_t* p, int, float*) { return reinterpret_cast<const float*>(p); }
};
struct ReadF16 {
  static const uint16_t* row(const uint8_t* p, int, float*) { return reinterpret_cast<const uint16_t*>(p); }
};
struct ReadQ8_0 {
  static const float* row(const uint8_t* p, int n, float* buf) {
    const auto* b = reinterpret_cast<const quant::BlockQ8_0*>(p);
    for (int i = 0; i < n / 32; ++i) {
      const float d = f16_to_f32(b[i].d);
      float* y = buf + 32 * i;
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
    return buf;
  }
};

template <typename Read>
void attention_impl(ThreadPool& pool, const float* q, size_t q_row_stride, size_t q_head_stride, int rows,
                    const int32_t* pos, int n_head, const KvLayerView& kv, const SeqKv& seq, float scale, float* out) {
  const int D = kv.head_dim;
  const int group = n_head / kv.n_head_kv;
  const size_t hb = kv.head_bytes(), tb = kv.token_bytes();
  const auto* kd = static_cast<const uint8_t*>(kv.k);
  const auto* vd = static_cast<const uint8_t*>(kv.v);
  pool.parallel_for(int64_t(rows) * n_head, 1, [&](int64_t b, int64_t e, int) {
    float acc[1024];  // head_dim <= 512 is validated at load
    alignas(32) float kbuf[512], vbuf[512];  // dequantized head rows (q8_0 only)
    for (int64_t item = b; item < e; ++item) {
      const int r = int(item / n_head), h = int(item % n_head);
      const float* qh = q + r * q_row_stride + h * q_head_stride;
      const int kvh = h / group;
      float m = -std::numeric_limits<float>::infinity(), l = 0;
      for (int j = 0; j < D; ++j) acc[j] = 0;
      for (int p = 0; p <= pos[r]; ++p) {
        const size_t at = token_offset(kv, seq, p, tb) + size_t(kvh) * hb;
        const float s = dot(qh, Read::row(kd + at, D, kbuf), D) * scale;
        if (s > m) {
          const float decay = std::exp(m - s);  // exp(-inf) = 0 on the first position
          l = l * decay + 1.0f;
          scale_add(acc, decay, 1.0f, Read::row(vd + at, D, vbuf), D);
          m = s;
        } else {
          const float w = std::exp(s - m);
          l += w;
          scale_add(acc, 1.0f, w, Read::row(vd + at, D, vbuf), D);
        }
      }
      float* o = out + size_t(r) * n_head * D + size_t(h) * D;
      const float inv = 1.0f / l;
      for (int j = 0; j < D; ++j) o[j] = acc[j] * inv;
    }
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
