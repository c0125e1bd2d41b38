// ForwardingBackend: each op to the inner backend, through around() (see the header).
#include "backend/forwarding_backend.h"

namespace df {

void* ForwardingBackend::alloc(size_t bytes) {
  void* p = nullptr;
  forward({BackendOp::kAlloc}, [&] { p = inner_.alloc(bytes); });
  return p;
}
void ForwardingBackend::release(void* p) {
  forward({BackendOp::kRelease}, [&] { inner_.release(p); });
}
void ForwardingBackend::upload(void* dst, const void* src, size_t bytes) {
  forward({BackendOp::kUpload}, [&] { inner_.upload(dst, src, bytes); });
}
void ForwardingBackend::download(void* dst, const void* src, size_t bytes) {
  forward({BackendOp::kDownload}, [&] { inner_.download(dst, src, bytes); });
}
void ForwardingBackend::copy(void* dst, const void* src, size_t bytes) {
  forward({BackendOp::kCopy}, [&] { inner_.copy(dst, src, bytes); });
}
void ForwardingBackend::copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                                int rows) {
  forward({BackendOp::kCopy2d}, [&] { inner_.copy_2d(dst, dst_pitch, src, src_pitch, row_bytes, rows); });
}
void ForwardingBackend::copy_2d_indexed(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                                        size_t row_bytes, int rows, const int32_t* index, size_t index_bytes) {
  forward({BackendOp::kCopy2dIndexed},
          [&] { inner_.copy_2d_indexed(dst, dst_pitch, src, src_pitch, row_bytes, rows, index, index_bytes); });
}
void ForwardingBackend::synchronize() {
  forward({BackendOp::kSynchronize}, [&] { inner_.synchronize(); });
}
const void* ForwardingBackend::weight_data(const void* host, size_t bytes) {
  const void* p = nullptr;
  forward({BackendOp::kWeightData}, [&] { p = inner_.weight_data(host, bytes); });
  return p;
}
Weight ForwardingBackend::upload_matrix(const Weight& host) {
  Weight w;
  forward({BackendOp::kWeightData}, [&] { w = inner_.upload_matrix(host); });
  return w;
}
void ForwardingBackend::matmul(const Weight& w, const float* x, int rows, float* y) {
  forward({BackendOp::kMatmul, &w, rows}, [&] { inner_.matmul(w, x, rows, y); });
}
void ForwardingBackend::matmul_shared_input(const Weight* const* ws, float* const* ys, int n, const float* x,
                                            int rows) {
  forward({BackendOp::kMatmulSharedInput, nullptr, rows}, [&] { inner_.matmul_shared_input(ws, ys, n, x, rows); });
}
void ForwardingBackend::prompt_matmul_shared_input(const Weight* const* ws, float* const* ys, int n, const float* x,
                                                   int rows) {
  forward({BackendOp::kPromptMatmulSharedInput, nullptr, rows},
          [&] { inner_.prompt_matmul_shared_input(ws, ys, n, x, rows); });
}
void ForwardingBackend::embed(const Weight& table, const int32_t* tokens, int rows, float* out) {
  forward({BackendOp::kEmbed, &table, rows}, [&] { inner_.embed(table, tokens, rows, out); });
}
void ForwardingBackend::rms_norm(const float* x, size_t x_stride, const float* w, int n, int dim, float eps,
                                 float* out, size_t out_stride) {
  forward({BackendOp::kRmsNorm}, [&] { inner_.rms_norm(x, x_stride, w, n, dim, eps, out, out_stride); });
}
void ForwardingBackend::add(float* x, const float* y, int64_t n) {
  forward({BackendOp::kAdd}, [&] { inner_.add(x, y, n); });
}
void ForwardingBackend::add_rms_norm(float* x, const float* y, const float* w, int n, int dim, float eps, float* out,
                                     size_t out_stride) {
  forward({BackendOp::kAddRmsNorm}, [&] { inner_.add_rms_norm(x, y, w, n, dim, eps, out, out_stride); });
}
void ForwardingBackend::swiglu(const float* gate, const float* up, int rows, int n, float* out) {
  forward({BackendOp::kSwiglu}, [&] { inner_.swiglu(gate, up, rows, n, out); });
}
void ForwardingBackend::mul_sigmoid(float* x, size_t x_stride, const float* g, size_t g_stride, int rows,
                                    int n_heads, int n) {
  forward({BackendOp::kMulSigmoid}, [&] { inner_.mul_sigmoid(x, x_stride, g, g_stride, rows, n_heads, n); });
}
void ForwardingBackend::rope_neox(float* x, size_t row_stride, size_t head_stride, int rows, int n_heads,
                                  const int32_t* pos, int n_rot, float theta) {
  forward({BackendOp::kRope}, [&] { inner_.rope_neox(x, row_stride, head_stride, rows, n_heads, pos, n_rot, theta); });
}
void ForwardingBackend::qk_norm_rope(float* q, size_t q_head_stride, int n_head, const float* q_norm, float* k,
                                     int n_head_kv, const float* k_norm, int rows, int head_dim, float eps,
                                     const int32_t* pos, int n_rot, float theta) {
  forward({BackendOp::kQkNormRope}, [&] {
    inner_.qk_norm_rope(q, q_head_stride, n_head, q_norm, k, n_head_kv, k_norm, rows, head_dim, eps, pos, n_rot, theta);
  });
}
void ForwardingBackend::kv_store(const KvLayerView& kv, const SeqKv& seq, const float* k, const float* v,
                                 const int32_t* pos, int rows) {
  forward({BackendOp::kKvStore}, [&] { inner_.kv_store(kv, seq, k, v, pos, rows); });
}
void ForwardingBackend::attention(const float* q, size_t q_row_stride, size_t q_head_stride, int rows,
                                  const int32_t* pos, int n_head, const KvLayerView& kv, const SeqKv& seq,
                                  float scale, float* out) {
  forward({BackendOp::kAttention},
          [&] { inner_.attention(q, q_row_stride, q_head_stride, rows, pos, n_head, kv, seq, scale, out); });
}
void ForwardingBackend::conv1d_silu(const float* x, size_t x_stride, int rows, int channels, const float* w,
                                    int kernel, float* state, float* out, size_t out_stride) {
  forward({BackendOp::kConv1d},
          [&] { inner_.conv1d_silu(x, x_stride, rows, channels, w, kernel, state, out, out_stride); });
}
void ForwardingBackend::l2_norm_heads(float* x, size_t row_stride, int rows, int n_heads, int dim, float eps,
                                      float scale) {
  forward({BackendOp::kL2Norm}, [&] { inner_.l2_norm_heads(x, row_stride, rows, n_heads, dim, eps, scale); });
}
void ForwardingBackend::gdn_gates(float* b, float* a, const float* a_coef, const float* dt_bias, int rows, int n_v) {
  forward({BackendOp::kGdnGates}, [&] { inner_.gdn_gates(b, a, a_coef, dt_bias, rows, n_v); });
}
void ForwardingBackend::gdn_conv_norm_gates(const GdnShape& shape, const float* x, size_t x_stride, int rows,
                                            const float* conv_w, int kernel, float* conv_state, float* out,
                                            size_t out_stride, float eps, float q_scale, float* beta, float* alpha,
                                            const float* a_coef, const float* dt_bias) {
  forward({BackendOp::kGdnConvNormGates}, [&] {
    inner_.gdn_conv_norm_gates(shape, x, x_stride, rows, conv_w, kernel, conv_state, out, out_stride, eps, q_scale,
                               beta, alpha, a_coef, dt_bias);
  });
}
void ForwardingBackend::gdn_delta_rule(const GdnShape& shape, const float* qkv, size_t qkv_stride, const float* g,
                                       const float* beta, int rows, float* S, float* out, bool chunked,
                                       bool keep_state, const int32_t* rows_limit) {
  forward({BackendOp::kGdnDeltaRule}, [&] {
    inner_.gdn_delta_rule(shape, qkv, qkv_stride, g, beta, rows, S, out, chunked, keep_state, rows_limit);
  });
}
void ForwardingBackend::gated_rms_norm(float* x, const float* z, const float* w, int rows, int n_heads, int dim,
                                       float eps) {
  forward({BackendOp::kGatedRmsNorm}, [&] { inner_.gated_rms_norm(x, z, w, rows, n_heads, dim, eps); });
}
void ForwardingBackend::argmax_rows(const float* x, int rows, int n, size_t stride, int32_t* out_host) {
  forward({BackendOp::kArgmax}, [&] { inner_.argmax_rows(x, rows, n, stride, out_host); });
}
void ForwardingBackend::argmax_rows_to(const float* x, int rows, int n, size_t stride, int32_t* out) {
  forward({BackendOp::kArgmaxTo}, [&] { inner_.argmax_rows_to(x, rows, n, stride, out); });
}
void ForwardingBackend::top_k_rows(const float* x, int rows, int n, size_t stride, int k, int32_t* ids_host,
                                   float* vals_host) {
  forward({BackendOp::kTopK}, [&] { inner_.top_k_rows(x, rows, n, stride, k, ids_host, vals_host); });
}

}  // namespace df
