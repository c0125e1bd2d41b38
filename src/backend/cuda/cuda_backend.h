// The CUDA backend: device memory, one stream, kernels in src/backend/cuda/*.cu. Ops enqueue
// work and return; download() and synchronize() wait for it. Weights are uploaded as stored in
// the file (quantized bytes) and dequantized on the fly by the kernels.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"

struct CUstream_st;  // cudaStream_t without including the CUDA headers here

namespace df {

// Not final: CudaGraphBackend (cuda_graphs.h) derives from it to record and replay steps.
class CudaBackend : public Backend {
 public:
  // fuse_quantize: rms_norm / add_rms_norm / swiglu / mul_sigmoid / gated_rms_norm also write
  // the Q8_K activations of their output for the integer tensor-core product that reads it
  // next (false: every product quantizes its input itself; the tests compare the two).
  // tiles: upload_matrix stores Q4_K matrices as 16-row tiles (quant/q4k_tiles.h), which the
  // decode kernel streams ~15-20% faster (bench/matmul_kernels, session 8), with bit-identical
  // products (CudaGraphs.Q4kTilesGiveTheSameLogits, CudaOps.Q4kTiledWeightsEqualRows), Q6_K ones
  // the integer kernels take likewise (quant/q6k_tiles.h; CudaOps.Q6kTiledWeightsEqualRows); and Q5_K,
  // IQ4_XS and Q8_0 matrices as tiles (quant/q5k_tiles.h, iq4xs_tiles.h, q80_tiles.h; Q8_0 of
  // whole 256-element super-blocks), the only layouts in which the integer kernels take them:
  // false leaves them in GGUF rows on the f16 tensor-core kernel (other bits).
  // prompt_f16: prompt products (prompt_matmul_shared_input) of Q4_K tile weights run as f16
  // tensor-core GEMMs on dequantized weights (deq_wgmma.cu, Hopper only: elsewhere, or false,
  // they are matmul's integer products).
  explicit CudaBackend(int device, bool fuse_quantize = true, bool tiles = true, bool prompt_f16 = true);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const char* name() const override { return "cuda"; }
  int device() const { return device_; }

  void* alloc(size_t bytes) override;
  void release(void* p) override;
  void upload(void* dst, const void* src, size_t bytes) override;
  void download(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void copy_2d_indexed(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, int rows,
                       const int32_t* index, size_t index_bytes) override;
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
               int rows) override;
  void synchronize() override;
  const void* weight_data(const void* host, size_t bytes) override;
  // Q4_K, Q5_K, Q6_K, IQ4_XS and Q8_0 matrices the integer kernels take are stored as 16-row tiles (see tiles above).
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

  // Products that took their Q8_K activations from the op before them (tests check it).
  int64_t fused_q8k_uses() const { return fused_q8k_uses_; }
  // Prompt products that ran as f16 GEMMs (prompt_f16; tests check the model takes them).
  int64_t prompt_f16_products() const { return prompt_f16_products_; }

  // The stream every op is queued on (for the profiler's event clock, cuda_op_clock.cpp).
  CUstream_st* stream() const { return stream_; }

 protected:
  // Makes device_ current for this thread; every op passes here (after taking the fused
  // activations, see take_fused_q8k), so it also forgets them.
  void enter();
  void check_launch(const char* op) const;  // throws df::Error on a launch error
  // kv_store / attention with the block table already in device memory (n_blocks entries).
  void kv_store_table(const KvLayerView& kv, const int32_t* table, int n_blocks, const float* k, const float* v,
                      const int32_t* pos, int rows);
  void attention_table(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos,
                       int n_head, const KvLayerView& kv, const int32_t* table, int n_blocks, float scale,
                       float* out);
  // The argmax kernels of argmax_rows into out (device memory), or into argmax_dev_ when out is
  // null; returns where the ids went. No download.
  const int32_t* argmax_launch(const float* x, int rows, int n, size_t stride, int32_t* out = nullptr);
  const int32_t* argmax_results() const { return argmax_dev_; }
  // The top-k kernels of top_k_rows into top_k_scratch_, without the download.
  void top_k_launch(const float* x, int rows, int n, size_t stride, int k);
  // The results of the last top_k_launch to the host: one download, split into ids and values.
  void top_k_download(int rows, int k, int32_t* ids_host, float* vals_host);
  // Counts reallocations of the buffers that launches use without them being op arguments
  // (matmul and delta-rule scratch, copy bounce, argmax results, block table): a CUDA graph
  // captured under one generation may hold pointers freed in a later one.
  uint64_t buffers_generation_ = 0;

