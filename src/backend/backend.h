// The op set every backend implements. Models are plain code calling these in order.
// Pointers to activations, weights and state are backend memory (host memory for the CPU
// backend, device memory for CUDA). Activations are row-major float32: one row per batch row.
#pragma once
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>

#include "backend/top_k_order.h"  // kMaxDeviceTopK
#include "quant/types.h"

namespace df {

// A 2-D weight as stored in the file: n_out rows of n_in elements in `type` blocks.
struct Weight {
  GgmlType type = GgmlType::F32;
  int64_t n_in = 0;   // ne0
  int64_t n_out = 0;  // ne1
  const void* data = nullptr;
  size_t row_bytes = 0;  // of a GGUF row (also when the bytes are stored otherwise)
  // data holds its type's tile layout (Q4_K, Q5_K, Q6_K, IQ4_XS, Q8_0: quant/q4k_tiles.h,
  // q5k_tiles.h, q6k_tiles.h, iq4xs_tiles.h, q80_tiles.h), not GGUF rows: Backend::upload_matrix
  // of a backend whose products read it faster (CUDA); only those products read such weights.
  bool tiles = false;
  explicit operator bool() const { return data != nullptr; }
};

// Shapes of a Gated DeltaNet layer (GGUF head order: value head h uses key head h % n_k).
struct GdnShape {
  int n_k = 0, n_v = 0;  // key heads, value heads
  int d_k = 0, d_v = 0;  // key head dim, value head dim
  int conv_dim() const { return 2 * n_k * d_k + n_v * d_v; }
  size_t state_floats() const { return size_t(n_v) * d_k * d_v; }  // S[h][i (key)][j (value)]
};

// One attention layer's paged KV storage: K and V, [block][slot in block][kv head][dim], as
// f16 (default), f32 (exact; used for tight parity checks) or q8_0 (34-byte blocks of 32
// elements, the weight format: f16 scale amax/127, 32 int8; head_dim a multiple of 32, so each
// head row is whole blocks). A token's row is token_bytes() bytes; head h starts h * head_bytes()
// into it.
struct KvLayerView {
  void* k = nullptr;
  void* v = nullptr;
  int block_tokens = 0;
  int n_head_kv = 0, head_dim = 0;
  GgmlType type = GgmlType::F16;
  size_t token_stride() const { return size_t(n_head_kv) * head_dim; }  // elements per token
  size_t head_bytes() const { return row_size(type, head_dim); }
  size_t token_bytes() const { return row_size(type, int64_t(token_stride())); }
};

// Throws df::Error unless `type` can hold a KV cache of this head dim: F16, F32, or Q8_0 when
// head_dim is a multiple of its 32-element block (each head row is then whole blocks).
void check_kv_type(GgmlType type, int head_dim);

// Where a sequence's tokens live: block_table[pos / block_tokens] is the block of position pos.
struct SeqKv {
  const int32_t* block_table = nullptr;
  int n_blocks = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // --- memory ---
  virtual void* alloc(size_t bytes) = 0;  // zero-initialised
  virtual void release(void* p) = 0;
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // Copies `rows` rows of row_bytes bytes: row r from src + r * src_pitch to dst + r * dst_pitch
  // (regions must not overlap). Used to gather and scatter strided rows (drafter features,
  // conv-window checkpoints).
  virtual void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                       int rows) = 0;
  // copy_2d from src + (*index) * index_bytes, index (one int32, backend memory) read when the
  // copy runs: a step whose source row is only known later (a commit's kept row) then issues the
  // same op whatever the row, so a CUDA graph of it replays for every row.
  virtual void copy_2d_indexed(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                               int rows, const int32_t* index, size_t index_bytes) = 0;
  virtual void synchronize() = 0;
  // Makes weight bytes from the (mapped) file usable by ops. The CPU backend reads the mapping
  // in place; a GPU backend uploads. The file must outlive the backend's use of the result.
  virtual const void* weight_data(const void* host, size_t bytes) = 0;
  // A matrix for the products (matmul, matmul_shared_input), host.data its GGUF bytes (as
  // weight_data takes them): a backend may store it in a layout its product kernels read faster
  // (CUDA: Q4_K, Q5_K, Q6_K, IQ4_XS and Q8_0 as 16-row tiles). Embedding tables, which embed() reads by
  // row, use weight_data.
  virtual Weight upload_matrix(const Weight& host) {
    Weight w = host;
    w.data = weight_data(host.data, host.row_bytes * size_t(host.n_out));
    return w;
  }

