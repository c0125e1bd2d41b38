// The CPU reference backend: host memory, a thread pool, SIMD dot products from quant/.
#pragma once
#include <vector>

#include "backend/backend.h"
#include "util/thread_pool.h"

namespace df {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int n_threads) : pool_(n_threads) {}
  const char* name() const override { return "cpu"; }
  ThreadPool& pool() { return pool_; }

  void* alloc(size_t bytes) override;
  void release(void* p) override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void copy_2d_indexed(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, int rows,
                       const int32_t* index, size_t index_bytes) override;
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
               int rows) override;
  void synchronize() override {}
  const void* weight_data(const void* host, size_t) override { return host; }

  void matmul(const Weight& w, const float* x, int rows, float* y) override;
  void embed(const Weight& table, const int32_t* tokens, int rows, float* out) override;
  void rms_norm(const float* x, size_t x_stride, const float* w, int n, int dim, float eps, float* out,
                size_t out_stride) override;
  void add(float* x, const float* y, int64_t n) override;
  void swiglu(const float* gate, const float* up, int rows, int n, float* out) override;
  void mul_sigmoid(float* x, size_t x_stride, const float* g, size_t g_stride, int rows, int n_heads, int n) override;
  void rope_neox(float* x, size_t row_stride, size_t head_stride, int rows, int n_heads, const int32_t* pos,
                 int n_rot, float theta) override;
  void kv_store(const KvLayerView& kv, const SeqKv& seq, const float* k, const float* v, const int32_t* pos,
                int rows) override;
  void attention(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos,
                 int n_head, const KvLayerView& kv, const SeqKv& seq, float scale, float* out) override;
  void conv1d_silu(const float* x, size_t x_stride, int rows, int channels, const float* w, int kernel,
                   float* state, float* out, size_t out_stride) override;
  void l2_norm_heads(float* x, size_t row_stride, int rows, int n_heads, int dim, float eps, float scale) override;
  void gdn_gates(float* b, float* a, const float* a_coef, const float* dt_bias, int rows, int n_v) override;
  void gdn_delta_rule(const GdnShape& shape, const float* qkv, size_t qkv_stride, const float* g,
                      const float* beta, int rows, float* S, float* out, bool chunked, bool keep_state,
                      const int32_t* rows_limit) override;
  void gated_rms_norm(float* x, const float* z, const float* w, int rows, int n_heads, int dim,
                      float eps) override;
  void argmax_rows(const float* x, int rows, int n, size_t stride, int32_t* out_host) override;
  // Backend memory is host memory here: the ids are written where argmax_rows writes them.
  void argmax_rows_to(const float* x, int rows, int n, size_t stride, int32_t* out) override {
    argmax_rows(x, rows, n, stride, out);
  }
  void top_k_rows(const float* x, int rows, int n, size_t stride, int k, int32_t* ids_host, float* vals_host) override;

 private:
  ThreadPool pool_;
  std::vector<uint8_t> act_scratch_;  // activations converted for vec_dot (grows, then reused)
};

}  // namespace df