 private:
  // SeqKv::block_table is host memory (Sequence::block_table); kernels need a device copy.
  const int32_t* device_block_table(const SeqKv& seq);
  // Grows a grow-only device buffer to `bytes` (waits for queued work that may still use it).
  void ensure_scratch(void*& buf, size_t& cap, size_t bytes, const char* what);

  // Q8_K activations of an op's output, written by the op's kernel itself (cuda::rms_norm's
  // q8k, and swiglu's, mul_sigmoid's, gated_rms_norm's) into fused_q8k_. Valid only until the
  // next op: products call take_fused_q8k() before enter(), and enter() clears the record, so
  // any op in between (add() on the same buffer, a copy, an upload) invalidates it. CUDA graphs
  // replay the same calls through these functions, so a captured step makes the same choices as
  // the same step launched directly.
  struct FusedQ8k {
    const float* x = nullptr;  // the op's output, the product's input
    int rows = 0;
    int64_t n_in = 0;
    // Whether they are the activations of a product of px with prows rows of pn_in inputs.
    bool matches(const float* px, int prows, int64_t pn_in) const {
      return x != nullptr && px == x && prows == rows && pn_in == n_in;
    }
  };
  FusedQ8k take_fused_q8k();
  // fused_q8k_ if f holds the activations of this product's input (counted), else null.
  const void* fused_q8k_of(const FusedQ8k& f, const float* x, int rows, int64_t n_in);
  // fused_q8k_of for a product with w, whose type may read another format (Q8_0: null).
  const void* fused_q8k_for_type(const FusedQ8k& f, const float* x, int rows, const Weight& w);
  // fused_q8k_ ready for an op writing `rows` rows of n_in floats (contiguous) and their Q8_K
  // forms, or null where it does not fuse (`supported`: the op's kernel can; fuse_quantize_).
  void* fused_q8k_for(bool supported, int rows, int64_t n_in, const char* what);

  int device_ = 0;
  CUstream_st* stream_ = nullptr;
  std::vector<void*> weights_;  // device copies made by weight_data (owned)
  int32_t* table_dev_ = nullptr;  // last uploaded block table (grow-only buffer)
  size_t table_cap_ = 0;
  std::vector<int32_t> table_host_;  // its contents, to skip identical re-uploads
  void* bounce_ = nullptr;           // scratch for overlapping copy()
  size_t bounce_cap_ = 0;
  void* many_scratch_ = nullptr;  // f32 W slice + x of the multi-row matmul (grow-only)
  size_t many_scratch_cap_ = 0;   // in bytes
  void* mma_scratch_ = nullptr;  // activations of the tensor-core matmuls, f16 or Q8_K (grow-only)
  size_t mma_scratch_cap_ = 0;    // in bytes
  void* attn_scratch_ = nullptr;  // per-chunk partials of the split decode attention (grow-only)
  size_t attn_scratch_cap_ = 0;   // in bytes
  void* gdn_scratch_ = nullptr;  // per-chunk records of the chunked delta rule (grow-only)
  size_t gdn_scratch_cap_ = 0;    // in bytes
  // argmax_rows results before the download, then the kernels' per-chunk picks (grow-only)
  int32_t* argmax_dev_ = nullptr;
  int argmax_cap_ = 0;  // in rows: cuda::argmax_scratch_bytes(argmax_cap_) bytes
  void* top_k_scratch_ = nullptr;  // top_k_rows results and per-chunk lists (grow-only)
  size_t top_k_scratch_cap_ = 0;   // in bytes
  std::vector<uint32_t> top_k_host_;  // the downloaded results before the split (grow-only)
  bool fuse_quantize_ = true;
  bool tiles_ = true;
  bool prompt_f16_ = false;  // the option, where deq_wgmma runs
  int64_t prompt_f16_products_ = 0;
  FusedQ8k fused_;                   // what fused_q8k_ holds, if the last op wrote it
  void* fused_q8k_ = nullptr;        // cuda::q8k_fused_bytes (grow-only)
  size_t fused_q8k_cap_ = 0;          // in bytes
  int64_t fused_q8k_uses_ = 0;
};

}  // namespace df
