// What the tiled prefill GEMMs share (imma_gemm.cu for Q4_K, imma_q6k_gemm.cu for Q6_K):
// asynchronous copies into shared memory, and a launch's segments re-cut into blocks of BM outputs.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/imma_common.cuh"

namespace df::cuda {

// 16 (or 4) bytes global -> shared, asynchronously; zeros when !live (src must still be mapped).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool live) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(live ? 16 : 0));
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool live) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(live ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// The same segments in blocks of bm outputs (for_each_launch planned blocks of 16: fewer here).
inline Segments segments_in_blocks_of(const Segments& segs, int bm) {
  Segments t = segs;
  for (int k = 0; k < t.n; ++k) t.first_block[k + 1] = t.first_block[k] + int(ceil_div(t.n_out[k], bm));
  return t;
}

// The device's SM count (only tile choices depend on it; 132, an H100/H200's, if unknown).
inline int sm_count() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return 132;
  return n;
}

}  // namespace df::cuda
