// CudaBackend: memory management, argument checks, and launches of the kernels in *.cu.
#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_graphs.h"
#include "backend/cuda/kernels.h"
#include "quant/iq4xs_tiles.h"
#include "quant/q4k_tiles.h"
#include "quant/q5k_tiles.h"
#include "quant/q6k_tiles.h"
#include "quant/q80_tiles.h"
#include "util/error.h"

namespace df {

namespace {

constexpr int kMaxHeadDim = 1024;  // attention keeps q and 4 partial outputs in shared memory
constexpr int kMaxConvKernel = 16;
constexpr int kArgmaxRows = 256;  // argmax_rows results allocated up front

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA error in {}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

cudaStream_t as_stream(CUstream_st* s) { return s; }

}  // namespace

CudaBackend::CudaBackend(int device, bool fuse_quantize, bool tiles, bool prompt_f16)
    : device_(device), fuse_quantize_(fuse_quantize), tiles_(tiles) {
  check(cudaSetDevice(device), "cudaSetDevice");
  prompt_f16_ = prompt_f16 && tiles && cuda::deq_wgmma_runs();
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_ = s;
  // Room for a verify step's ids from the start: growing it later would also invalidate every
  // CUDA graph captured before (cuda_graphs.h), e.g. a prefill's before the first greedy step.
  check(cudaMalloc(reinterpret_cast<void**>(&argmax_dev_), cuda::argmax_scratch_bytes(kArgmaxRows)),
        "argmax_rows (scratch)");
  argmax_cap_ = kArgmaxRows;
}

CudaBackend::~CudaBackend() {
  // No throwing here: errors at teardown are ignored (the process may be exiting after a fault).
  cudaSetDevice(device_);
  cudaStreamSynchronize(as_stream(stream_));
  for (void* p : weights_) cudaFree(p);
  cudaFree(table_dev_);
  cudaFree(bounce_);
  cudaFree(many_scratch_);
  cudaFree(mma_scratch_);
  cudaFree(attn_scratch_);
  cudaFree(gdn_scratch_);
  cudaFree(argmax_dev_);
  cudaFree(top_k_scratch_);
  cudaFree(fused_q8k_);
  cudaStreamDestroy(as_stream(stream_));
}

void CudaBackend::enter() {
  fused_ = FusedQ8k{};
  int cur = -1;
  if (cudaGetDevice(&cur) != cudaSuccess || cur != device_) check(cudaSetDevice(device_), "cudaSetDevice");
}

void CudaBackend::check_launch(const char* op) const { check(cudaGetLastError(), op); }

// --- memory ---

void* CudaBackend::alloc(size_t bytes) {
  enter();
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1));
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it
    fail("out of GPU memory allocating {} bytes on CUDA device {} ({})", bytes, device_, cudaGetErrorString(e));
  }
  check(cudaMemsetAsync(p, 0, bytes, as_stream(stream_)), "alloc (zero fill)");
  return p;
}

void CudaBackend::release(void* p) {
  if (p == nullptr) return;
  enter();
  check(cudaStreamSynchronize(as_stream(stream_)), "release (pending work)");
  check(cudaFree(p), "cudaFree");
}

// Host sources are pageable memory: the driver stages them before cudaMemcpyAsync returns, so
// the caller may reuse the source at once while the copy itself stays ordered on the stream.
void CudaBackend::upload(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  enter();
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, as_stream(stream_)), "upload");
}

void CudaBackend::download(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  enter();
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, as_stream(stream_)), "download");
  check(cudaStreamSynchronize(as_stream(stream_)), "download (wait)");
}

void CudaBackend::copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                          int rows) {
  if (rows <= 0 || row_bytes == 0) return;
  enter();
  check(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, size_t(rows), cudaMemcpyDeviceToDevice,
                          as_stream(stream_)),
        "copy_2d");
}

void CudaBackend::copy_2d_indexed(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                                  int rows, const int32_t* index, size_t index_bytes) {
  if (rows <= 0 || row_bytes == 0) return;
  enter();
  cuda::copy_2d_indexed(dst, dst_pitch, src, src_pitch, row_bytes, rows, index, index_bytes, as_stream(stream_));
  check_launch("copy_2d_indexed");
}