  // --- dense ops (rows = batch rows) ---
  // y[r][o] = sum_k W[o][k] * x[r][k]; x is rows × n_in (contiguous), y is rows × n_out.
  virtual void matmul(const Weight& w, const float* x, int rows, float* y) = 0;
  // out[r] = dequantized row tokens[r] of the embedding table (ne0 = n_embd).
  virtual void embed(const Weight& table, const int32_t* tokens, int rows, float* out) = 0;
  // ys[i] = x ws[i]^T for n weights that share the input x, each exactly as matmul(*ws[i], x,
  // rows, ys[i]) would compute it: the projections a layer applies to one activation (q/k/v,
  // qkv/z/beta/alpha, gate/up). A backend may share work between them (CUDA: one quantization
  // of x, one launch); the default runs them one by one.
  virtual void matmul_shared_input(const Weight* const* ws, float* const* ys, int n, const float* x, int rows) {
    for (int i = 0; i < n; ++i) matmul(*ws[i], x, rows, ys[i]);
  }
  // The same products for rows that are all prompt tokens of prefill-form segments (the model
  // decides: TargetModel's forward). A backend may use a kernel that is faster for many rows but
  // gives these rows other bits than matmul (CUDA: an f16 tensor-core GEMM on dequantized
  // weights); it must still compute each row independently of the others in the call. Decode
  // and verify rows never come here, so they keep matmul's bits and speculation stays exact.
  virtual void prompt_matmul_shared_input(const Weight* const* ws, float* const* ys, int n, const float* x,
                                          int rows) {
    matmul_shared_input(ws, ys, n, x, rows);
  }
  // RMSNorm of n vectors of length dim: out = x * rsqrt(mean(x^2) + eps) * w. Vector i starts at
  // x + i * x_stride (and out + i * out_stride); out may equal x.
  virtual void rms_norm(const float* x, size_t x_stride, const float* w, int n, int dim, float eps,
                        float* out, size_t out_stride) = 0;
  // x[i] += y[i]
  virtual void add(float* x, const float* y, int64_t n) = 0;
  // The residual add and the norm that follows it: x += y over n contiguous vectors of dim, then
  // out = rms_norm(x) as rms_norm(x, dim, w, n, dim, eps, out, out_stride) computes it, bit for
  // bit. A backend may fuse the two (CUDA: one kernel); the default runs them in turn.
  virtual void add_rms_norm(float* x, const float* y, const float* w, int n, int dim, float eps, float* out,
                            size_t out_stride) {
    add(x, y, int64_t(n) * dim);
    rms_norm(x, size_t(dim), w, n, dim, eps, out, out_stride);
  }
  // out[r][i] = silu(gate[r][i]) * up[r][i] for rows of n (all contiguous: row r at r * n).
  virtual void swiglu(const float* gate, const float* up, int rows, int n, float* out) = 0;
  // x[v][i] *= sigmoid(g[v][i]) for i < n, for the rows x n_heads vectors v = r * n_heads + h: of
  // x at x + v * x_stride, of g at g + v * g_stride. (A backend may quantize x for the product
  // that reads its rows of n_heads vectors next: CudaBackend.)
  virtual void mul_sigmoid(float* x, size_t x_stride, const float* g, size_t g_stride, int rows, int n_heads,
                           int n) = 0;
  // NeoX-style rotary embedding of the first n_rot dims of each head, in place. Head h of row r
  // starts at x + r * row_stride + h * head_stride. Pairs (i, i + n_rot/2).
  virtual void rope_neox(float* x, size_t row_stride, size_t head_stride, int rows, int n_heads,
                         const int32_t* pos, int n_rot, float theta) = 0;
  // An attention layer's q and k head norms and their rotary embedding, in place: q holds rows
  // of n_head heads (head h of row r at q + (r * n_head + h) * q_head_stride), k rows of
  // n_head_kv contiguous heads of head_dim. The result is, bit for bit, that of
  //   rms_norm(q, q_head_stride, q_norm, rows * n_head, head_dim, eps, q, q_head_stride);
  //   rms_norm(k, head_dim, k_norm, rows * n_head_kv, head_dim, eps, k, head_dim);
  //   rope_neox(q, n_head * q_head_stride, q_head_stride, rows, n_head, pos, n_rot, theta);
  //   rope_neox(k, n_head_kv * head_dim, head_dim, rows, n_head_kv, pos, n_rot, theta);
  // on the same backend (the default runs exactly these; CUDA fuses them into one kernel).
  virtual void qk_norm_rope(float* q, size_t q_head_stride, int n_head, const float* q_norm, float* k, int n_head_kv,
                            const float* k_norm, int rows, int head_dim, float eps, const int32_t* pos, int n_rot,
                            float theta) {
    rms_norm(q, q_head_stride, q_norm, rows * n_head, head_dim, eps, q, q_head_stride);
    rms_norm(k, size_t(head_dim), k_norm, rows * n_head_kv, head_dim, eps, k, size_t(head_dim));
    rope_neox(q, size_t(n_head) * q_head_stride, q_head_stride, rows, n_head, pos, n_rot, theta);
    rope_neox(k, size_t(n_head_kv) * head_dim, size_t(head_dim), rows, n_head_kv, pos, n_rot, theta);
  }

