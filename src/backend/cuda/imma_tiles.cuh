// What the tiled prefill GEMMs share (imma_gemm.cu for Q4_K and Q5_K, imma_q6k_gemm.cu for Q6_K,
// imma_iq4xs_gemm.cu for IQ4_XS, imma_q80_gemm.cu for Q8_0):
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
__device__ __forceinline__ void cp_async8(uint32_t dst, const void* src, bool live) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(live ? 8 : 0));
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool live) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(live ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// The first kStages - 1 stages of a GEMM's cp.async pipeline: the weights of all of them first
// (they never change, so they may load before the previous kernel ends: pdl_wait comes after),
// then each stage's activations in its own commit group (the weights ride in group 0).
template <int kStages, class LoadW, class LoadX>
__device__ __forceinline__ void pipeline_prologue(int n_sb, LoadW& load_w, LoadX& load_x) {
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st)
    if (st < n_sb) load_w(st, st);
  pdl_wait();
  pdl_trigger();
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < n_sb) load_x(st, st);
    cp_async_commit();
  }
}

// Step sb of the main loop: waits until stage sb's copies have landed for all threads (stage
// sb - 1, which the barrier retires, is then free), and starts super-block sb + kStages - 1's
// copies into it (an empty commit group past the end, so the wait counts stay uniform).
template <int kStages, class LoadW, class LoadX>
__device__ __forceinline__ void pipeline_advance(int sb, int n_sb, LoadW& load_w, LoadX& load_x) {
  cp_async_wait<kStages - 2>();
  __syncthreads();
  const int next = sb + kStages - 1;
  if (next < n_sb) {
    load_w(next % kStages, next);
    load_x(next % kStages, next);
  }
  cp_async_commit();
}

// A thread's MT x NT mma accumulators (four each: float sums or exact int ones), zeroed.
template <class T, int MT, int NT>
__device__ __forceinline__ void zero_accumulators(T (&run)[MT][NT][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int j = 0; j < 4; ++j) run[mt][nt][j] = T(0);
}

// The GEMMs' last step: a thread's outputs, in its mma accumulators' places (output
// o_base + 16 mt + g + 8 (j / 2), activation row r_base + 8 nt + 2 c + j % 2), to y: the running
// sums, or with slots of several super-blocks (kMulti) the totals in shared memory.
template <bool kMulti, int MT, int NT>
__device__ __forceinline__ void store_gemm_outputs(const float (&run)[MT][NT][4], const float4* tot_s, int tid,
                                                   int threads, int64_t o_base, int r_base, int g, int c,
                                                   int64_t n_out, int rows, float* y, int64_t y_stride) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      float v[4] = {run[mt][nt][0], run[mt][nt][1], run[mt][nt][2], run[mt][nt][3]};
      if constexpr (kMulti) {
        const float4 tot = tot_s[(mt * NT + nt) * threads + tid];
        v[0] = tot.x, v[1] = tot.y, v[2] = tot.z, v[3] = tot.w;
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t o = o_base + 16 * mt + g + 8 * (j / 2);
        const int r = r_base + 8 * nt + 2 * c + j % 2;
        if (o < n_out && r < rows) y[int64_t(r) * y_stride + o] = v[j];
      }
    }
}

// The decode kernels' summation order, kept by the GEMMs for slots of several super-blocks: a
// thread's running slot sums run (in registers) and the totals (tot_s in shared memory, one
// float4 per thread and (mt, nt)). After super-block sb of n_sb: at a slot's end the total
// (+)= the slot's sum, in slot order (the first slot's as it is), and run restarts from 0.
template <int MT, int NT>
__device__ __forceinline__ void end_of_super_block(float (&run)[MT][NT][4], float4* tot_s, int tid, int threads,
                                                   bool& first_slot, int& left_in_slot, int per_slot, int sb,
                                                   int n_sb) {
  if (--left_in_slot == 0 || sb + 1 == n_sb) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        float4& tot = tot_s[(mt * NT + nt) * threads + tid];
        float(&r)[4] = run[mt][nt];
        tot = first_slot ? make_float4(r[0], r[1], r[2], r[3])
                         : make_float4(__fadd_rn(tot.x, r[0]), __fadd_rn(tot.y, r[1]), __fadd_rn(tot.z, r[2]),
                                       __fadd_rn(tot.w, r[3]));
#pragma unroll
        for (int j = 0; j < 4; ++j) r[j] = 0.0f;
      }
    first_slot = false;
    left_in_slot = per_slot;
  }
}

// The same segments in blocks of bm outputs (for_each_launch planned blocks of 16: fewer here).
inline Segments segments_in_blocks_of(const Segments& segs, int bm) {
  Segments t = segs;
  for (int k = 0; k < t.n; ++k) t.first_block[k + 1] = t.first_block[k] + int(ceil_div(t.n_out[k], bm));
  return t;
}

}  // namespace df::cuda