void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  enter();
  const auto* d = static_cast<const uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  if (d < s + bytes && s < d + bytes) {  // overlapping (memmove semantics): go through a scratch buffer
    if (bounce_cap_ < bytes) {
      ++buffers_generation_;
      check(cudaStreamSynchronize(as_stream(stream_)), "copy (pending work)");
      check(cudaFree(bounce_), "cudaFree");
      bounce_ = nullptr;
      bounce_cap_ = 0;
      check(cudaMalloc(&bounce_, bytes), "copy (scratch)");
      bounce_cap_ = bytes;
    }
    check(cudaMemcpyAsync(bounce_, src, bytes, cudaMemcpyDeviceToDevice, as_stream(stream_)), "copy");
    src = bounce_;
  }
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, as_stream(stream_)), "copy");
}

void CudaBackend::synchronize() {
  enter();
  check(cudaStreamSynchronize(as_stream(stream_)), "synchronize");
}

// Every call uploads: a host address is no identity (a later file may be mapped at the same
// address). The copies live until the backend dies (the Backend interface has no weight release).
const void* CudaBackend::weight_data(const void* host, size_t bytes) {
  void* dev = alloc(bytes);
  upload(dev, host, bytes);
  check(cudaStreamSynchronize(as_stream(stream_)), "weight upload");
  weights_.push_back(dev);
  return dev;
}

// Q5_K, IQ4_XS and Q8_0 take the integer kernels only as tiles: with tiles_ off they stay in GGUF
// rows on the f16 kernel (mma_matmul.cu), so for them the two layouts differ by more than speed.
Weight CudaBackend::upload_matrix(const Weight& host) {
  using Repack = void (*)(const uint8_t*, int64_t, int, uint8_t*);
  using Bytes = size_t (*)(int64_t, int);
  Repack repack = nullptr;
  Bytes bytes = nullptr;
  switch (host.type) {
    case GgmlType::Q4_K: repack = q4k_to_tiles, bytes = q4k_tiles_bytes; break;
    case GgmlType::Q5_K: repack = q5k_to_tiles, bytes = q5k_tiles_bytes; break;
    case GgmlType::Q6_K: repack = q6k_to_tiles, bytes = q6k_tiles_bytes; break;
    case GgmlType::IQ4_XS: repack = iq4xs_to_tiles, bytes = iq4xs_tiles_bytes; break;
    case GgmlType::Q8_0: repack = q80_to_tiles, bytes = q80_tiles_bytes; break;
    default: break;
  }
  Weight w = host;
  w.tiles = true;
  Weight probe = w;
  probe.data = nullptr;  // (device allocations are aligned for every kernel)
  if (!tiles_ || repack == nullptr || !cuda::imma_supports(probe)) return Backend::upload_matrix(host);
  const int n_sb = int(host.n_in / 256);
  std::vector<uint8_t> tiles(bytes(host.n_out, n_sb));
  repack(static_cast<const uint8_t*>(host.data), host.n_out, n_sb, tiles.data());
  w.data = weight_data(tiles.data(), tiles.size());
  return w;
}

const int32_t* CudaBackend::device_block_table(const SeqKv& seq) {
  const size_t n = size_t(std::max(seq.n_blocks, 0));
  if (n == 0) return nullptr;
  if (table_dev_ != nullptr && n == table_host_.size() && std::equal(table_host_.begin(), table_host_.end(), seq.block_table))
    return table_dev_;
  if (n > table_cap_) {
    const size_t cap = std::max(n, 2 * table_cap_);
    ++buffers_generation_;
    check(cudaStreamSynchronize(as_stream(stream_)), "block table (pending work)");
    check(cudaFree(table_dev_), "cudaFree");
    table_dev_ = nullptr;
    table_cap_ = 0;
    table_host_.clear();
    check(cudaMalloc(reinterpret_cast<void**>(&table_dev_), cap * sizeof(int32_t)), "block table");
    table_cap_ = cap;
  }
  // Ordered after the kernels that read the previous table; the source is staged at once.
  check(cudaMemcpyAsync(table_dev_, seq.block_table, n * sizeof(int32_t), cudaMemcpyHostToDevice, as_stream(stream_)),
        "block table upload");
  table_host_.assign(seq.block_table, seq.block_table + n);
  return table_dev_;
}

// --- ops ---

