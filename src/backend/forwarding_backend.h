// A Backend that wraps another and forwards every op to it, each through one hook, around():
// the base of the wrappers that watch what a model issues (ProfilingBackend, the tests' step
// census), so that a new Backend op is forwarded in this one place.
#pragma once
#include "backend/backend.h"

namespace df {

// The ops around() sees. ProfilingBackend's fixed table rows are these values (in this order),
// up to kMatmul.
enum class BackendOp : int {
  kAlloc, kRelease, kUpload, kDownload, kCopy, kCopy2d, kSynchronize, kWeightData, kEmbed, kRmsNorm, kAdd,
  kSwiglu, kMulSigmoid, kRope, kKvStore, kAttention, kConv1d, kL2Norm, kGdnGates, kGdnDeltaRule,
  kGatedRmsNorm, kArgmax, kAddRmsNorm, kQkNormRope, kGdnConvNormGates, kTopK, kCopy2dIndexed, kArgmaxTo,
  kMatmul, kMatmulSharedInput, kPromptMatmulSharedInput,
  kPromptMatmul,  // ProfilingBackend's own: one weight of a prompt product
};

// One forwarded op: which, and for matmul and embed the weight (the table) and the rows.
struct OpCall {
  BackendOp op;
  const Weight* weight = nullptr;
  int rows = 0;
};

// Runs the op on the inner backend: a reference to the forwarder's lambda (no allocation, so
// wrappers that count host allocations see none of their own).
class OpBody {
 public:
  template <class F>
  explicit OpBody(F& f) : f_(&f), call_([](void* p) { (*static_cast<F*>(p))(); }) {}
  void operator()() const { call_(f_); }

 private:
  void* f_;
  void (*call_)(void*);
};

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(Backend& inner) : inner_(inner) {}

  Backend& inner() { return inner_; }

  const char* name() const override { return inner_.name(); }
  void* alloc(size_t bytes) override;
  void release(void* p) override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, int rows) override;
  void copy_2d_indexed(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, int rows,
                       const int32_t* index, size_t index_bytes) override;
  void synchronize() override;
  const void* weight_data(const void* host, size_t bytes) override;
  Weight upload_matrix(const Weight& host) override;
  void matmul(const Weight& w, const float* x, int rows, float* y) override;
  void matmul_shared_input(const Weight* const* ws, float* const* ys, int n, const float* x, int rows) override;
  void prompt_matmul_shared_input(const Weight* const* ws, float* const* ys, int n, const float* x, int rows) override;
  void embed(const Weight& table, const int32_t* tokens, int rows, float* out) override;
  void rms_norm(const float* x, size_t x_stride, const float* w, int n, int dim, float eps, float* out,
                size_t out_stride) override;
  void add(float* x, const float* y, int64_t n) override;
  void add_rms_norm(float* x, const float* y, const float* w, int n, int dim, float eps, float* out,
                    size_t out_stride) override;
  void swiglu(const float* gate, const float* up, int rows, int n, float* out) override;
  void mul_sigmoid(float* x, size_t x_stride, const float* g, size_t g_stride, int rows, int n_heads, int n) override;
  void rope_neox(float* x, size_t row_stride, size_t head_stride, int rows, int n_heads, const int32_t* pos,
                 int n_rot, float theta) override;
  void qk_norm_rope(float* q, size_t q_head_stride, int n_head, const float* q_norm, float* k, int n_head_kv,
                    const float* k_norm, int rows, int head_dim, float eps, const int32_t* pos, int n_rot,
                    float theta) override;
  void kv_store(const KvLayerView& kv, const SeqKv& seq, const float* k, const float* v, const int32_t* pos,
                int rows) override;
  void attention(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos,
                 int n_head, const KvLayerView& kv, const SeqKv& seq, float scale, float* out) override;
  void conv1d_silu(const float* x, size_t x_stride, int rows, int channels, const float* w, int kernel,
                   float* state, float* out, size_t out_stride) override;
  void l2_norm_heads(float* x, size_t row_stride, int rows, int n_heads, int dim, float eps, float scale) override;
  void gdn_gates(float* b, float* a, const float* a_coef, const float* dt_bias, int rows, int n_v) override;
  void gdn_conv_norm_gates(const GdnShape& shape, const float* x, size_t x_stride, int rows, const float* conv_w,
                           int kernel, float* conv_state, float* out, size_t out_stride, float eps, float q_scale,
                           float* beta, float* alpha, const float* a_coef, const float* dt_bias) override;
  void gdn_delta_rule(const GdnShape& shape, const float* qkv, size_t qkv_stride, const float* g,
                      const float* beta, int rows, float* S, float* out, bool chunked, bool keep_state,
                      const int32_t* rows_limit) override;
  void gated_rms_norm(float* x, const float* z, const float* w, int rows, int n_heads, int dim,
                      float eps) override;
  void argmax_rows(const float* x, int rows, int n, size_t stride, int32_t* out_host) override;
  void argmax_rows_to(const float* x, int rows, int n, size_t stride, int32_t* out) override;
  void top_k_rows(const float* x, int rows, int n, size_t stride, int k, int32_t* ids_host, float* vals_host) override;
  // Forwarded without around(): they are no ops, and the wrappers that track steps override them.
  void begin_step() override { inner_.begin_step(); }
  void end_step() override { inner_.end_step(); }
  StepReplayCounts step_replay_counts() const override { return inner_.step_replay_counts(); }

 protected:
  // Every op above (but the steps) comes here; body() runs it on the inner backend.
  virtual void around(const OpCall& call, OpBody body) {
    (void)call;
    body();
  }

 private:
  template <class F>
  void forward(const OpCall& call, F&& f) {
    around(call, OpBody(f));
  }
  Backend& inner_;
};

}  // namespace df
