// RMSNorm and NeoX rotary embedding, and the two fused for attention's q and k heads.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/q8k_fused.cuh"

namespace df::cuda {

namespace {

// How a block norms one vector; a function of the pointers' alignment and of dim only, never of
// the batch (a row's result must not depend on how many rows a call has). rms_norm_k,
// rms_norm_q8k_k and qk_norm_rope_k all norm through the functions below with the same path and
// block width (norm_threads), and the roundings are explicit (no contraction left to the
// compiler), so their results agree bit for bit for the same dim. The fp32 sum of squares is a
// block reduction (the CPU sums serially, so results differ by reduction order only: ~sqrt(dim)
// ulp on the scale). With kAdd, the residual add that precedes the norm runs in the same pass:
// x += y, then the same reduction over the sums, so the result equals add then rms_norm.
enum class NormPath {
  kScalar,       // unaligned pointers or strides: lane-strided floats
  kFloat4,       // aligned, dim % 4 == 0 but not whole super-blocks: block-strided float4s
  kSuperBlocks,  // aligned, dim % kSb == 0 (every model dim): a warp per 256-float super-block
};

template <NormPath kPath, bool kAdd>
__device__ __forceinline__ void rms_norm_vector(float* xi, const float* yi, const float* __restrict__ w, int dim,
                                                float eps, float* oi) {
  static_assert(kPath != NormPath::kSuperBlocks, "rms_norm_superblocks");
  // oi may equal xi: every read happens before the reduction ends.
  float ss = 0.0f;
  if constexpr (kPath == NormPath::kFloat4) {
    float4* x4 = reinterpret_cast<float4*>(xi);
    for (int j = threadIdx.x; j < dim / 4; j += blockDim.x) {
      float4 v = x4[j];
      if constexpr (kAdd) {
        const float4 u = reinterpret_cast<const float4*>(yi)[j];
        v = make_float4(__fadd_rn(v.x, u.x), __fadd_rn(v.y, u.y), __fadd_rn(v.z, u.z), __fadd_rn(v.w, u.w));
        x4[j] = v;
      }
      ss = __fadd_rn(ss, __fmaf_rn(v.w, v.w, __fmaf_rn(v.z, v.z, __fmaf_rn(v.y, v.y, __fmul_rn(v.x, v.x)))));
    }
    const float scale = 1.0f / sqrtf(block_sum(ss) / float(dim) + eps);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    float4* o4 = reinterpret_cast<float4*>(oi);
    for (int j = threadIdx.x; j < dim / 4; j += blockDim.x) {  // this thread's own x4[j] from above
      const float4 v = x4[j], g = w4[j];
      o4[j] = make_float4(v.x * scale * g.x, v.y * scale * g.y, v.z * scale * g.z, v.w * scale * g.w);
    }
  } else {
    for (int j = threadIdx.x; j < dim; j += blockDim.x) {
      if constexpr (kAdd) xi[j] = __fadd_rn(xi[j], yi[j]);
      ss = __fmaf_rn(xi[j], xi[j], ss);
    }
    const float scale = 1.0f / sqrtf(block_sum(ss) / float(dim) + eps);
    for (int j = threadIdx.x; j < dim; j += blockDim.x) oi[j] = xi[j] * scale * w[j];
  }
}

// Eight floats at p (32-byte aligned), as two float4s.
__device__ __forceinline__ void load8(const float* p, float (&v)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], c = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = c.x, v[5] = c.y, v[6] = c.z, v[7] = c.w;
}
// The same for data no kernel writes (the norm weights): the read-only path.
__device__ __forceinline__ void load8_const(const float* __restrict__ p, float (&v)[8]) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(p)), c = __ldg(reinterpret_cast<const float4*>(p) + 1);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = c.x, v[5] = c.y, v[6] = c.z, v[7] = c.w;
}
__device__ __forceinline__ void store8(float* p, const float (&v)[8]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

__device__ __forceinline__ float sum_squares8(const float (&v)[8]) {
  float s = __fmul_rn(v[0], v[0]);
#pragma unroll
  for (int j = 1; j < 8; ++j) s = __fmaf_rn(v[j], v[j], s);
  return s;
}

// Super-blocks a warp keeps in registers from load to output; any further ones (dim > 8192) it
// reads again after the reduction. Two would spill within the 64 registers a 1024-thread
// block allows (-Xptxas -v).
constexpr int kHeldSuperBlocks = 1;

// NormPath::kSuperBlocks: warp w of the block norms super-blocks w, w + n_warps, ... of the
// vector (dim / kSb of them), lane l elements 8l .. 8l + 7 of each: the eight values a Q8_K
// quantizer lane takes (q8k_store_both), so rms_norm_q8k_k quantizes them from registers.
// Per lane the sum of squares runs over its super-blocks in order, then the block sums the
// lanes (block_sum). emit(b, o) gets super-block b's normed values o (this lane's eight); every
// lane of a warp calls it for the same b at once (it may shuffle). emit may write xi's
// elements: each is read before its own output is emitted and never again.
template <bool kAdd, class Emit>
__device__ __forceinline__ void rms_norm_superblocks(float* xi, const float* yi, const float* __restrict__ w, int dim,
                                                     float eps, Emit&& emit) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, n_warps = blockDim.x / kWarp;
  const int n_sb = dim / kSb;
  // This lane's values of super-block b (x + y with kAdd, stored back into x).
  const auto take = [&](int b, float (&v)[8]) {
    float* const p = xi + int64_t(b) * kSb + 8 * lane;
    load8(p, v);
    if constexpr (kAdd) {
      float u[8];
      load8(yi + int64_t(b) * kSb + 8 * lane, u);
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = __fadd_rn(v[j], u[j]);
      store8(p, v);
    }
  };
  float held[kHeldSuperBlocks][8], g[kHeldSuperBlocks][8];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kHeldSuperBlocks; ++k) {
    const int b = warp + k * n_warps;
    if (b < n_sb) {
      take(b, held[k]);
      load8_const(w + int64_t(b) * kSb + 8 * lane, g[k]);
      ss = __fadd_rn(ss, sum_squares8(held[k]));
    }
  }
  for (int b = warp + kHeldSuperBlocks * n_warps; b < n_sb; b += n_warps) {
    float v[8];
    take(b, v);
    ss = __fadd_rn(ss, sum_squares8(v));
  }
  const float scale = 1.0f / sqrtf(block_sum(ss) / float(dim) + eps);
  const auto output = [&](int b, const float (&v)[8], const float (&gb)[8]) {
    float o[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = __fmul_rn(__fmul_rn(v[j], scale), gb[j]);
    emit(b, o);
  };
#pragma unroll
  for (int k = 0; k < kHeldSuperBlocks; ++k) {
    const int b = warp + k * n_warps;
    if (b < n_sb) output(b, held[k], g[k]);
  }
  for (int b = warp + kHeldSuperBlocks * n_warps; b < n_sb; b += n_warps) {
    float v[8], gb[8];
    load8(xi + int64_t(b) * kSb + 8 * lane, v);  // this lane's own values (or sums) from above
    load8_const(w + int64_t(b) * kSb + 8 * lane, gb);
    output(b, v, gb);
  }
}