void CudaBackend::ensure_scratch(void*& buf, size_t& cap, size_t bytes, const char* what) {
  if (cap >= bytes) return;
  // Growing a buffer inside a capture would break it: the graph backend then runs the step op
  // by op (cuda_graphs.cpp), which lands here outside a capture.
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(as_stream(stream_), &capturing), what);
  if (capturing != cudaStreamCaptureStatusNone) fail("{} scratch would grow during a CUDA graph capture", what);
  // At least doubled where memory allows: a grown buffer is a new generation, and every
  // captured step is captured again (a context growing by a split-K chunk must not do that
  // each time).
  const size_t doubled = std::max(bytes, 2 * cap);
  ++buffers_generation_;
  check(cudaStreamSynchronize(as_stream(stream_)), what);  // queued kernels may still read the old one
  check(cudaFree(buf), "cudaFree");
  buf = nullptr;
  cap = 0;
  size_t got = doubled;
  cudaError_t e = cudaMalloc(&buf, got);
  if (e != cudaSuccess && doubled > bytes) {
    cudaGetLastError();
    got = bytes;
    e = cudaMalloc(&buf, got);
  }
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear it
    buf = nullptr;
    fail("out of GPU memory allocating {} bytes of {} scratch on CUDA device {} ({})", bytes, what, device_,
         cudaGetErrorString(e));
  }
  cap = got;
}

CudaBackend::FusedQ8k CudaBackend::take_fused_q8k() {
  const FusedQ8k f = fused_;
  fused_ = FusedQ8k{};
  return f;
}

const void* CudaBackend::fused_q8k_of(const FusedQ8k& f, const float* x, int rows, int64_t n_in) {
  if (!f.matches(x, rows, n_in)) return nullptr;
  ++fused_q8k_uses_;
  return fused_q8k_;
}

// Q8_0 products quantize x to their own format (Q8_0): the fused Q8_K bytes are not theirs.
const void* CudaBackend::fused_q8k_for_type(const FusedQ8k& f, const float* x, int rows, const Weight& w) {
  return w.type == GgmlType::Q8_0 ? nullptr : fused_q8k_of(f, x, rows, w.n_in);
}

void* CudaBackend::fused_q8k_for(bool supported, int rows, int64_t n_in, const char* what) {
  if (!fuse_quantize_ || !supported) return nullptr;
  ensure_scratch(fused_q8k_, fused_q8k_cap_, cuda::q8k_fused_bytes(n_in, rows), what);
  return fused_q8k_;
}

void CudaBackend::matmul(const Weight& w, const float* x, int rows, float* y) {
  const FusedQ8k fused = take_fused_q8k();
  if (rows <= 0 || w.n_out <= 0) return;
  enter();
  if (cuda::imma_supports(w)) {  // integer tensor cores (imma_matmul.cu, imma_q6k.cu), for every row count
    const Weight* ws[1] = {&w};
    float* ys[1] = {y};
    ensure_scratch(mma_scratch_, mma_scratch_cap_, cuda::imma_scratch_bytes(w, rows), "matmul");
    cuda::imma_matmul_group(ws, ys, 1, x, rows, mma_scratch_, as_stream(stream_), fused_q8k_for_type(fused, x, rows, w));
    check_launch("matmul");
    return;
  }
  if (w.tiles) fail("matmul: {} tiles that the integer kernels do not take", type_name(w.type));
  if (cuda::mma_supports(w)) {  // tensor cores (mma_matmul.cu), for every row count
    ensure_scratch(mma_scratch_, mma_scratch_cap_, cuda::mma_scratch_bytes(w, rows), "matmul");
    cuda::mma_matmul(w, x, rows, y, mma_scratch_, as_stream(stream_));
    check_launch("matmul");
    return;
  }
  if (cuda::mv_supports(w)) {  // the fp32 fast kernels (matvec.cu), for every row count
    cuda::mv_matmul(w, x, rows, y, as_stream(stream_));
    check_launch("matmul");
    return;
  }
  if (rows > cuda::kManyRows && cuda::matmul_many_supports(w)) {  // prefill: dequantize W, then a tiled product
    ensure_scratch(many_scratch_, many_scratch_cap_, cuda::matmul_many_scratch(w, rows) * sizeof(float), "matmul");
    cuda::matmul_many(w, x, rows, y, static_cast<float*>(many_scratch_), as_stream(stream_));
    check_launch("matmul");
    return;
  }
  if (!cuda::matmul(w, x, rows, y, as_stream(stream_)))
    fail("the CUDA backend cannot multiply with weights of type {}", type_name(w.type));
  check_launch("matmul");
}

