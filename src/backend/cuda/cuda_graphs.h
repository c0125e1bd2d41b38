// CudaGraphBackend: the CUDA backend with each step (Backend::begin_step .. end_step) replayed
// as a CUDA graph, so a decode or verify step costs one graph launch instead of hundreds of
// kernel launches.
//
// Inside a step ops are not launched but written to a tape: an op code and the bytes of every
// argument. Data that changes from step to step without changing the launches — upload()
// sources (tokens, positions) and block tables — goes to a staging area instead; at the end
// it is copied to a pinned buffer of that tape's own, and the tape holds copies from there
// (pinned-to-device memcpys, which a graph can hold), so it is part of the replay in its
// original order. Launching a step waits only for that same tape's previous run (its pinned
// bytes are rewritten), never for the different steps queued before it: a host may queue a
// drafter's block and the verify step that reads the drafts on the device back to back.
// When the step ends (or a download inside it needs its results) the tape is the key:
//   - a tape seen before whose graph was captured under the same buffer generation replays it;
//   - any other tape is captured now, instantiated and launched, unless a scratch buffer would
//     have to grow during the capture: then it runs op by op, as without graphs, which grows
//     the buffers to the step's needs, and its next sight captures.
// Block tables are staged padded with -1 entries to a power-of-two length (the kernels read
// -1 as "no block"), so a sequence growing by a block keeps its tape: decode re-captures at
// 16, 32, 64, ... tokens. That is the one difference from direct launches' arguments; the
// results are the same since a step only touches positions its real blocks hold.
// A graph was captured from byte-identical calls, so a replay launches the same kernels with
// the same arguments: results are bit-identical to direct launches. Buffers a launch uses
// without naming them (matmul scratch, argmax and top-k results, the block-table buffer) count
// a generation when reallocated; a graph from an older generation is captured again.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_backend.h"

struct CUgraphExec_st;  // cudaGraphExec_t
struct CUevent_st;      // cudaEvent_t

namespace df {

// Counts of how steps ran (the tests read them; Backend::step_replay_counts reports them).
using CudaGraphStats = Backend::StepReplayCounts;

class CudaGraphBackend final : public CudaBackend {
 public:
  // fuse_quantize, tiles, prompt_f16: as CudaBackend
  explicit CudaGraphBackend(int device, bool fuse_quantize = true, bool tiles = true, bool prompt_f16 = true);
  ~CudaGraphBackend() override;

  void begin_step() override;
  void end_step() override;
  const CudaGraphStats& graph_stats() const { return stats_; }
  StepReplayCounts step_replay_counts() const override { return stats_; }

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

 private:
  enum class Op : uint8_t;
  struct Tape {
    std::vector<unsigned char> bytes;
    template <class T>
    void put(const T& v);
  };
  class Reader;
  struct Graph {
    uint64_t hash = 0;
    std::vector<unsigned char> tape;
    CUgraphExec_st* exec = nullptr;  // null: seen, not captured (or handed to another tape)
    uint64_t generation = 0;
    uint64_t last_use = 0;
    unsigned char* pinned = nullptr;  // the tape's staged bytes (cudaMallocHost), read by its copies
    size_t pinned_bytes = 0;
    CUevent_st* done = nullptr;  // recorded after the tape's last run (graph or op by op)
    bool in_flight = false;      // done recorded and not yet waited for
  };
  struct StagedTable {
    size_t staged = 0;  // offset in staging_
    int n = 0;          // entries (real ones in tables_, padded in what stage_table returns)
    int device_index = 0;  // first entry in tables_dev_
  };

  bool recording() const { return depth_ > 0 && !replaying_; }
  // Appends op and args (converted to fn's parameter types) to the tape; replay() reads them
  // back in the same types and calls fn, so the two cannot disagree on the layout.
  template <class C, class... A, class... B>
  void record(Op op, void (C::*fn)(A...), const B&... args);
  template <class C, class... A>
  void replay(Reader& r, void (C::*fn)(A...));
  // What the tape's staged copies and table-using ops call when run.
  void upload_staged(void* dst, size_t staged, size_t bytes);
  void table_staged(int device_index, size_t staged, int n);
  void kv_store_at(const KvLayerView& kv, int table_index, int n_blocks, const float* k, const float* v,
                   const int32_t* pos, int rows);
  void attention_at(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos,
                    int n_head, const KvLayerView& kv, int table_index, int n_blocks, float scale, float* out);
  void argmax_at(const float* x, int rows, int n, size_t stride);
  void top_k_at(const float* x, int rows, int n, size_t stride, int k);
  static constexpr int kMaxSharedInput = 8;  // weights in one recorded shared-input product
  void record_matmul_shared(Op op, const Weight* const* ws, float* const* ys, int n, const float* x, int rows);
  void replay_matmul_shared(Reader& r, bool prompt);
  size_t stage(const void* src, size_t bytes);  // copies into staging_, returns the offset
  // Stages seq's table (once per step), padded with -1; returns where it goes on the device
  // (device_index, -1 for an empty table) and its padded length (n).
  StagedTable stage_table(const SeqKv& seq);
  void flush();                                 // runs the tape recorded so far
  void run_tape(const std::vector<unsigned char>& tape);
  void capture(Graph& g);
  void prepare_tables();      // sizes the block-table buffer for this tape
  void stage_into(Graph& g);  // staging_ to g's pinned buffer (after g's previous run), for run_tape
  void wait_idle(Graph& g);   // waits for g's last run
  void destroy(CUgraphExec_st*& exec);

  int depth_ = 0;
  bool replaying_ = false;
  Tape tape_;
  std::vector<unsigned char> staging_;
  std::vector<StagedTable> tables_;
  int tables_used_ = 0;  // int32 entries of tables_dev_ used by this tape
  const unsigned char* run_pinned_ = nullptr;  // the pinned bytes of the tape being run
  int32_t* tables_dev_ = nullptr;
  size_t tables_cap_ = 0;
  std::vector<Graph> graphs_;
  uint64_t clock_ = 0;
  CudaGraphStats stats_;
};

}  // namespace df
