// Element-wise and per-head ops: embed, add, swiglu, mul_sigmoid, gated_rms_norm. All memory
// bound with one read and one write per element; math in fp32 with the CPU backend's formulas.
// swiglu, mul_sigmoid and gated_rms_norm feed products (ffn_down, attn_output, ssm_out): their
// *_q8k_k forms also write the Q8_K activations of their output (q8k_fused.cuh), the float
// output bit-identical to the plain kernel's (same value functions, explicit roundings).
#include <algorithm>

#include "backend/cuda/dequant.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/q8k_fused.cuh"

namespace df::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kQ8kWarps = 2;       // swiglu_q8k_k, mul_sigmoid_q8k_k: warps a block, a super-block each
constexpr int kGatedQ8kWarps = 8;  // gated_rms_norm_q8k_k: warps a block, a head each

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// One output value of each op, shared by its plain and fused kernels so both round alike.
__device__ __forceinline__ float swiglu_value(float g, float u) { return __fmul_rn(silu(g), u); }
__device__ __forceinline__ float gate_value(float x, float g) { return __fmul_rn(x, sigmoid(g)); }

// A lane's eight consecutive values of a fused kernel: v[j] = f(a[j], b[j]), written to out
// (which may be a: every load comes first), 16-byte aligned.
template <class F>
__device__ __forceinline__ void map8(const float* a, const float* b, float* out, float (&v)[8], F f) {
  const float4* a4 = reinterpret_cast<const float4*>(a);
  const float4* b4 = reinterpret_cast<const float4*>(b);
  const float4 a0 = a4[0], a1 = a4[1], b0 = b4[0], b1 = b4[1];
  v[0] = f(a0.x, b0.x), v[1] = f(a0.y, b0.y), v[2] = f(a0.z, b0.z), v[3] = f(a0.w, b0.w);
  v[4] = f(a1.x, b1.x), v[5] = f(a1.y, b1.y), v[6] = f(a1.z, b1.z), v[7] = f(a1.w, b1.w);
  float4* o4 = reinterpret_cast<float4*>(out);
  o4[0] = make_float4(v[0], v[1], v[2], v[3]);
  o4[1] = make_float4(v[4], v[5], v[6], v[7]);
}

// Grid-stride element loops: enough blocks to fill the GPU, no more (n may exceed 2^31).
inline unsigned elem_blocks(int64_t n) { return unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, 4096)); }

// One block per output row. Token ids were validated by the model; an id outside the table
// writes NaN instead of reading out of bounds.
template <GgmlType T>
__global__ void embed_k(const uint8_t* __restrict__ table, size_t row_bytes, int64_t n_in, int64_t n_rows,
                        const int32_t* __restrict__ tokens, float* __restrict__ out) {
  pdl_wait();
  pdl_trigger();
  const int r = blockIdx.x;
  const int32_t tok = tokens[r];
  float* o = out + int64_t(r) * n_in;
  if (tok < 0 || tok >= n_rows) {
    for (int64_t i = threadIdx.x; i < n_in; i += blockDim.x) o[i] = __int_as_float(0x7fc00000);
    return;
  }
  const uint8_t* row = table + int64_t(tok) * row_bytes;
  if constexpr (is_float_format(T)) {
    for (int64_t i = threadIdx.x; i < n_in; i += blockDim.x) o[i] = load_float_elem<T>(row, i);
  } else {
    for (int64_t c = threadIdx.x; c < n_in / 32; c += blockDim.x) {
      float v[32];
      deq32<T>(row, c, v);
#pragma unroll
      for (int l = 0; l < 32; ++l) o[c * 32 + l] = v[l];
    }
  }
}

__global__ void add_k(float* __restrict__ x, const float* __restrict__ y, int64_t n) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] += y[i];
}

// out may alias gate (the model computes in place).
__global__ void swiglu_k(const float* gate, const float* __restrict__ up, int64_t n, float* out) {
  pdl_wait();
  pdl_trigger();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = swiglu_value(gate[i], up[i]);
}

// swiglu_k plus out's Q8_K forms: warp w of block (x, r) takes super-block b = x kQ8kWarps + w
// of row r (rows of n), eight values a lane, stores them and quantizes those very registers;
// padding rows (r >= rows) write only the zeros. out may alias gate: each lane reads its
// values before it writes them.
__global__ void __launch_bounds__(kQ8kWarps * kWarp)
    swiglu_q8k_k(const float* gate, const float* __restrict__ up, int rows, int n, float* out, Q8kOut a) {
  pdl_wait();
  pdl_trigger();
  const int lane = threadIdx.x % kWarp, b = int(blockIdx.x) * kQ8kWarps + int(threadIdx.x) / kWarp;
  const int r = blockIdx.y;
  if (b >= n / kSb) return;  // whole warps: the stores shuffle
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = 0.0f;
  if (r < rows) {
    const int64_t e = int64_t(r) * n + int64_t(b) * kSb + 8 * lane;
    map8(gate + e, up + e, out + e, v, [](float g, float u) { return swiglu_value(g, u); });
  }
  q8k_store_both(v, b, r, n, lane, a);
}