// The integer tensor-core products among them (Q4_K, Q6_K; tiled Q5_K, IQ4_XS and Q8_0) go in
// groups of one type and n_in (one kernel per launch), each sharing one quantization of x and its
// launches; the rest go one by one. Each output is what matmul() gives (same kernel, same split).
void CudaBackend::matmul_shared_input(const Weight* const* ws, float* const* ys, int n, const float* x, int rows) {
  // Taken once for all groups: the products below write only ys, never x or fused_q8k_.
  const FusedQ8k fused = take_fused_q8k();
  if (rows <= 0) return;
  constexpr int kMaxGroup = 8, kMaxGrouped = 32;
  uint32_t left = 0;  // products still to group (bit i: ws[i]); beyond the first 32, one by one
  for (int i = 0; i < n; ++i) {
    if (i < kMaxGrouped && ws[i]->n_out > 0 && cuda::imma_supports(*ws[i])) left |= uint32_t(1) << i;
    else matmul(*ws[i], x, rows, ys[i]);
  }
  while (left != 0) {
    const Weight& lead = *ws[std::countr_zero(left)];
    const Weight* grp[kMaxGroup];
    float* grp_y[kMaxGroup];
    int m = 0;
    for (int i = std::countr_zero(left); i < kMaxGrouped && m < kMaxGroup; ++i) {
      if (!(left >> i & 1) || ws[i]->type != lead.type || ws[i]->n_in != lead.n_in) continue;
      grp[m] = ws[i];
      grp_y[m++] = ys[i];
      left &= ~(uint32_t(1) << i);
    }
    enter();
    ensure_scratch(mma_scratch_, mma_scratch_cap_, cuda::imma_scratch_bytes(lead, rows), "matmul");
    cuda::imma_matmul_group(grp, grp_y, m, x, rows, mma_scratch_, as_stream(stream_),
                            fused_q8k_for_type(fused, x, rows, lead));
    check_launch("matmul");
  }
}

// Q4_K tile weights of one n_in as one f16 GEMM group (deq_wgmma.cu: measured 1.6-1.8x the
// integer GEMM, docs/performance.md session 12); the rest as matmul_shared_input computes them.
namespace {
using PromptGemm = void (*)(const Weight* const*, float* const*, int, const float*, int, void*, cudaStream_t);
// The f16 wgmma GEMM for a tile weight's type, or null.
PromptGemm prompt_gemm_for(const Weight& w) {
  if (w.n_out <= 0) return nullptr;
  if (cuda::deq_gemm_supports(w)) return cuda::deq_wgmma_group;
  if (cuda::deq_wgmma_q6k_supports(w)) return cuda::deq_wgmma_q6k_group;
  if (cuda::deq_wgmma_q5k_supports(w)) return cuda::deq_wgmma_q5k_group;
  if (cuda::deq_wgmma_iq4xs_supports(w)) return cuda::deq_wgmma_iq4xs_group;
  if (cuda::deq_wgmma_q80_supports(w)) return cuda::deq_wgmma_q80_group;
  return nullptr;
}
}  // namespace