// One vector normed into oi by the whole block, on any path.
template <NormPath kPath, bool kAdd>
__device__ __forceinline__ void rms_norm_into(float* xi, const float* yi, const float* __restrict__ w, int dim,
                                              float eps, float* oi) {
  if constexpr (kPath == NormPath::kSuperBlocks) {
    const int lane = threadIdx.x % kWarp;
    rms_norm_superblocks<kAdd>(xi, yi, w, dim, eps,
                               [&](int b, const float (&o)[8]) { store8(oi + int64_t(b) * kSb + 8 * lane, o); });
  } else {
    rms_norm_vector<kPath, kAdd>(xi, yi, w, dim, eps, oi);
  }
}

// One block per vector (see rms_norm_into).
template <NormPath kPath, bool kAdd>
__global__ void __launch_bounds__(1024) rms_norm_k(float* x, const float* y, size_t x_stride,
                                                   const float* __restrict__ w, int dim, float eps, float* out,
                                                   size_t out_stride) {
  pdl_wait();
  pdl_trigger();
  rms_norm_into<kPath, kAdd>(x + blockIdx.x * x_stride, kAdd ? y + blockIdx.x * x_stride : nullptr, w, dim, eps,
                             out + blockIdx.x * out_stride);
}

// rms_norm_k (super-block path) plus out's Q8_K forms (q8k_fused.cuh): block r < n norms row r
// exactly as rms_norm_k does (same function, same block width), and each warp quantizes its
// super-blocks (q8k_store_both, as the quantizers do) from the normed values still in its
// registers, besides writing the floats (later ops read them); blocks n .. rows_pad - 1 write the
// padding rows' zeros. The next product then skips its quantizer launch
// (CudaBackend::add_rms_norm). Values never go through memory between the load and the
// quantization: a decode step's norm of one 5120-float row is latency, not bandwidth.
template <bool kAdd>
__global__ void __launch_bounds__(1024) rms_norm_q8k_k(float* x, const float* y, size_t x_stride,
                                                       const float* __restrict__ w, int n, int dim, float eps,
                                                       float* out, size_t out_stride, Q8kOut a) {
  pdl_wait();
  pdl_trigger();
  const int r = blockIdx.x, lane = threadIdx.x % kWarp;
  if (r < n) {
    float* const o = out + size_t(r) * out_stride;
    rms_norm_superblocks<kAdd>(x + r * x_stride, kAdd ? y + r * x_stride : nullptr, w, dim, eps,
                               [&](int b, const float (&v)[8]) {
                                 store8(o + int64_t(b) * kSb + 8 * lane, v);
                                 q8k_store_both(v, b, r, dim, lane, a);
                               });
    return;
  }
  const int warp = threadIdx.x / kWarp, n_warps = blockDim.x / kWarp;
  float zeros[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) zeros[j] = 0.0f;
  for (int b = warp; b < dim / kSb; b += n_warps) q8k_store_both(zeros, b, r, dim, lane, a);  // whole warps: it shuffles
}

