// Attention over the paged KV cache (f16 or f32 storage). One (query row, head) pair per work
// item, with an online softmax (running max and sum) so no per-position scratch is needed at
// any context length.
#include <immintrin.h>

#include <cmath>
#include <limits>

#include "backend/cpu/cpu_backend.h"
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

template <typename T>
void kv_store_impl(const KvLayerView& kv, const SeqKv& seq, const float* k, const float* v, const int32_t* pos, int rows) {
  const size_t ts = kv.token_stride();
  T* kd = static_cast<T*>(kv.k);
  T* vd = static_cast<T*>(kv.v);
  for (int r = 0; r < rows; ++r) {
    const int32_t block = seq.block_table[pos[r] / kv.block_tokens];
    const size_t at = (size_t(block) * kv.block_tokens + pos[r] % kv.block_tokens) * ts;
    for (size_t i = 0; i < ts; ++i) {
      store(kd + at + i, k[r * ts + i]);
      store(vd + at + i, v[r * ts + i]);
    }
  }
}

template <typename T>
void attention_impl(ThreadPool& pool, const float* q, size_t q_row_stride, size_t q_head_stride, int rows,
                    const int32_t* pos, int n_head, const KvLayerView& kv, const SeqKv& seq, float scale, float* out) {
  const int D = kv.head_dim;
  const int group = n_head / kv.n_head_kv;
  const size_t ts = kv.token_stride();
  const T* kd = static_cast<const T*>(kv.k);
  const T* vd = static_cast<const T*>(kv.v);
  pool.parallel_for(int64_t(rows) * n_head, 1, [&](int64_t b, int64_t e, int) {
    float acc[1024];  // head_dim <= 512 is validated at load
    for (int64_t item = b; item < e; ++item) {
      const int r = int(item / n_head), h = int(item % n_head);
      const float* qh = q + r * q_row_stride + h * q_head_stride;
      const int kvh = h / group;
      float m = -std::numeric_limits<float>::infinity(), l = 0;
      for (int j = 0; j < D; ++j) acc[j] = 0;
      for (int p = 0; p <= pos[r]; ++p) {
        const size_t at = (size_t(seq.block_table[p / kv.block_tokens]) * kv.block_tokens + p % kv.block_tokens) * ts +
                          size_t(kvh) * D;
        const float s = dot(qh, kd + at, D) * scale;
        if (s > m) {
          const float decay = std::exp(m - s);  // exp(-inf) = 0 on the first position
          l = l * decay + 1.0f;
          scale_add(acc, decay, 1.0f, vd + at, D);
          m = s;
        } else {
          const float w = std::exp(s - m);
          l += w;
          scale_add(acc, 1.0f, w, vd + at, D);
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
  if (kv.type == GgmlType::F32) {
    kv_store_impl<float>(kv, seq, k, v, pos, rows);
  } else {
    kv_store_impl<uint16_t>(kv, seq, k, v, pos, rows);
  }
}

void CpuBackend::attention(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos,
                           int n_head, const KvLayerView& kv, const SeqKv& seq, float scale, float* out) {
  if (kv.type == GgmlType::F32) {
    attention_impl<float>(pool_, q, q_row_stride, q_head_stride, rows, pos, n_head, kv, seq, scale, out);
  } else {
    attention_impl<uint16_t>(pool_, q, q_row_stride, q_head_stride, rows, pos, n_head, kv, seq, scale, out);
  }
}

}  // namespace df