void CudaBackend::prompt_matmul_shared_input(const Weight* const* ws, float* const* ys, int n, const float* x,
                                             int rows) {
  if (!prompt_f16_ || rows <= 0) return matmul_shared_input(ws, ys, n, x, rows);
  // Tile weights of the first such weight's n_in go to their type's f16 wgmma GEMM, one launch
  // per type (Q6_K stores the activations in another order of k); the rest (other types,
  // another n_in, types with few outputs in the group) to the integer kernels.
  constexpr int kMaxGroup = 8;
  for (int i0 = 0; i0 < n; i0 += kMaxGroup) {
    const int m = std::min(kMaxGroup, n - i0);
    PromptGemm gemm[kMaxGroup];
    const Weight* rest_w[kMaxGroup];
    float* rest_y[kMaxGroup];
    int n_rest = 0;
    int64_t n_in = -1;
    for (int i = i0; i < i0 + m; ++i) {
      gemm[i - i0] = prompt_gemm_for(*ws[i]);
      if (gemm[i - i0] != nullptr && n_in >= 0 && ws[i]->n_in != n_in) gemm[i - i0] = nullptr;
      if (gemm[i - i0] != nullptr) n_in = ws[i]->n_in;
    }
    // A type with few outputs in all (kFewOutputBlocks) would be a launch of a few blocks each
    // running the whole k loop: its products take the integer kernels instead.
    for (int i = 0; i < m; ++i) {
      const PromptGemm type = gemm[i];
      if (type == nullptr) continue;
      int64_t outputs = 0;
      for (int j = 0; j < m; ++j)
        if (gemm[j] == type) outputs += ws[i0 + j]->n_out;
      if (outputs > int64_t(cuda::kFewOutputBlocks) * 16) continue;
      for (int j = 0; j < m; ++j)
        if (gemm[j] == type) gemm[j] = nullptr;
    }
    for (int i = 0; i < m; ++i) {
      if (gemm[i] != nullptr) continue;
      rest_w[n_rest] = ws[i0 + i];
      rest_y[n_rest++] = ys[i0 + i];
    }
    if (n_rest > 0) matmul_shared_input(rest_w, rest_y, n_rest, x, rows);  // (takes any fused activations)
    if (n_rest == m) continue;  // no GEMM left; those left share n_in
    enter();
    ensure_scratch(mma_scratch_, mma_scratch_cap_, cuda::deq_gemm_scratch_bytes(n_in, rows), "matmul");
    for (int i = 0; i < m; ++i) {  // each type once, with every weight of that type
      if (gemm[i] == nullptr || std::find(gemm, gemm + i, gemm[i]) != gemm + i) continue;
      const Weight* same_w[kMaxGroup];
      float* same_y[kMaxGroup];
      int n_same = 0;
      for (int j = i; j < m; ++j)
        if (gemm[j] == gemm[i]) {
          same_w[n_same] = ws[i0 + j];
          same_y[n_same++] = ys[i0 + j];
        }
      gemm[i](same_w, same_y, n_same, x, rows, mma_scratch_, as_stream(stream_));
      check_launch("matmul (prompt, f16)");
      prompt_f16_products_ += n_same;
    }
  }
}

void CudaBackend::embed(const Weight& table, const int32_t* tokens, int rows, float* out) {
  if (rows <= 0) return;
  enter();
  if (table.tiles)
    fail("embed: the table was uploaded as a matrix ({} tiles); bind embeddings with weight_data", type_name(table.type));
  if (!cuda::embed(table, tokens, rows, out, as_stream(stream_)))
    fail("the CUDA backend cannot read embeddings of type {}", type_name(table.type));
  check_launch("embed");
}

void CudaBackend::rms_norm(const float* x, size_t x_stride, const float* w, int n, int dim, float eps, float* out,
                           size_t out_stride) {
  if (n <= 0 || dim <= 0) return;
  enter();
  // The products read rows of n_in contiguous floats.
  void* q8k = fused_q8k_for(out_stride == size_t(dim) &&
                                cuda::norm_q8k_supports(x, nullptr, x_stride, w, n, dim, out, out_stride),
                            n, dim, "rms_norm (Q8_K)");
  cuda::rms_norm(x, x_stride, w, n, dim, eps, out, out_stride, as_stream(stream_), q8k);
  check_launch("rms_norm");
  if (q8k != nullptr) fused_ = FusedQ8k{out, n, dim};
}

void CudaBackend::add_rms_norm(float* x, const float* y, const float* w, int n, int dim, float eps, float* out,
                               size_t out_stride) {
  if (n <= 0 || dim <= 0) return;
  enter();
  void* q8k = fused_q8k_for(out_stride == size_t(dim) &&
                                cuda::norm_q8k_supports(x, y, size_t(dim), w, n, dim, out, out_stride),
                            n, dim, "add_rms_norm (Q8_K)");
  cuda::add_rms_norm(x, y, w, n, dim, eps, out, out_stride, as_stream(stream_), q8k);
  check_launch("add_rms_norm");
  if (q8k != nullptr) fused_ = FusedQ8k{out, n, dim};
}

void CudaBackend::add(float* x, const float* y, int64_t n) {
  if (n <= 0) return;
  enter();
  cuda::add(x, y, n, as_stream(stream_));
  check_launch("add");
}

void CudaBackend::swiglu(const float* gate, const float* up, int rows, int n, float* out) {
  if (rows <= 0 || n <= 0) return;
  enter();
  void* q8k = fused_q8k_for(cuda::swiglu_q8k_supports(gate, up, rows, n, out), rows, n, "swiglu (Q8_K)");
  cuda::swiglu(gate, up, rows, n, out, as_stream(stream_), q8k);
  check_launch("swiglu");
  if (q8k != nullptr) fused_ = FusedQ8k{out, rows, n};
}