// cos and sin of pair i's angle at position p, in double like the CPU (positions reach 10^5+
// and float angles lose the phase). Shared by both rotation kernels.
__device__ __forceinline__ void rope_cos_sin(int32_t p, int i, int n_rot, float theta, float& c, float& s) {
  const double ang = double(p) * pow(double(theta), -2.0 * i / n_rot);
  c = float(cos(ang));
  s = float(sin(ang));
}

// Rotates the pair (v[i], v[i + half]); explicit roundings, so every kernel gets the same bits.
__device__ __forceinline__ void rope_rotate(float* v, int i, int half, float c, float s) {
  const float x0 = v[i], x1 = v[i + half];
  v[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
  v[i + half] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
}

// One block per row: cos/sin of the row's angles once in shared memory, then every head.
__global__ void rope_neox_k(float* x, size_t row_stride, size_t head_stride, int n_heads, const int32_t* pos,
                            int n_rot, float theta) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ float cs_sn[];  // cos[half] then sin[half]
  const int half = n_rot / 2;
  const int32_t p = pos[blockIdx.x];
  for (int i = threadIdx.x; i < half; i += blockDim.x) rope_cos_sin(p, i, n_rot, theta, cs_sn[i], cs_sn[half + i]);
  __syncthreads();
  float* xr = x + blockIdx.x * row_stride;
  for (int idx = threadIdx.x; idx < n_heads * half; idx += blockDim.x) {
    const int h = idx / half, i = idx % half;
    rope_rotate(xr + h * head_stride, i, half, cs_sn[i], cs_sn[half + i]);
  }
}