  // --- attention over a paged KV cache ---
  // Writes k, v rows (rows × n_head_kv*head_dim, contiguous) at positions pos[] of one sequence.
  virtual void kv_store(const KvLayerView& kv, const SeqKv& seq, const float* k, const float* v,
                        const int32_t* pos, int rows) = 0;
  // Attention of `rows` query rows of one sequence: row r attends to the sequence's cached
  // positions 0..pos[r]. Causal rows pass their own positions; a drafter block, bidirectional
  // inside, passes the block's last position for every row. Head h of row r's query is at
  // q + r * q_row_stride + h * q_head_stride; output row r is out + r * n_head*head_dim.
  // Query head h uses kv head h / (n_head / n_head_kv). scale = 1/sqrt(head_dim) normally.
  virtual void attention(const float* q, size_t q_row_stride, size_t q_head_stride, int rows,
                         const int32_t* pos, int n_head, const KvLayerView& kv, const SeqKv& seq,
                         float scale, float* out) = 0;

  // --- Gated DeltaNet ---
  // Causal depthwise conv (kernel K) + SiLU over rows of `channels` values for one sequence.
  // state holds the previous K-1 inputs, time-major ([K-1][channels]), and is updated to the
  // last K-1 inputs. w is [channels][K] (w[c][K-1] multiplies the current input).
  virtual void conv1d_silu(const float* x, size_t x_stride, int rows, int channels, const float* w,
                           int kernel, float* state, float* out, size_t out_stride) = 0;
  // In place: L2-normalise each of n_heads vectors of length dim per row (x / max(|x|, eps)),
  // then multiply by scale.
  virtual void l2_norm_heads(float* x, size_t row_stride, int rows, int n_heads, int dim, float eps,
                             float scale) = 0;
  // In place over rows × n_v: beta = sigmoid(b); g = a_coef[h] * softplus(a + dt_bias[h]).
  virtual void gdn_gates(float* b, float* a, const float* a_coef, const float* dt_bias, int rows, int n_v) = 0;
  // A DeltaNet layer's work between its input projections and the delta rule, for `rows` rows
  // of one sequence: the conv of x (rows of shape.conv_dim() channels, stride x_stride) with its
  // state into out (which must not overlap x or the state), the L2 norms of out's q heads
  // (times q_scale) and k heads, and the gates of the rows' beta and alpha (rows x n_v, in
  // place). The result is, bit for bit, that of
  //   conv1d_silu(x, x_stride, rows, conv_dim, conv_w, kernel, conv_state, out, out_stride);
  //   l2_norm_heads(out, out_stride, rows, n_k, d_k, eps, q_scale);
  //   l2_norm_heads(out + n_k * d_k, out_stride, rows, n_k, d_k, eps, 1);
  //   gdn_gates(beta, alpha, a_coef, dt_bias, rows, n_v);
  // on the same backend (the default runs exactly these; CUDA fuses them into one kernel for
  // short segments: decode and verify).
  virtual void gdn_conv_norm_gates(const GdnShape& shape, const float* x, size_t x_stride, int rows,
                                   const float* conv_w, int kernel, float* conv_state, float* out, size_t out_stride,
                                   float eps, float q_scale, float* beta, float* alpha, const float* a_coef,
                                   const float* dt_bias) {
    const size_t qk = size_t(shape.n_k) * shape.d_k;
    conv1d_silu(x, x_stride, rows, shape.conv_dim(), conv_w, kernel, conv_state, out, out_stride);
    l2_norm_heads(out, out_stride, rows, shape.n_k, shape.d_k, eps, q_scale);
    l2_norm_heads(out + qk, out_stride, rows, shape.n_k, shape.d_k, eps, 1.0f);
    gdn_gates(beta, alpha, a_coef, dt_bias, rows, shape.n_v);
  }
  // Delta rule over `rows` tokens of one sequence, starting from state S (updated in place).
  // qkv rows (stride qkv_stride) hold [q (n_k*d_k) | k (n_k*d_k) | v (n_v*d_v)], q and k already
  // L2-normalised (q also scaled). g, beta: rows × n_v. out: rows × n_v*d_v.
  // chunked = true uses the chunked (parallel) form; both give the same result to fp32 round-off.
  // keep_state (recurrent form only): S is read and left unchanged. Speculative verification
  // runs so, keeping its rows' inputs, and commit replays the kept prefix from S: that writes
  // one state per layer, where per-row checkpoints wrote one per verified row.
  // rows_limit (nullable, recurrent form only): backend memory holding a count; only the first
  // min(rows, count) rows run (out's other rows untouched), so a replay of a varying number of
  // rows is the same call whatever the number (one CUDA graph).
  virtual void gdn_delta_rule(const GdnShape& shape, const float* qkv, size_t qkv_stride, const float* g,
                              const float* beta, int rows, float* S, float* out, bool chunked,
                              bool keep_state = false, const int32_t* rows_limit = nullptr) = 0;
  // out[r][h] = rms_norm(x[r][h]; w, eps) * silu(z[r][h]) per value head (w shared by heads).
  virtual void gated_rms_norm(float* x, const float* z, const float* w, int rows, int n_heads, int dim,
                              float eps) = 0;