// Rows along y (grid-stride: rows may exceed the 65535 limit of gridDim.y).
__global__ void mul_sigmoid_k(float* __restrict__ x, size_t x_stride, const float* __restrict__ g, size_t g_stride,
                              int rows, int n) {
  pdl_wait();
  pdl_trigger();
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    float* xr = x + r * x_stride;
    const float* gr = g + r * g_stride;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
      xr[i] = gate_value(xr[i], gr[i]);
  }
}

// mul_sigmoid_k plus x's Q8_K forms, for x of rows x n_heads contiguous vectors of n (a product
// row: n_heads n floats): as swiglu_q8k_k, warp w of block (x, r) takes super-block b of row
// r; n % 8 == 0, so a lane's eight values lie in one head h, whose gate is at
// g + (r n_heads + h) g_stride.
__global__ void __launch_bounds__(kQ8kWarps * kWarp)
    mul_sigmoid_q8k_k(float* __restrict__ x, const float* __restrict__ g, size_t g_stride, int rows, int n_heads,
                      int n, Q8kOut a) {
  pdl_wait();
  pdl_trigger();
  const int n_row = n_heads * n;
  const int lane = threadIdx.x % kWarp, b = int(blockIdx.x) * kQ8kWarps + int(threadIdx.x) / kWarp;
  const int r = blockIdx.y;
  if (b >= n_row / kSb) return;  // whole warps: the stores shuffle
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = 0.0f;
  if (r < rows) {
    const int e = b * kSb + 8 * lane, h = e / n;
    float* const xe = x + int64_t(r) * n_row + e;
    map8(xe, g + (int64_t(r) * n_heads + h) * g_stride + (e - h * n), xe, v,
         [](float xv, float gv) { return gate_value(xv, gv); });
  }
  q8k_store_both(v, b, r, n_row, lane, a);
}

// One (row, head) vector of length dim by one warp, in place: v = rms_norm(v; w) * silu(z).
// Lane-strided, explicit roundings: gated_rms_norm_k and gated_rms_norm_q8k_k get the same bits.
__device__ __forceinline__ void gated_rms_norm_vector(float* v, const float* zv, const float* __restrict__ w, int dim,
                                                      float eps, int lane) {
  float ss = 0.0f;
  for (int j = lane; j < dim; j += kWarp) ss = __fmaf_rn(v[j], v[j], ss);
  const float scale = 1.0f / sqrtf(warp_sum(ss) / float(dim) + eps);
  for (int j = lane; j < dim; j += kWarp) v[j] = __fmul_rn(__fmul_rn(__fmul_rn(v[j], scale), w[j]), silu(zv[j]));
}

// One warp per (row, head) vector of length dim, contiguous: v = rms_norm(v; w) * silu(z).
__global__ void gated_rms_norm_k(float* __restrict__ x, const float* __restrict__ z, const float* __restrict__ w,
                                 int64_t n_vec, int dim, float eps) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = blockIdx.x * int64_t(blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (i >= n_vec) return;
  gated_rms_norm_vector(x + i * dim, z + i * dim, w, dim, eps, threadIdx.x % kWarp);
}

// gated_rms_norm_k plus x's Q8_K forms. Row r (n_row = n_heads dim floats) is cut into chunks of
// chunk_floats = max(dim, 256) floats, whole heads and whole super-blocks
// (gated_rms_norm_q8k_supports); block (x, r) takes `chunks` of them (no other block touches
// their heads): its warps norm the heads as gated_rms_norm_k does (same function, a warp a
// head), then, after the barrier, quantize the super-blocks from the floats just written.
__global__ void __launch_bounds__(kGatedQ8kWarps * kWarp)
    gated_rms_norm_q8k_k(float* x, const float* __restrict__ z, const float* __restrict__ w, int rows, int n_heads,
                         int dim, float eps, int chunk_floats, int chunks, Q8kOut a) {
  pdl_wait();
  pdl_trigger();
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, r = blockIdx.y;
  const int n_row = n_heads * dim;
  const int begin = int(blockIdx.x) * chunks * chunk_floats, end = min(n_row, begin + chunks * chunk_floats);
  float* const row = x + int64_t(r) * n_row;  // not read or written for padding rows
  if (r < rows) {
    const float* zr = z + int64_t(r) * n_row;
    for (int h = begin / dim + warp; h < end / dim; h += kGatedQ8kWarps)
      gated_rms_norm_vector(row + int64_t(h) * dim, zr + int64_t(h) * dim, w, dim, eps, lane);
  }
  // The heads were normed by other warps: their floats are visible to all after the barrier.
  __syncthreads();
  for (int b = begin / kSb + warp; b < end / kSb; b += kGatedQ8kWarps) {  // whole warps
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = 0.0f;
    if (r < rows) q8k_load_written(row, b, lane, v);
    q8k_store_both(v, b, r, n_row, lane, a);
  }
}

}  // namespace