// The attention layer's q/k norms and rotation, fused: one block per (row, head) vector, q heads
// then k heads of each row. The block norms its vector as rms_norm_k does (same function, same
// block width), then rotates it as rope_neox_k does (same angle and rotation functions), so the
// result is that of the four separate launches bit for bit.
template <NormPath kPath>
__global__ void __launch_bounds__(1024)
    qk_norm_rope_k(float* q, size_t q_head_stride, int n_head, const float* __restrict__ q_w, float* k, int n_head_kv,
                   const float* __restrict__ k_w, int head_dim, float eps, const int32_t* __restrict__ pos, int n_rot,
                   float theta) {
  pdl_wait();
  pdl_trigger();
  const int heads = n_head + n_head_kv;
  const int64_t r = blockIdx.x / heads;
  const int h = int(blockIdx.x % heads);
  const bool is_q = h < n_head;
  float* v = is_q ? q + (r * n_head + h) * q_head_stride : k + (r * n_head_kv + (h - n_head)) * int64_t(head_dim);
  rms_norm_into<kPath, false>(v, nullptr, is_q ? q_w : k_w, head_dim, eps, v);
  __syncthreads();  // a rotation pairs values that other threads normed
  const int half = n_rot / 2;
  const int32_t p = pos[r];
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float c, s;
    rope_cos_sin(p, i, n_rot, theta, c, s);
    rope_rotate(v, i, half, c, s);
  }
}

// Threads per block for a reduction over dim elements: a multiple of 32, at most 256.
int reduce_threads(int dim) { return std::clamp((dim + kWarp - 1) / kWarp * kWarp, kWarp, 256); }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Whether a norm may read float4s: a property of its pointers and strides, not of n.
bool norm_vectorized(const float* x, const float* y, size_t x_stride, const float* w, int dim, const float* out,
                     size_t out_stride) {
  return dim % 4 == 0 && x_stride % 4 == 0 && out_stride % 4 == 0 && aligned16(x) && aligned16(w) &&
         aligned16(out) && (y == nullptr || aligned16(y));
}

// A norm's path and block width: functions of dim and the alignment only, never of n (a row's
// result must not depend on the batch).
NormPath norm_path(bool vec, int dim) {
  if (!vec) return NormPath::kScalar;
  return dim % kSb == 0 ? NormPath::kSuperBlocks : NormPath::kFloat4;
}

int norm_threads(NormPath path, int dim) {
  switch (path) {
    case NormPath::kSuperBlocks:  // a warp per super-block, at most 32 warps
      return kWarp * std::min(dim / kSb, 1024 / kWarp);
    case NormPath::kFloat4:
      return std::clamp((dim / 4 + kWarp - 1) / kWarp * kWarp, kWarp, 1024);
    default:
      return reduce_threads(dim);
  }
}

template <NormPath kPath>
void launch_rms_norm_k(bool add, unsigned blocks, int threads, cudaStream_t s, float* x, const float* y,
                       size_t x_stride, const float* w, int dim, float eps, float* out, size_t out_stride) {
  if (add) launch(rms_norm_k<kPath, true>, blocks, threads, 0, s, x, y, x_stride, w, dim, eps, out, out_stride);
  else launch(rms_norm_k<kPath, false>, blocks, threads, 0, s, x, y, x_stride, w, dim, eps, out, out_stride);
}

void launch_rms_norm(float* x, const float* y, size_t x_stride, const float* w, int n, int dim, float eps, float* out,
                     size_t out_stride, cudaStream_t s, void* q8k) {
  const bool add = y != nullptr;
  const NormPath path = norm_path(norm_vectorized(x, y, x_stride, w, dim, out, out_stride), dim);
  const int threads = norm_threads(path, dim);
  if (q8k != nullptr) {  // norm_q8k_supports: the super-block path, at most kNormQ8kMaxRows rows
    const Q8kOut a = q8k_out(q8k, dim, n);
    const unsigned blocks = unsigned(a.q6.rows_pad);
    if (add) launch(rms_norm_q8k_k<true>, blocks, threads, 0, s, x, y, x_stride, w, n, dim, eps, out, out_stride, a);
    else launch(rms_norm_q8k_k<false>, blocks, threads, 0, s, x, y, x_stride, w, n, dim, eps, out, out_stride, a);
    return;
  }
  const unsigned blocks = unsigned(n);
  switch (path) {
    case NormPath::kSuperBlocks:
      return launch_rms_norm_k<NormPath::kSuperBlocks>(add, blocks, threads, s, x, y, x_stride, w, dim, eps, out,
                                                       out_stride);
    case NormPath::kFloat4:
      return launch_rms_norm_k<NormPath::kFloat4>(add, blocks, threads, s, x, y, x_stride, w, dim, eps, out,
                                                  out_stride);
    default:
      return launch_rms_norm_k<NormPath::kScalar>(add, blocks, threads, s, x, y, x_stride, w, dim, eps, out,
                                                  out_stride);
  }
}

}  // namespace