void CudaBackend::mul_sigmoid(float* x, size_t x_stride, const float* g, size_t g_stride, int rows, int n_heads,
                              int n) {
  if (rows <= 0 || n_heads <= 0 || n <= 0) return;
  enter();
  const int64_t n_row = int64_t(n_heads) * n;
  void* q8k = fused_q8k_for(cuda::mul_sigmoid_q8k_supports(x, x_stride, g, g_stride, rows, n_heads, n), rows, n_row,
                            "mul_sigmoid (Q8_K)");
  cuda::mul_sigmoid(x, x_stride, g, g_stride, rows, n_heads, n, as_stream(stream_), q8k);
  check_launch("mul_sigmoid");
  if (q8k != nullptr) fused_ = FusedQ8k{x, rows, n_row};
}

void CudaBackend::rope_neox(float* x, size_t row_stride, size_t head_stride, int rows, int n_heads, const int32_t* pos,
                            int n_rot, float theta) {
  if (rows <= 0 || n_heads <= 0 || n_rot < 2) return;
  if (n_rot % 2 != 0) fail("rope_neox: n_rot {} is odd", n_rot);
  enter();
  cuda::rope_neox(x, row_stride, head_stride, rows, n_heads, pos, n_rot, theta, as_stream(stream_));
  check_launch("rope_neox");
}

void CudaBackend::qk_norm_rope(float* q, size_t q_head_stride, int n_head, const float* q_norm, float* k, int n_head_kv,
                               const float* k_norm, int rows, int head_dim, float eps, const int32_t* pos, int n_rot,
                               float theta) {
  if (rows <= 0 || head_dim <= 0 || n_head < 0 || n_head_kv < 0 || n_head + n_head_kv == 0) return;
  if (n_rot >= 2 && n_rot % 2 != 0) fail("qk_norm_rope: n_rot {} is odd", n_rot);
  enter();
  cuda::qk_norm_rope(q, q_head_stride, n_head, q_norm, k, n_head_kv, k_norm, rows, head_dim, eps, pos, n_rot, theta,
                     as_stream(stream_));
  check_launch("qk_norm_rope");
}

void CudaBackend::kv_store(const KvLayerView& kv, const SeqKv& seq, const float* k, const float* v,
                           const int32_t* pos, int rows) {
  if (rows <= 0) return;
  enter();
  kv_store_table(kv, device_block_table(seq), seq.n_blocks, k, v, pos, rows);
}

void CudaBackend::kv_store_table(const KvLayerView& kv, const int32_t* table, int n_blocks, const float* k,
                                 const float* v, const int32_t* pos, int rows) {
  if (rows <= 0) return;
  check_kv_type(kv.type, kv.head_dim);
  enter();
  cuda::kv_store(kv, table, n_blocks, k, v, pos, rows, as_stream(stream_));
  check_launch("kv_store");
}

void CudaBackend::attention(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos,
                            int n_head, const KvLayerView& kv, const SeqKv& seq, float scale, float* out) {
  if (rows <= 0 || n_head <= 0) return;
  enter();
  attention_table(q, q_row_stride, q_head_stride, rows, pos, n_head, kv, device_block_table(seq), seq.n_blocks, scale,
                  out);
}

void CudaBackend::attention_table(const float* q, size_t q_row_stride, size_t q_head_stride, int rows,
                                  const int32_t* pos, int n_head, const KvLayerView& kv, const int32_t* table,
                                  int n_blocks, float scale, float* out) {
  if (rows <= 0 || n_head <= 0) return;
  if (kv.head_dim > kMaxHeadDim) fail("attention: head dim {} exceeds {}", kv.head_dim, kMaxHeadDim);
  if (kv.n_head_kv <= 0 || n_head % kv.n_head_kv != 0)
    fail("attention: {} query heads do not group over {} KV heads", n_head, kv.n_head_kv);
  if (rows > 65535) fail("attention: {} rows exceed the 65535 rows of one launch", rows);
  check_kv_type(kv.type, kv.head_dim);
  enter();
  if (rows <= cuda::kSplitMaxRows) {  // decode and verify: split over the context
    ensure_scratch(attn_scratch_, attn_scratch_cap_, cuda::attention_split_scratch_bytes(rows, n_head, kv, n_blocks),
                   "attention");
    cuda::attention_split(q, q_row_stride, q_head_stride, rows, pos, n_head, kv, table, n_blocks, scale, attn_scratch_,
                          out, as_stream(stream_));
  } else {
    cuda::attention(q, q_row_stride, q_head_stride, rows, pos, n_head, kv, table, n_blocks, scale, out,
                    as_stream(stream_));
  }
  check_launch("attention");
}