bool embed(const Weight& table, const int32_t* tokens, int rows, float* out, cudaStream_t s) {
  const auto* td = static_cast<const uint8_t*>(table.data);
  return dispatch_weight_type(table.type, [&](auto tag) {
    constexpr GgmlType T = decltype(tag)::value;
    launch(embed_k<T>, rows, 128, 0, s, td, table.row_bytes, table.n_in, table.n_out, tokens, out);
  });
}

void add(float* x, const float* y, int64_t n, cudaStream_t s) { launch(add_k, elem_blocks(n), kThreads, 0, s, x, y, n); }

bool swiglu_q8k_supports(const float* gate, const float* up, int rows, int n, const float* out) {
  return rows >= 1 && rows <= kNormQ8kMaxRows && n > 0 && n % kSb == 0 && aligned16(gate) && aligned16(up) &&
         aligned16(out);
}

void swiglu(const float* gate, const float* up, int rows, int n, float* out, cudaStream_t s, void* q8k) {
  if (q8k != nullptr) {
    const Q8kOut a = q8k_out(q8k, n, rows);
    const dim3 grid(ceil_div(n / kSb, kQ8kWarps), unsigned(a.q6.rows_pad));
    launch(swiglu_q8k_k, grid, kQ8kWarps * kWarp, 0, s, gate, up, rows, n, out, a);
    return;
  }
  const int64_t count = int64_t(rows) * n;
  launch(swiglu_k, elem_blocks(count), kThreads, 0, s, gate, up, count, out);
}

bool mul_sigmoid_q8k_supports(const float* x, size_t x_stride, const float* g, size_t g_stride, int rows,
                              int n_heads, int n) {
  return rows >= 1 && rows <= kNormQ8kMaxRows && n_heads >= 1 && n > 0 && n % 8 == 0 &&
         int64_t(n_heads) * n % kSb == 0 && int64_t(n_heads) * n <= INT32_MAX && x_stride == size_t(n) &&
         g_stride % 4 == 0 && aligned16(x) && aligned16(g);
}

void mul_sigmoid(float* x, size_t x_stride, const float* g, size_t g_stride, int rows, int n_heads, int n,
                 cudaStream_t s, void* q8k) {
  if (q8k != nullptr) {
    const int n_row = n_heads * n;
    const Q8kOut a = q8k_out(q8k, n_row, rows);
    const dim3 grid(ceil_div(n_row / kSb, kQ8kWarps), unsigned(a.q6.rows_pad));
    launch(mul_sigmoid_q8k_k, grid, kQ8kWarps * kWarp, 0, s, x, g, g_stride, rows, n_heads, n, a);
    return;
  }
  const int vectors = rows * n_heads;
  const dim3 grid(ceil_div(n, kThreads), unsigned(std::min(vectors, 65535)));
  launch(mul_sigmoid_k, grid, kThreads, 0, s, x, x_stride, g, g_stride, vectors, n);
}

bool gated_rms_norm_q8k_supports(const float* x, int rows, int n_heads, int dim) {
  if (rows < 1 || rows > kNormQ8kMaxRows || n_heads < 1 || dim < 1 || !aligned16(x)) return false;
  if (int64_t(n_heads) * dim > INT32_MAX) return false;
  const int n_row = n_heads * dim;
  // Chunks of whole heads and whole super-blocks (gated_rms_norm_q8k_k).
  return (kSb % dim == 0 && n_row % kSb == 0) || dim % kSb == 0;
}

void gated_rms_norm(float* x, const float* z, const float* w, int rows, int n_heads, int dim, float eps,
                    cudaStream_t s, void* q8k) {
  if (q8k != nullptr) {
    const int n_row = n_heads * dim, chunk_floats = std::max(dim, kSb);
    const int chunks = std::max(1, kGatedQ8kWarps / (chunk_floats / dim));  // about a head a warp
    const Q8kOut a = q8k_out(q8k, n_row, rows);
    const dim3 grid(ceil_div(n_row / chunk_floats, chunks), unsigned(a.q6.rows_pad));
    launch(gated_rms_norm_q8k_k, grid, kGatedQ8kWarps * kWarp, 0, s, x, z, w, rows, n_heads, dim, eps, chunk_floats,
           chunks, a);
    return;
  }
  const int64_t n_vec = int64_t(rows) * n_heads;
  constexpr int kWarps = 4;
  launch(gated_rms_norm_k, ceil_div(n_vec, kWarps), kWarps * kWarp, 0, s, x, z, w, n_vec, dim, eps);
}

}  // namespace df::cuda