bool norm_q8k_supports(const float* x, const float* y, size_t x_stride, const float* w, int n, int dim,
                       const float* out, size_t out_stride) {
  return n >= 1 && n <= kNormQ8kMaxRows && dim % kSb == 0 && norm_vectorized(x, y, x_stride, w, dim, out, out_stride);
}

void rms_norm(const float* x, size_t x_stride, const float* w, int n, int dim, float eps, float* out,
              size_t out_stride, cudaStream_t s, void* q8k) {
  // Without kAdd the kernel only reads x.
  launch_rms_norm(const_cast<float*>(x), nullptr, x_stride, w, n, dim, eps, out, out_stride, s, q8k);
}

void add_rms_norm(float* x, const float* y, const float* w, int n, int dim, float eps, float* out, size_t out_stride,
                  cudaStream_t s, void* q8k) {
  launch_rms_norm(x, y, size_t(dim), w, n, dim, eps, out, out_stride, s, q8k);
}

void rope_neox(float* x, size_t row_stride, size_t head_stride, int rows, int n_heads, const int32_t* pos,
               int n_rot, float theta, cudaStream_t s) {
  const size_t shared = size_t(n_rot / 2) * 2 * sizeof(float);
  launch(rope_neox_k, rows, 128, shared, s, x, row_stride, head_stride, n_heads, pos, n_rot, theta);
}

void qk_norm_rope(float* q, size_t q_head_stride, int n_head, const float* q_w, float* k, int n_head_kv,
                  const float* k_w, int rows, int head_dim, float eps, const int32_t* pos, int n_rot, float theta,
                  cudaStream_t s) {
  const size_t kd = size_t(head_dim);
  const bool vq = norm_vectorized(q, nullptr, q_head_stride, q_w, head_dim, q, q_head_stride);
  const bool vk = norm_vectorized(k, nullptr, kd, k_w, head_dim, k, kd);
  if (vq != vk) {  // the two norms would run at different widths: not one kernel (never in the models)
    if (n_head > 0) rms_norm(q, q_head_stride, q_w, rows * n_head, head_dim, eps, q, q_head_stride, s);
    if (n_head_kv > 0) rms_norm(k, kd, k_w, rows * n_head_kv, head_dim, eps, k, kd, s);
    if (n_rot >= 2 && n_head > 0)
      rope_neox(q, size_t(n_head) * q_head_stride, q_head_stride, rows, n_head, pos, n_rot, theta, s);
    if (n_rot >= 2 && n_head_kv > 0) rope_neox(k, size_t(n_head_kv) * kd, kd, rows, n_head_kv, pos, n_rot, theta, s);
    return;
  }
  const unsigned blocks = unsigned(int64_t(rows) * (n_head + n_head_kv));
  const NormPath path = norm_path(vq, head_dim);
  const int threads = norm_threads(path, head_dim);
  const int rot = n_rot >= 2 ? n_rot : 0;  // as rope_neox: no rotation below 2 dims
  const auto go = [&](auto kernel) {
    launch(kernel, blocks, threads, 0, s, q, q_head_stride, n_head, q_w, k, n_head_kv, k_w, head_dim, eps, pos, rot,
           theta);
  };
  switch (path) {
    case NormPath::kSuperBlocks:
      return go(qk_norm_rope_k<NormPath::kSuperBlocks>);
    case NormPath::kFloat4:
      return go(qk_norm_rope_k<NormPath::kFloat4>);
    default:
      return go(qk_norm_rope_k<NormPath::kScalar>);
  }
}

}  // namespace df::cuda