void CudaBackend::conv1d_silu(const float* x, size_t x_stride, int rows, int channels, const float* w, int kernel,
                              float* state, float* out, size_t out_stride) {
  if (rows <= 0 || channels <= 0) return;
  if (kernel < 1 || kernel > kMaxConvKernel) fail("conv1d_silu: kernel {} outside 1..{}", kernel, kMaxConvKernel);
  enter();
  cuda::conv1d_silu(x, x_stride, rows, channels, w, kernel, state, out, out_stride, as_stream(stream_));
  check_launch("conv1d_silu");
}

void CudaBackend::l2_norm_heads(float* x, size_t row_stride, int rows, int n_heads, int dim, float eps, float scale) {
  if (rows <= 0 || n_heads <= 0 || dim <= 0) return;
  enter();
  cuda::l2_norm_heads(x, row_stride, rows, n_heads, dim, eps, scale, as_stream(stream_));
  check_launch("l2_norm_heads");
}

void CudaBackend::gdn_gates(float* b, float* a, const float* a_coef, const float* dt_bias, int rows, int n_v) {
  if (rows <= 0 || n_v <= 0) return;
  enter();
  cuda::gdn_gates(b, a, a_coef, dt_bias, rows, n_v, as_stream(stream_));
  check_launch("gdn_gates");
}

void CudaBackend::gdn_conv_norm_gates(const GdnShape& shape, const float* x, size_t x_stride, int rows,
                                      const float* conv_w, int kernel, float* conv_state, float* out,
                                      size_t out_stride, float eps, float q_scale, float* beta, float* alpha,
                                      const float* a_coef, const float* dt_bias) {
  if (rows <= 0 || shape.conv_dim() <= 0) return;
  if (shape.n_k < 0 || shape.n_v < 0 || shape.d_k < 0 || shape.d_v < 0) fail("gdn_conv_norm_gates: negative head shape");
  if (kernel < 1 || kernel > kMaxConvKernel)
    fail("gdn_conv_norm_gates: kernel {} outside 1..{}", kernel, kMaxConvKernel);
  enter();
  cuda::gdn_conv_norm_gates(shape, x, x_stride, rows, conv_w, kernel, conv_state, out, out_stride, eps, q_scale, beta,
                            alpha, a_coef, dt_bias, as_stream(stream_));
  check_launch("gdn_conv_norm_gates");
}

// chunked = true takes the chunked kernels (deltanet_chunked.cu) where they support the shape,
// the recurrent kernel otherwise (both compute the same function to fp32 round-off).
void CudaBackend::gdn_delta_rule(const GdnShape& shape, const float* qkv, size_t qkv_stride, const float* g,
                                 const float* beta, int rows, float* S, float* out, bool chunked,
                                 bool keep_state, const int32_t* rows_limit) {
  if (rows <= 0 || shape.n_v <= 0) return;
  if (shape.n_k <= 0 || shape.d_k <= 0 || shape.d_v <= 0) fail("gdn_delta_rule: empty head shape");
  if ((keep_state || rows_limit) && chunked) fail("gdn_delta_rule: keep_state and rows_limit need the recurrent form");
  enter();
  if (chunked && cuda::gdn_chunked_supports(shape)) {
    ensure_scratch(gdn_scratch_, gdn_scratch_cap_, cuda::gdn_chunked_scratch_bytes(shape, rows), "gdn_delta_rule");
    cuda::gdn_delta_rule_chunked(shape, qkv, qkv_stride, g, beta, rows, S, out, static_cast<float*>(gdn_scratch_),
                                 as_stream(stream_));
    check_launch("gdn_delta_rule (chunked)");
    return;
  }
  if (keep_state && !cuda::gdn_recurrent_in_registers(shape)) {  // that kernel updates S in memory: a copy
    ensure_scratch(gdn_scratch_, gdn_scratch_cap_, shape.state_floats() * sizeof(float), "gdn_delta_rule");
    CudaBackend::copy(gdn_scratch_, S, shape.state_floats() * sizeof(float));
    S = static_cast<float*>(gdn_scratch_);
    keep_state = false;
  }
  cuda::gdn_delta_rule(shape, qkv, qkv_stride, g, beta, rows, S, out, keep_state, rows_limit, as_stream(stream_));
  check_launch("gdn_delta_rule");
}

