// RMSNorm and NeoX rotary embedding, and the two fused for attention's q and k heads.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/q8k_fused.cuh"

namespace df::cuda {

namespace {

// One vector's RMSNorm by the whole block: the fp32 sum of squares is a block reduction (the
// CPU sums serially, so results differ by reduction order only: ~sqrt(dim) ulp on the scale).
// A decode step norms single 5120-wide vectors, where one block is all the GPU does: the block
// is wide (up to 1024 threads) and reads float4s, so the two passes cost two memory round
// trips, not dim / 256. With kAdd, the residual add that precedes the norm runs in the same
// pass: x += y, then the same reduction over the sums, so the result equals add then rms_norm
// bit for bit. rms_norm_k and qk_norm_rope_k both norm through this function with the same
// block width (norm_threads), and the roundings are explicit (no contraction left to the
// compiler), so their results agree bit for bit.
template <bool kVec, bool kAdd>
__device__ __forceinline__ void rms_norm_vector(float* xi, const float* yi, const float* __restrict__ w, int dim,
                                                float eps, float* oi) {
  // oi may equal xi: every read happens before the reduction ends.
  float ss = 0.0f;
  if constexpr (kVec) {
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

// One block per vector (see rms_norm_vector).
template <bool kVec, bool kAdd>
__global__ void rms_norm_k(float* x, const float* y, size_t x_stride, const float* __restrict__ w, int dim,
                           float eps, float* out, size_t out_stride) {
  pdl_wait();
  pdl_trigger();
  rms_norm_vector<kVec, kAdd>(x + blockIdx.x * x_stride, kAdd ? y + blockIdx.x * x_stride : nullptr, w, dim, eps,
                              out + blockIdx.x * out_stride);
}

// rms_norm_k (float4 path) plus out's Q8_K forms (q8k_fused.cuh): block r < n norms row r
// exactly as rms_norm_k does (same function, same block width), then its warps quantize the
// row's super-blocks as the quantizers do (q8k_store_both) from the floats just written;
// blocks n .. rows_pad - 1 write the padding rows' zeros. The next product then skips its
// quantizer launch (CudaBackend::add_rms_norm).
template <bool kAdd>
__global__ void rms_norm_q8k_k(float* x, const float* y, size_t x_stride, const float* __restrict__ w, int n, int dim,
                               float eps, float* out, size_t out_stride, Q8kOut a) {
  pdl_wait();
  pdl_trigger();
  const int r = blockIdx.x;
  float* const o = out + size_t(r) * out_stride;
  if (r < n) rms_norm_vector<true, kAdd>(x + r * x_stride, kAdd ? y + r * x_stride : nullptr, w, dim, eps, o);
  // The row's floats were written by every thread of the block: visible to all after the
  // barrier (q8k_load_written reads them back through L2).
  __syncthreads();
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, n_warps = blockDim.x / kWarp;
  for (int b = warp; b < dim / kSb; b += n_warps) {  // whole warps: the stores shuffle
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = 0.0f;
    if (r < n) q8k_load_written(o, b, lane, v);
    q8k_store_both(v, b, r, dim, lane, a);
  }
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
template <bool kVec>
__global__ void qk_norm_rope_k(float* q, size_t q_head_stride, int n_head, const float* __restrict__ q_w, float* k,
                               int n_head_kv, const float* __restrict__ k_w, int head_dim, float eps,
                               const int32_t* __restrict__ pos, int n_rot, float theta) {
  pdl_wait();
  pdl_trigger();
  const int heads = n_head + n_head_kv;
  const int64_t r = blockIdx.x / heads;
  const int h = int(blockIdx.x % heads);
  const bool is_q = h < n_head;
  float* v = is_q ? q + (r * n_head + h) * q_head_stride : k + (r * n_head_kv + (h - n_head)) * int64_t(head_dim);
  rms_norm_vector<kVec, false>(v, nullptr, is_q ? q_w : k_w, head_dim, eps, v);
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

// Whether a norm takes the float4 path: a property of its pointers and strides, not of n.
bool norm_vectorized(const float* x, const float* y, size_t x_stride, const float* w, int dim, const float* out,
                     size_t out_stride) {
  return dim % 4 == 0 && x_stride % 4 == 0 && out_stride % 4 == 0 && aligned16(x) && aligned16(w) &&
         aligned16(out) && (y == nullptr || aligned16(y));
}

// The block width of a norm: a function of dim and the path only, never of n (a row's result
// must not depend on the batch).
int norm_threads(bool vec, int dim) {
  return vec ? std::clamp((dim / 4 + kWarp - 1) / kWarp * kWarp, kWarp, 1024) : reduce_threads(dim);
}

void launch_rms_norm(float* x, const float* y, size_t x_stride, const float* w, int n, int dim, float eps, float* out,
                     size_t out_stride, cudaStream_t s, void* q8k) {
  const bool add = y != nullptr, vec = norm_vectorized(x, y, x_stride, w, dim, out, out_stride);
  const int threads = norm_threads(vec, dim);
  if (q8k != nullptr) {  // norm_q8k_supports: vec, whole super-blocks, at most kNormQ8kMaxRows rows
    const Q8kOut a = q8k_out(q8k, dim, n);
    const unsigned blocks = unsigned(a.q6.rows_pad);
    if (add) launch(rms_norm_q8k_k<true>, blocks, threads, 0, s, x, y, x_stride, w, n, dim, eps, out, out_stride, a);
    else launch(rms_norm_q8k_k<false>, blocks, threads, 0, s, x, y, x_stride, w, n, dim, eps, out, out_stride, a);
    return;
  }
  if (vec) {
    if (add) launch(rms_norm_k<true, true>, n, threads, 0, s, x, y, x_stride, w, dim, eps, out, out_stride);
    else launch(rms_norm_k<true, false>, n, threads, 0, s, x, y, x_stride, w, dim, eps, out, out_stride);
  } else {
    if (add) launch(rms_norm_k<false, true>, n, threads, 0, s, x, y, x_stride, w, dim, eps, out, out_stride);
    else launch(rms_norm_k<false, false>, n, threads, 0, s, x, y, x_stride, w, dim, eps, out, out_stride);
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
  const int64_t blocks = int64_t(rows) * (n_head + n_head_kv);
  const int threads = norm_threads(vq, head_dim);
  const int rot = n_rot >= 2 ? n_rot : 0;  // as rope_neox: no rotation below 2 dims
  if (vq) {
    launch(qk_norm_rope_k<true>, unsigned(blocks), threads, 0, s, q, q_head_stride, n_head, q_w, k, n_head_kv, k_w,
           head_dim, eps, pos, rot, theta);
  } else {
    launch(qk_norm_rope_k<false>, unsigned(blocks), threads, 0, s, q, q_head_stride, n_head, q_w, k, n_head_kv, k_w,
           head_dim, eps, pos, rot, theta);
  }
}

}  // namespace df::cuda
