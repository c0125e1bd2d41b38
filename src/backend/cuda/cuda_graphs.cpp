// CudaGraphBackend: steps recorded to a tape and replayed as CUDA graphs (see cuda_graphs.h).
#include "backend/cuda/cuda_graphs.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <tuple>
#include <type_traits>

#include "util/error.h"

namespace df {

namespace {

// Steps remembered at once (seen, or captured); the least recently used goes first. A decode
// or speculative loop uses one per shape: decode, verify widths, draft, ingest of 1..block
// rows, times the live block-table buckets.
constexpr size_t kMaxGraphs = 64;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA error in {}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

uint64_t hash_bytes(const std::vector<unsigned char>& b) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ b.size();
  size_t i = 0;
  for (; i + 8 <= b.size(); i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, b.data() + i, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 29;
  }
  for (; i < b.size(); ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

// Block-table length a step is captured with: n rounded up to a power of two.
int padded_blocks(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

}  // namespace

enum class CudaGraphBackend::Op : uint8_t {
  kUpload, kTable, kCopy, kCopy2d, kMatmul, kEmbed, kRmsNorm, kAdd, kSwiglu, kMulSigmoid, kRope, kKvStore,
  kAttention, kConv1d, kL2Norm, kGdnGates, kDeltaRule, kGatedRmsNorm, kArgmax, kMatmulShared,
  kAddRmsNorm, kQkNormRope, kGdnConvNormGates, kTopK, kCopy2dIndexed, kArgmaxTo, kPromptMatmulShared,
};

// Arguments go on the tape field by field: the bytes must be a function of the values alone
// (no struct padding), since equal tapes are what lets a graph be replayed.
template <class T>
void CudaGraphBackend::Tape::put(const T& v) {
  if constexpr (std::is_same_v<T, Weight>) {
    put(v.type), put(v.n_in), put(v.n_out), put(v.data), put(v.row_bytes), put(v.tiles);
  } else if constexpr (std::is_same_v<T, KvLayerView>) {
    put(v.k), put(v.v), put(v.block_tokens), put(v.n_head_kv), put(v.head_dim), put(v.type);
  } else if constexpr (std::is_same_v<T, GdnShape>) {
    put(v.n_k), put(v.n_v), put(v.d_k), put(v.d_v);
  } else {
    static_assert(std::is_trivially_copyable_v<T> &&
                  (std::has_unique_object_representations_v<T> || std::is_floating_point_v<T> ||
                   std::is_same_v<T, bool>),
                  "tape values must have no padding bytes");
    const auto* p = reinterpret_cast<const unsigned char*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
}

class CudaGraphBackend::Reader {
 public:
  explicit Reader(const std::vector<unsigned char>& b) : p_(b.data()), end_(b.data() + b.size()) {}
  bool done() const { return p_ == end_; }
  template <class T>
  T get() {
    if constexpr (std::is_same_v<T, Weight>) {
      Weight w;
      w.type = get<GgmlType>();
      w.n_in = get<int64_t>();
      w.n_out = get<int64_t>();
      w.data = get<const void*>();
      w.row_bytes = get<size_t>();
      w.tiles = get<bool>();
      return w;
    } else if constexpr (std::is_same_v<T, KvLayerView>) {
      KvLayerView kv;
      kv.k = get<void*>();
      kv.v = get<void*>();
      kv.block_tokens = get<int>();
      kv.n_head_kv = get<int>();
      kv.head_dim = get<int>();
      kv.type = get<GgmlType>();
      return kv;
    } else if constexpr (std::is_same_v<T, GdnShape>) {
      GdnShape g;
      g.n_k = get<int>();
      g.n_v = get<int>();
      g.d_k = get<int>();
      g.d_v = get<int>();
      return g;
    } else {
      if (size_t(end_ - p_) < sizeof(T)) fail("CUDA graph tape: truncated");
      T v;
      std::memcpy(&v, p_, sizeof(T));
      p_ += sizeof(T);
      return v;
    }
  }

 private:
  const unsigned char* p_;
  const unsigned char* end_;
};

template <class C, class... A, class... B>
void CudaGraphBackend::record(Op op, void (C::*)(A...), const B&... args) {
  static_assert(sizeof...(A) == sizeof...(B), "record: one value per parameter");
  tape_.put(op);
  (tape_.put(static_cast<std::decay_t<A>>(args)), ...);
}

template <class C, class... A>
void CudaGraphBackend::replay(Reader& r, void (C::*fn)(A...)) {
  // Braced initialisation reads the values in order.
  std::tuple<std::decay_t<A>...> args{r.get<std::decay_t<A>>()...};
  std::apply([&](auto&... a) { (this->*fn)(a...); }, args);
}

CudaGraphBackend::CudaGraphBackend(int device, bool fuse_quantize, bool tiles, bool prompt_f16)
    : CudaBackend(device, fuse_quantize, tiles, prompt_f16) {}

CudaGraphBackend::~CudaGraphBackend() {
  // No throwing: as ~CudaBackend, errors at teardown are ignored.
  cudaSetDevice(device());
  cudaStreamSynchronize(stream());
  for (Graph& g : graphs_) {
    if (g.exec) cudaGraphExecDestroy(g.exec);
    cudaFreeHost(g.pinned);
    if (g.done) cudaEventDestroy(g.done);
  }
  cudaFree(tables_dev_);
}

void CudaGraphBackend::destroy(CUgraphExec_st*& exec) {
  if (exec) cudaGraphExecDestroy(exec);
  exec = nullptr;
}

void CudaGraphBackend::wait_idle(Graph& g) {
  if (!g.in_flight) return;
  check(cudaEventSynchronize(g.done), "CUDA graph staging (wait)");
  g.in_flight = false;
}


// --- steps ---

void CudaGraphBackend::begin_step() { ++depth_; }

void CudaGraphBackend::end_step() {
  if (depth_ == 0) fail("end_step without begin_step");
  if (--depth_ == 0) flush();
}

size_t CudaGraphBackend::stage(const void* src, size_t bytes) {
  const size_t off = (staging_.size() + 15) & ~size_t(15);  // 16-byte aligned copies
  staging_.resize(off + bytes);
  std::memcpy(staging_.data() + off, src, bytes);
  return off;
}

CudaGraphBackend::StagedTable CudaGraphBackend::stage_table(const SeqKv& seq) {
  const int n = std::max(seq.n_blocks, 0);
  if (n == 0) return StagedTable{0, 0, -1};
  const size_t bytes = size_t(n) * sizeof(int32_t);
  // Every layer passes the same tables: stage each distinct one once per step.
  for (const StagedTable& t : tables_)
    if (t.n == n && std::memcmp(staging_.data() + t.staged, seq.block_table, bytes) == 0)
      return StagedTable{t.staged, padded_blocks(n), t.device_index};
  // The table is padded with -1 (no block) to the next power of two, so the step's launches
  // stay the same while a sequence grows by a block: a decode step re-captures after 16, 32,
  // 64, ... tokens, not every 16. The kernels treat a -1 entry as beyond the table, and a step
  // only touches positions its blocks hold, so the results are those of the unpadded table.
  const int padded = padded_blocks(n);
  const StagedTable t{stage(seq.block_table, bytes), n, tables_used_};
  const size_t pad_at = staging_.size();
  staging_.resize(pad_at + size_t(padded - n) * sizeof(int32_t), 0xff);  // int32 -1
  tables_used_ += padded;
  tables_.push_back(t);
  record(Op::kTable, &CudaGraphBackend::table_staged, t.device_index, t.staged, padded);
  return StagedTable{t.staged, padded, t.device_index};
}

void CudaGraphBackend::upload_staged(void* dst, size_t staged, size_t bytes) {
  CudaBackend::upload(dst, run_pinned_ + staged, bytes);
}

void CudaGraphBackend::table_staged(int device_index, size_t staged, int n) {
  CudaBackend::upload(tables_dev_ + device_index, run_pinned_ + staged, size_t(n) * sizeof(int32_t));
}

void CudaGraphBackend::kv_store_at(const KvLayerView& kv, int table_index, int n_blocks, const float* k,
                                   const float* v, const int32_t* pos, int rows) {
  kv_store_table(kv, table_index < 0 ? nullptr : tables_dev_ + table_index, n_blocks, k, v, pos, rows);
}

void CudaGraphBackend::attention_at(const float* q, size_t q_row_stride, size_t q_head_stride, int rows,
                                    const int32_t* pos, int n_head, const KvLayerView& kv, int table_index,
                                    int n_blocks, float scale, float* out) {
  attention_table(q, q_row_stride, q_head_stride, rows, pos, n_head, kv,
                  table_index < 0 ? nullptr : tables_dev_ + table_index, n_blocks, scale, out);
}

void CudaGraphBackend::argmax_at(const float* x, int rows, int n, size_t stride) { argmax_launch(x, rows, n, stride); }
void CudaGraphBackend::top_k_at(const float* x, int rows, int n, size_t stride, int k) {
  top_k_launch(x, rows, n, stride, k);
}

// Block tables go to one device buffer, written by the tape's copies in stream order: grown
// here (a new generation: graphs holding the old address are captured again) once the work
// queued before, which may still read it, is done.
void CudaGraphBackend::prepare_tables() {
  if (size_t(tables_used_) <= tables_cap_) return;
  const size_t cap = std::max({size_t(tables_used_), 2 * tables_cap_, size_t(1024)});
  check(cudaStreamSynchronize(stream()), "CUDA graph block tables (pending work)");
  check(cudaFree(tables_dev_), "cudaFree");
  tables_dev_ = nullptr;
  tables_cap_ = 0;
  check(cudaMalloc(reinterpret_cast<void**>(&tables_dev_), cap * sizeof(int32_t)), "CUDA graph block tables");
  tables_cap_ = cap;
  ++buffers_generation_;
}

// The staged bytes go to the tape's own pinned buffer, which its copies read when they run.
// Each tape has its own (equal tapes stage the same number of bytes: every staged range is on
// the tape), so only that tape's previous run must be done before the bytes are rewritten: a
// step is launched while the different steps before it still run (a speculative step's draft,
// verify and commit go to the GPU one after the other without waiting for each other).
void CudaGraphBackend::stage_into(Graph& g) {
  const size_t bytes = staging_.size();
  wait_idle(g);
  if (g.pinned_bytes < bytes) {  // the first run of this tape (a larger one cannot happen; captured anew if it did)
    destroy(g.exec);
    check(cudaFreeHost(g.pinned), "cudaFreeHost");
    g.pinned = nullptr;
    g.pinned_bytes = 0;
    void* p = nullptr;
    check(cudaMallocHost(&p, bytes), "CUDA graph staging (pinned)");
    g.pinned = static_cast<unsigned char*>(p);
    g.pinned_bytes = bytes;
  }
  if (bytes > 0) std::memcpy(g.pinned, staging_.data(), bytes);
  run_pinned_ = g.pinned;
}

void CudaGraphBackend::run_tape(const std::vector<unsigned char>& tape) {
  Reader r(tape);
  while (!r.done()) {
    switch (r.get<Op>()) {
      case Op::kUpload: replay(r, &CudaGraphBackend::upload_staged); break;
      case Op::kTable: replay(r, &CudaGraphBackend::table_staged); break;
      case Op::kCopy: replay(r, &CudaBackend::copy); break;
      case Op::kCopy2d: replay(r, &CudaBackend::copy_2d); break;
      case Op::kCopy2dIndexed: replay(r, &CudaBackend::copy_2d_indexed); break;
      case Op::kMatmul: replay(r, &CudaBackend::matmul); break;
      case Op::kEmbed: replay(r, &CudaBackend::embed); break;
      case Op::kRmsNorm: replay(r, &CudaBackend::rms_norm); break;
      case Op::kAdd: replay(r, &CudaBackend::add); break;
      case Op::kAddRmsNorm: replay(r, &CudaBackend::add_rms_norm); break;
      case Op::kSwiglu: replay(r, &CudaBackend::swiglu); break;
      case Op::kMulSigmoid: replay(r, &CudaBackend::mul_sigmoid); break;
      case Op::kRope: replay(r, &CudaBackend::rope_neox); break;
      case Op::kQkNormRope: replay(r, &CudaBackend::qk_norm_rope); break;
      case Op::kKvStore: replay(r, &CudaGraphBackend::kv_store_at); break;
      case Op::kAttention: replay(r, &CudaGraphBackend::attention_at); break;
      case Op::kConv1d: replay(r, &CudaBackend::conv1d_silu); break;
      case Op::kL2Norm: replay(r, &CudaBackend::l2_norm_heads); break;
      case Op::kGdnGates: replay(r, &CudaBackend::gdn_gates); break;
      case Op::kGdnConvNormGates: replay(r, &CudaBackend::gdn_conv_norm_gates); break;
      case Op::kDeltaRule: replay(r, &CudaBackend::gdn_delta_rule); break;
      case Op::kGatedRmsNorm: replay(r, &CudaBackend::gated_rms_norm); break;
      case Op::kArgmax: replay(r, &CudaGraphBackend::argmax_at); break;
      case Op::kArgmaxTo: replay(r, &CudaBackend::argmax_rows_to); break;
      case Op::kTopK: replay(r, &CudaGraphBackend::top_k_at); break;
      case Op::kMatmulShared: replay_matmul_shared(r, false); break;
      case Op::kPromptMatmulShared: replay_matmul_shared(r, true); break;
      default: fail("CUDA graph tape: unknown op");
    }
  }
}

void CudaGraphBackend::capture(Graph& g) {
  cudaStream_t s = stream();
  cudaGraph_t graph = nullptr;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "CUDA graph capture (begin)");
  try {
    run_tape(g.tape);
  } catch (...) {
    cudaStreamEndCapture(s, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // clear it: the stream is usable again
    throw;
  }
  check(cudaStreamEndCapture(s, &graph), "CUDA graph capture (end)");
  destroy(g.exec);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  check(e, "CUDA graph instantiate");
  g.exec = exec;
  g.generation = buffers_generation_;
  ++stats_.captured;
}

void CudaGraphBackend::flush() {
  if (replaying_ || tape_.bytes.empty()) return;
  // Whatever happens below, the next step starts with an empty tape.
  struct Reset {
    CudaGraphBackend& b;
    ~Reset() {
      b.replaying_ = false;
      b.tape_.bytes.clear();
      b.staging_.clear();
      b.tables_.clear();
      b.tables_used_ = 0;
    }
  } reset{*this};
  enter();
  prepare_tables();
  replaying_ = true;
  const std::vector<unsigned char>& tape = tape_.bytes;
  const uint64_t h = hash_bytes(tape);
  Graph* g = nullptr;
  for (Graph& o : graphs_)
    if (o.hash == h && o.tape == tape) g = &o;
  if (g == nullptr) {
    Graph fresh;
    if (graphs_.size() >= kMaxGraphs) {
      auto lru = std::min_element(graphs_.begin(), graphs_.end(),
                                  [](const Graph& a, const Graph& b) { return a.last_use < b.last_use; });
      wait_idle(*lru);
      destroy(lru->exec);
      // Its pinned buffer and event serve the new tape (stage_into grows the buffer if needed).
      fresh.pinned = lru->pinned;
      fresh.pinned_bytes = lru->pinned_bytes;
      fresh.done = lru->done;
      *lru = std::move(graphs_.back());
      graphs_.pop_back();
    }
    g = &graphs_.emplace_back(std::move(fresh));
    g->hash = h;
    g->tape = tape;
  }
  g->last_use = ++clock_;
  stage_into(*g);
  // A new tape is captured at once: it runs op by op only when a scratch buffer would have to
  // grow during the capture (its first sight after a larger step; the next sight captures).
  // A speculative step's draft and verify tapes change with the verify width and the block
  // table's bucket, so each new one costs a capture, not a direct run and then a capture.
  bool launch_graph = true;
  if (g->exec == nullptr || g->generation != buffers_generation_) {
    try {
      capture(*g);
    } catch (const Error&) {
      destroy(g->exec);
      launch_graph = false;
    }
  } else {
    ++stats_.replayed;
  }
  if (launch_graph) {
    check(cudaGraphLaunch(g->exec, stream()), "CUDA graph launch");
  } else {
    enter();  // forgets what the aborted capture's ops recorded on the host (fused activations)
    run_tape(tape);
    ++stats_.direct;
  }
  if (g->done == nullptr) {
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    g->done = e;
  }
  check(cudaEventRecord(g->done, stream()), "CUDA graph staging (event)");
  g->in_flight = true;
}

// --- ops: recorded inside a step, launched directly outside one ---

void* CudaGraphBackend::alloc(size_t bytes) {
  flush();
  return CudaBackend::alloc(bytes);
}

void CudaGraphBackend::release(void* p) {
  flush();
  CudaBackend::release(p);
}

void CudaGraphBackend::upload(void* dst, const void* src, size_t bytes) {
  if (!recording()) return CudaBackend::upload(dst, src, bytes);
  if (bytes == 0) return;
  record(Op::kUpload, &CudaGraphBackend::upload_staged, dst, stage(src, bytes), bytes);
}

void CudaGraphBackend::download(void* dst, const void* src, size_t bytes) {
  flush();
  CudaBackend::download(dst, src, bytes);
}

void CudaGraphBackend::copy(void* dst, const void* src, size_t bytes) {
  if (!recording()) return CudaBackend::copy(dst, src, bytes);
  record(Op::kCopy, &CudaBackend::copy, dst, src, bytes);
}

void CudaGraphBackend::copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                               int rows) {
  if (!recording()) return CudaBackend::copy_2d(dst, dst_pitch, src, src_pitch, row_bytes, rows);
  record(Op::kCopy2d, &CudaBackend::copy_2d, dst, dst_pitch, src, src_pitch, row_bytes, rows);
}

void CudaGraphBackend::copy_2d_indexed(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                                       size_t row_bytes, int rows, const int32_t* index, size_t index_bytes) {
  if (!recording()) return CudaBackend::copy_2d_indexed(dst, dst_pitch, src, src_pitch, row_bytes, rows, index, index_bytes);
  record(Op::kCopy2dIndexed, &CudaBackend::copy_2d_indexed, dst, dst_pitch, src, src_pitch, row_bytes, rows, index,
         index_bytes);
}

void CudaGraphBackend::synchronize() {
  flush();
  CudaBackend::synchronize();
}

const void* CudaGraphBackend::weight_data(const void* host, size_t bytes) {
  flush();
  return CudaBackend::weight_data(host, bytes);
}

Weight CudaGraphBackend::upload_matrix(const Weight& host) {
  flush();
  return CudaBackend::upload_matrix(host);
}

void CudaGraphBackend::matmul(const Weight& w, const float* x, int rows, float* y) {
  if (!recording()) return CudaBackend::matmul(w, x, rows, y);
  record(Op::kMatmul, &CudaBackend::matmul, w, x, rows, y);
}

// The weights and outputs are arrays, so they go on the tape by value: the count, then each
// weight and its output, then the input and rows.
void CudaGraphBackend::matmul_shared_input(const Weight* const* ws, float* const* ys, int n, const float* x, int rows) {
  if (!recording()) return CudaBackend::matmul_shared_input(ws, ys, n, x, rows);
  record_matmul_shared(Op::kMatmulShared, ws, ys, n, x, rows);
}

void CudaGraphBackend::prompt_matmul_shared_input(const Weight* const* ws, float* const* ys, int n, const float* x,
                                                  int rows) {
  if (!recording()) return CudaBackend::prompt_matmul_shared_input(ws, ys, n, x, rows);
  record_matmul_shared(Op::kPromptMatmulShared, ws, ys, n, x, rows);
}

void CudaGraphBackend::record_matmul_shared(Op op, const Weight* const* ws, float* const* ys, int n, const float* x,
                                            int rows) {
  for (int i0 = 0; i0 < n; i0 += kMaxSharedInput) {  // longer lists than the replay's arrays: in parts
    const int m = std::min(kMaxSharedInput, n - i0);
    tape_.put(op);
    tape_.put(m);
    for (int i = i0; i < i0 + m; ++i) tape_.put(*ws[i]), tape_.put(ys[i]);
    tape_.put(x);
    tape_.put(rows);
  }
}

void CudaGraphBackend::replay_matmul_shared(Reader& r, bool prompt) {
  const int n = r.get<int>();
  if (n < 0 || n > kMaxSharedInput) fail("CUDA graph tape: bad shared-input product");
  Weight w[kMaxSharedInput];
  const Weight* wp[kMaxSharedInput];
  float* y[kMaxSharedInput];
  for (int i = 0; i < n; ++i) {
    w[i] = r.get<Weight>();
    y[i] = r.get<float*>();
    wp[i] = &w[i];
  }
  const auto* x = r.get<const float*>();
  const int rows = r.get<int>();
  if (prompt) {
    CudaBackend::prompt_matmul_shared_input(wp, y, n, x, rows);
  } else {
    CudaBackend::matmul_shared_input(wp, y, n, x, rows);
  }
}

void CudaGraphBackend::embed(const Weight& table, const int32_t* tokens, int rows, float* out) {
  if (!recording()) return CudaBackend::embed(table, tokens, rows, out);
  record(Op::kEmbed, &CudaBackend::embed, table, tokens, rows, out);
}

void CudaGraphBackend::rms_norm(const float* x, size_t x_stride, const float* w, int n, int dim, float eps, float* out,
                                size_t out_stride) {
  if (!recording()) return CudaBackend::rms_norm(x, x_stride, w, n, dim, eps, out, out_stride);
  record(Op::kRmsNorm, &CudaBackend::rms_norm, x, x_stride, w, n, dim, eps, out, out_stride);
}

void CudaGraphBackend::add_rms_norm(float* x, const float* y, const float* w, int n, int dim, float eps, float* out,
                                    size_t out_stride) {
  if (!recording()) return CudaBackend::add_rms_norm(x, y, w, n, dim, eps, out, out_stride);
  record(Op::kAddRmsNorm, &CudaBackend::add_rms_norm, x, y, w, n, dim, eps, out, out_stride);
}

void CudaGraphBackend::add(float* x, const float* y, int64_t n) {
  if (!recording()) return CudaBackend::add(x, y, n);
  record(Op::kAdd, &CudaBackend::add, x, y, n);
}

void CudaGraphBackend::swiglu(const float* gate, const float* up, int rows, int n, float* out) {
  if (!recording()) return CudaBackend::swiglu(gate, up, rows, n, out);
  record(Op::kSwiglu, &CudaBackend::swiglu, gate, up, rows, n, out);
}

void CudaGraphBackend::mul_sigmoid(float* x, size_t x_stride, const float* g, size_t g_stride, int rows,
                                   int n_heads, int n) {
  if (!recording()) return CudaBackend::mul_sigmoid(x, x_stride, g, g_stride, rows, n_heads, n);
  record(Op::kMulSigmoid, &CudaBackend::mul_sigmoid, x, x_stride, g, g_stride, rows, n_heads, n);
}

void CudaGraphBackend::rope_neox(float* x, size_t row_stride, size_t head_stride, int rows, int n_heads,
                                 const int32_t* pos, int n_rot, float theta) {
  if (!recording()) return CudaBackend::rope_neox(x, row_stride, head_stride, rows, n_heads, pos, n_rot, theta);
  record(Op::kRope, &CudaBackend::rope_neox, x, row_stride, head_stride, rows, n_heads, pos, n_rot, theta);
}

void CudaGraphBackend::qk_norm_rope(float* q, size_t q_head_stride, int n_head, const float* q_norm, float* k,
                                    int n_head_kv, const float* k_norm, int rows, int head_dim, float eps,
                                    const int32_t* pos, int n_rot, float theta) {
  if (!recording())
    return CudaBackend::qk_norm_rope(q, q_head_stride, n_head, q_norm, k, n_head_kv, k_norm, rows, head_dim, eps, pos,
                                     n_rot, theta);
  record(Op::kQkNormRope, &CudaBackend::qk_norm_rope, q, q_head_stride, n_head, q_norm, k, n_head_kv, k_norm, rows,
         head_dim, eps, pos, n_rot, theta);
}

void CudaGraphBackend::kv_store(const KvLayerView& kv, const SeqKv& seq, const float* k, const float* v,
                                const int32_t* pos, int rows) {
  if (!recording()) return CudaBackend::kv_store(kv, seq, k, v, pos, rows);
  if (rows <= 0) return;
  const StagedTable t = stage_table(seq);
  record(Op::kKvStore, &CudaGraphBackend::kv_store_at, kv, t.device_index, t.n, k, v, pos, rows);
}

void CudaGraphBackend::attention(const float* q, size_t q_row_stride, size_t q_head_stride, int rows,
                                 const int32_t* pos, int n_head, const KvLayerView& kv, const SeqKv& seq, float scale,
                                 float* out) {
  if (!recording())
    return CudaBackend::attention(q, q_row_stride, q_head_stride, rows, pos, n_head, kv, seq, scale, out);
  if (rows <= 0 || n_head <= 0) return;
  const StagedTable t = stage_table(seq);
  record(Op::kAttention, &CudaGraphBackend::attention_at, q, q_row_stride, q_head_stride, rows, pos, n_head, kv,
         t.device_index, t.n, scale, out);
}

void CudaGraphBackend::conv1d_silu(const float* x, size_t x_stride, int rows, int channels, const float* w, int kernel,
                                   float* state, float* out, size_t out_stride) {
  if (!recording()) return CudaBackend::conv1d_silu(x, x_stride, rows, channels, w, kernel, state, out, out_stride);
  record(Op::kConv1d, &CudaBackend::conv1d_silu, x, x_stride, rows, channels, w, kernel, state, out, out_stride);
}

void CudaGraphBackend::l2_norm_heads(float* x, size_t row_stride, int rows, int n_heads, int dim, float eps,
                                     float scale) {
  if (!recording()) return CudaBackend::l2_norm_heads(x, row_stride, rows, n_heads, dim, eps, scale);
  record(Op::kL2Norm, &CudaBackend::l2_norm_heads, x, row_stride, rows, n_heads, dim, eps, scale);
}

void CudaGraphBackend::gdn_gates(float* b, float* a, const float* a_coef, const float* dt_bias, int rows, int n_v) {
  if (!recording()) return CudaBackend::gdn_gates(b, a, a_coef, dt_bias, rows, n_v);
  record(Op::kGdnGates, &CudaBackend::gdn_gates, b, a, a_coef, dt_bias, rows, n_v);
}

void CudaGraphBackend::gdn_conv_norm_gates(const GdnShape& shape, const float* x, size_t x_stride, int rows,
                                           const float* conv_w, int kernel, float* conv_state, float* out,
                                           size_t out_stride, float eps, float q_scale, float* beta, float* alpha,
                                           const float* a_coef, const float* dt_bias) {
  if (!recording())
    return CudaBackend::gdn_conv_norm_gates(shape, x, x_stride, rows, conv_w, kernel, conv_state, out, out_stride, eps,
                                            q_scale, beta, alpha, a_coef, dt_bias);
  record(Op::kGdnConvNormGates, &CudaBackend::gdn_conv_norm_gates, shape, x, x_stride, rows, conv_w, kernel, conv_state,
         out, out_stride, eps, q_scale, beta, alpha, a_coef, dt_bias);
}

void CudaGraphBackend::gdn_delta_rule(const GdnShape& shape, const float* qkv, size_t qkv_stride, const float* g,
                                      const float* beta, int rows, float* S, float* out, bool chunked,
                                      bool keep_state, const int32_t* rows_limit) {
  if (!recording())
    return CudaBackend::gdn_delta_rule(shape, qkv, qkv_stride, g, beta, rows, S, out, chunked, keep_state,
                                       rows_limit);
  record(Op::kDeltaRule, &CudaBackend::gdn_delta_rule, shape, qkv, qkv_stride, g, beta, rows, S, out, chunked,
         keep_state, rows_limit);
}

void CudaGraphBackend::gated_rms_norm(float* x, const float* z, const float* w, int rows, int n_heads, int dim,
                                      float eps) {
  if (!recording()) return CudaBackend::gated_rms_norm(x, z, w, rows, n_heads, dim, eps);
  record(Op::kGatedRmsNorm, &CudaBackend::gated_rms_norm, x, z, w, rows, n_heads, dim, eps);
}

// The argmax kernel joins the step's graph; only the download of the ids waits.
void CudaGraphBackend::argmax_rows(const float* x, int rows, int n, size_t stride, int32_t* out_host) {
  if (!recording()) return CudaBackend::argmax_rows(x, rows, n, stride, out_host);
  if (rows <= 0) return;
  record(Op::kArgmax, &CudaGraphBackend::argmax_at, x, rows, n, stride);
  flush();
  CudaBackend::download(out_host, argmax_results(), size_t(rows) * sizeof(int32_t));
}

// Ids that stay on the device: the kernels join the graph and nothing waits.
void CudaGraphBackend::argmax_rows_to(const float* x, int rows, int n, size_t stride, int32_t* out) {
  if (!recording()) return CudaBackend::argmax_rows_to(x, rows, n, stride, out);
  if (rows <= 0) return;
  record(Op::kArgmaxTo, &CudaBackend::argmax_rows_to, x, rows, n, stride, out);
}

// The same for the top-k kernels: they join the graph, the candidates' download waits.
void CudaGraphBackend::top_k_rows(const float* x, int rows, int n, size_t stride, int k, int32_t* ids_host,
                                  float* vals_host) {
  if (!recording()) return CudaBackend::top_k_rows(x, rows, n, stride, k, ids_host, vals_host);
  if (rows <= 0) return;
  record(Op::kTopK, &CudaGraphBackend::top_k_at, x, rows, n, stride, k);
  flush();
  top_k_download(rows, k, ids_host, vals_host);
}

}  // namespace df