  // --- sampling helpers ---
  // Greedy choice without downloading logits: out_host[r] (host memory, `rows` entries) = the
  // index of the largest of the first n values of row r (x + r * stride, backend memory; n <=
  // stride: ids >= n, such as a vocabulary's padding rows, never win). Ties go to the lowest
  // index; NaN is below every number (a row of only NaN gives 0). Waits for the result, like
  // download().
  virtual void argmax_rows(const float* x, int rows, int n, size_t stride, int32_t* out_host) = 0;
  // The same ids into backend memory (out: rows int32), without waiting for them: later ops read
  // them there (a drafter's proposals become a verify batch's tokens, Batch::add_speculative_from)
  // and one download brings them, with whatever else is ready, to the host. Inside a step it is
  // one more op of the step (CUDA: recorded into its graph).
  virtual void argmax_rows_to(const float* x, int rows, int n, size_t stride, int32_t* out) = 0;
  // Top-k candidates without downloading logits: for each row r (as argmax_rows) the k largest
  // of the first n values, sorted by value descending, equal values by lower id first (Sampler's
  // order; +0 and -0 are equal), NaN below every number. Writes k ids to ids_host[r * k ...] and
  // their values (bit for bit) to vals_host[r * k ...], host memory. 1 <= k <= min(n,
  // kMaxDeviceTopK), else df::Error. Waits for the result, like download().
  virtual void top_k_rows(const float* x, int rows, int n, size_t stride, int k, int32_t* ids_host,
                          float* vals_host) = 0;

  // --- steps (CUDA graphs) ---
  // A model brackets the ops of one forward pass with begin_step() / end_step() (StepScope).
  // A backend may then defer the step's ops and replay an identical earlier step as one unit
  // (the CUDA backend: a captured CUDA graph); the results are exactly those of direct calls.
  // Inside a step: upload() sources may be reused at once (as always); download(),
  // argmax_rows(), top_k_rows() and synchronize() first run what the step queued so far; alloc(), release()
  // and weight_data() do too, but a step should not need them; an op's argument errors may
  // surface at that point rather than at the call. The defaults (CPU backend, wrappers such as
  // the profiler) do nothing, so ops run as called.
  virtual void begin_step() {}
  virtual void end_step() {}

  // How this backend's steps ran so far (CUDA graphs: op by op, captured, replayed; all zero
  // where steps are not replayed). For run --stats-json and the tests.
  struct StepReplayCounts {
    int64_t direct = 0;    // op by op: a step whose capture would have grown a buffer
    int64_t captured = 0;  // captured and instantiated
    int64_t replayed = 0;  // launched from an existing graph
  };
  virtual StepReplayCounts step_replay_counts() const { return {}; }
};

// Brackets one step and ends it when leaving the scope. end_step() may run the queued work
// and throw its errors; while unwinding from another exception those are dropped instead.
class StepScope {
 public:
  explicit StepScope(Backend& be) : be_(be), unwinding_(std::uncaught_exceptions()) { be_.begin_step(); }
  ~StepScope() noexcept(false) {
    if (std::uncaught_exceptions() == unwinding_) {
      be_.end_step();
      return;
    }
    try {
      be_.end_step();
    } catch (...) {  // the exception in flight is the one to report
    }
  }
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

 private:
  Backend& be_;
  int unwinding_;
};

// The CPU backend with n_threads workers (0 = all hardware threads).
std::unique_ptr<Backend> make_cpu_backend(int n_threads);

// The CUDA backend on GPU `device` (0-based). Throws df::Error when this build has no CUDA
// backend (configured with DELTAFLASH_CUDA off) or the device cannot be used. cuda_graphs:
// steps (begin_step/end_step) are replayed as CUDA graphs (backend/cuda/cuda_graphs.h);
// false launches every op directly. tiles, prompt_f16: CudaBackend's options of the names.
std::unique_ptr<Backend> make_cuda_backend(int device, bool cuda_graphs = true, bool tiles = true,
                                           bool prompt_f16 = true);
// Usable CUDA devices: 0 when this build has no CUDA backend, or no driver or GPU is present.
int cuda_device_count();

}  // namespace df
