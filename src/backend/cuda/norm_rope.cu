// RMSNorm and NeoX rotary embedding.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace df::cuda {

namespace {

// One block per vector; the fp32 sum of squares is a block reduction (the CPU sums serially,
// so results differ by reduction order only: ~sqrt(dim) ulp on the scale). A decode step norms
// single 5120-wide vectors, where one block is all the GPU does: the block is wide (up to 1024
// threads) and reads float4s, so the two passes cost two memory round trips, not dim / 256.
// With kAdd, the residual add that precedes the norm runs in the same pass: x += y (y with
// x's stride), then the same reduction over the sums, so the result equals add then rms_norm
// bit for bit with one launch fewer.
template <bool kVec, bool kAdd>
__global__ void rms_norm_k(float* x, const float* y, size_t x_stride, const float* __restrict__ w, int dim,
                           float eps, float* out, size_t out_stride) {
  pdl_wait();
  pdl_trigger();
  float* xi = x + blockIdx.x * x_stride;
  const float* yi = kAdd ? y + blockIdx.x * x_stride : nullptr;
  float* oi = out + blockIdx.x * out_stride;  // may equal xi: every read happens before the reduction ends
  float ss = 0.0f;
  if constexpr (kVec) {
    float4* x4 = reinterpret_cast<float4*>(xi);
    for (int j = threadIdx.x; j < dim / 4; j += blockDim.x) {
      float4 v = x4[j];
      if constexpr (kAdd) {
        const float4 u = reinterpret_cast<const float4*>(yi)[j];
        v = make_float4(v.x + u.x, v.y + u.y, v.z + u.z, v.w + u.w);
        x4[j] = v;
      }
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
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
      if constexpr (kAdd) xi[j] += yi[j];
      ss += xi[j] * xi[j];
    }
    const float scale = 1.0f / sqrtf(block_sum(ss) / float(dim) + eps);
    for (int j = threadIdx.x; j < dim; j += blockDim.x) oi[j] = xi[j] * scale * w[j];
  }
}

// One block per row: cos/sin of the row's angles once in shared memory, then every head.
// Angles in double like the CPU (positions reach 10^5+ and float angles lose the phase).
__global__ void rope_neox_k(float* x, size_t row_stride, size_t head_stride, int n_heads, const int32_t* pos,
                            int n_rot, float theta) {
  pdl_wait();
  pdl_trigger();
  extern __shared__ float cs_sn[];  // cos[half] then sin[half]
  const int half = n_rot / 2;
  const double p = pos[blockIdx.x];
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const double ang = p * pow(double(theta), -2.0 * i / n_rot);
    cs_sn[i] = float(cos(ang));
    cs_sn[half + i] = float(sin(ang));
  }
  __syncthreads();
  float* xr = x + blockIdx.x * row_stride;
  for (int idx = threadIdx.x; idx < n_heads * half; idx += blockDim.x) {
    const int h = idx / half, i = idx % half;
    float* v = xr + h * head_stride;
    const float c = cs_sn[i], s = cs_sn[half + i];
    const float x0 = v[i], x1 = v[i + half];
    v[i] = x0 * c - x1 * s;
    v[i + half] = x1 * c + x0 * s;
  }
}

// Threads per block for a reduction over dim elements: a multiple of 32, at most 256.
int reduce_threads(int dim) { return std::clamp((dim + kWarp - 1) / kWarp * kWarp, kWarp, 256); }

}  // namespace

namespace {

void launch_rms_norm(float* x, const float* y, size_t x_stride, const float* w, int n, int dim, float eps, float* out,
                     size_t out_stride, cudaStream_t s) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool add = y != nullptr;
  if (dim % 4 == 0 && x_stride % 4 == 0 && out_stride % 4 == 0 && aligned(x) && aligned(w) && aligned(out) &&
      (!add || aligned(y))) {
    // The block width depends on dim only, never on n: a row's result must not depend on the batch.
    const int threads = std::clamp((dim / 4 + kWarp - 1) / kWarp * kWarp, kWarp, 1024);
    if (add) launch(rms_norm_k<true, true>, n, threads, 0, s, x, y, x_stride, w, dim, eps, out, out_stride);
    else launch(rms_norm_k<true, false>, n, threads, 0, s, x, y, x_stride, w, dim, eps, out, out_stride);
  } else {
    if (add) launch(rms_norm_k<false, true>, n, reduce_threads(dim), 0, s, x, y, x_stride, w, dim, eps, out, out_stride);
    else launch(rms_norm_k<false, false>, n, reduce_threads(dim), 0, s, x, y, x_stride, w, dim, eps, out, out_stride);
  }
}

}  // namespace

void rms_norm(const float* x, size_t x_stride, const float* w, int n, int dim, float eps, float* out,
              size_t out_stride, cudaStream_t s) {
  // Without kAdd the kernel only reads x.
  launch_rms_norm(const_cast<float*>(x), nullptr, x_stride, w, n, dim, eps, out, out_stride, s);
}

void add_rms_norm(float* x, const float* y, const float* w, int n, int dim, float eps, float* out, size_t out_stride,
                  cudaStream_t s) {
  launch_rms_norm(x, y, size_t(dim), w, n, dim, eps, out, out_stride, s);
}

void rope_neox(float* x, size_t row_stride, size_t head_stride, int rows, int n_heads, const int32_t* pos,
               int n_rot, float theta, cudaStream_t s) {
  const size_t shared = size_t(n_rot / 2) * 2 * sizeof(float);
  launch(rope_neox_k, rows, 128, shared, s, x, row_stride, head_stride, n_heads, pos, n_rot, theta);
}

}  // namespace df::cuda