void CudaBackend::gated_rms_norm(float* x, const float* z, const float* w, int rows, int n_heads, int dim, float eps) {
  if (rows <= 0 || n_heads <= 0 || dim <= 0) return;
  enter();
  const int64_t n_row = int64_t(n_heads) * dim;
  void* q8k = fused_q8k_for(cuda::gated_rms_norm_q8k_supports(x, rows, n_heads, dim), rows, n_row,
                            "gated_rms_norm (Q8_K)");
  cuda::gated_rms_norm(x, z, w, rows, n_heads, dim, eps, as_stream(stream_), q8k);
  check_launch("gated_rms_norm");
  if (q8k != nullptr) fused_ = FusedQ8k{x, rows, n_row};
}

void CudaBackend::argmax_rows(const float* x, int rows, int n, size_t stride, int32_t* out_host) {
  if (rows <= 0) return;
  const int32_t* ids = argmax_launch(x, rows, n, stride);
  download(out_host, ids, size_t(rows) * sizeof(int32_t));
}

void CudaBackend::argmax_rows_to(const float* x, int rows, int n, size_t stride, int32_t* out) {
  if (rows <= 0) return;
  argmax_launch(x, rows, n, stride, out);
}

const int32_t* CudaBackend::argmax_launch(const float* x, int rows, int n, size_t stride, int32_t* out) {
  if (n <= 0 || size_t(n) > stride) fail("argmax_rows: bad row (n = {}, stride = {})", n, stride);
  enter();
  if (argmax_cap_ < rows) {
    ++buffers_generation_;
    check(cudaStreamSynchronize(as_stream(stream_)), "argmax_rows (pending work)");
    check(cudaFree(argmax_dev_), "cudaFree");
    argmax_dev_ = nullptr;
    argmax_cap_ = 0;
    check(cudaMalloc(reinterpret_cast<void**>(&argmax_dev_), cuda::argmax_scratch_bytes(rows)), "argmax_rows (scratch)");
    argmax_cap_ = rows;
  }
  cuda::argmax_rows(x, rows, n, stride, argmax_dev_, out, as_stream(stream_));
  check_launch("argmax_rows");
  return out != nullptr ? out : argmax_dev_;
}

void CudaBackend::top_k_rows(const float* x, int rows, int n, size_t stride, int k, int32_t* ids_host,
                             float* vals_host) {
  if (rows <= 0) return;
  top_k_launch(x, rows, n, stride, k);
  top_k_download(rows, k, ids_host, vals_host);
}

void CudaBackend::top_k_launch(const float* x, int rows, int n, size_t stride, int k) {
  if (n <= 0 || size_t(n) > stride) fail("top_k_rows: bad row (n = {}, stride = {})", n, stride);
  if (k < 1 || k > n || k > kMaxDeviceTopK) fail("top_k_rows: k = {} outside 1..min(n = {}, {})", k, n, kMaxDeviceTopK);
  enter();
  ensure_scratch(top_k_scratch_, top_k_scratch_cap_, cuda::top_k_scratch_bytes(rows, n, k), "top_k_rows");
  cuda::top_k_rows(x, rows, n, stride, k, top_k_scratch_, as_stream(stream_));
  check_launch("top_k_rows");
}

void CudaBackend::top_k_download(int rows, int k, int32_t* ids_host, float* vals_host) {
  const size_t each = size_t(rows) * size_t(k);
  if (top_k_host_.size() < 2 * each) top_k_host_.resize(2 * each);
  CudaBackend::download(top_k_host_.data(), top_k_scratch_, 2 * each * sizeof(uint32_t));
  std::memcpy(ids_host, top_k_host_.data(), each * sizeof(int32_t));
  std::memcpy(vals_host, top_k_host_.data() + each, each * sizeof(float));
}

// --- factory ---

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not an error for the caller
    return 0;
  }
  return n;
}

std::unique_ptr<Backend> make_cuda_backend(int device, bool cuda_graphs, bool tiles, bool prompt_f16) {
  const int n = cuda_device_count();
  if (n == 0) fail("no CUDA device is available (no GPU, or no driver)");
  if (device < 0 || device >= n) fail("CUDA device {} does not exist ({} device{} present)", device, n, n == 1 ? "" : "s");
  if (cuda_graphs) return std::make_unique<CudaGraphBackend>(device, true, tiles, prompt_f16);
  return std::make_unique<CudaBackend>(device, true, tiles, prompt_f16);
}

}  // namespace df
