// argmax_rows in two kernels (layout and merge rule: argmax_split.h):
//   1. argmax_chunk_k: one block per (chunk, row) scans its contiguous chunk in tiles, each
//      thread issuing kPer coalesced loads at once, and leaves the chunk's pick in the scratch;
//   2. argmax_merge_k: one block per row merges the row's picks into its id.
// A 248,320-entry row (~1 MB) was one 1024-thread block of ~243 dependent strided loads per
// thread (43 us on the H200); split, 122 blocks of 256 threads read it with 8 loads in flight
// each. beats() is a strict total order, so every merge order gives the CPU scan's choice.
#include "backend/cuda/argmax_split.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace df::cuda {

namespace {

using argmax_split::beats;
using argmax_split::kMaxParts;
using argmax_split::kPer;
using argmax_split::kThreads;
using argmax_split::kTile;
using argmax_split::no_pick;
using argmax_split::Pick;

__device__ __forceinline__ void warp_best(Pick& b) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, b.v, o);
    const int i = __shfl_xor_sync(0xffffffffu, b.i, o);
    if (beats(v, i, b)) b = Pick{v, i};
  }
}

// The block's best pick, in thread 0 (all threads call it; blockDim.x a multiple of 32).
__device__ __forceinline__ Pick block_best(Pick b) {
  __shared__ Pick part[32];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  warp_best(b);
  if (lane == 0) part[warp] = b;
  __syncthreads();
  b = lane < int(blockDim.x / kWarp) ? part[lane] : no_pick();
  if (warp == 0) warp_best(b);
  return b;
}

// Block (c, y): chunk c of rows y, y + gridDim.y, ...
__global__ void __launch_bounds__(kThreads) argmax_chunk_k(const float* __restrict__ x, int rows, int n, size_t stride,
                                                           int chunk, Pick* __restrict__ picks) {
  pdl_wait();
  pdl_trigger();
  const int64_t lo = int64_t(blockIdx.x) * chunk;
  const int64_t hi = lo + chunk < n ? lo + chunk : int64_t(n);
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {  // block-uniform
    const float* row = x + size_t(r) * stride;
    Pick b = no_pick();
    for (int64_t base = lo; base < hi; base += kTile) {
      float v[kPer];
#pragma unroll
      for (int j = 0; j < kPer; ++j) {  // all loads first, so they are in flight together
        const int64_t i = base + j * kThreads + threadIdx.x;
        v[j] = i < hi ? row[i] : __int_as_float(0x7fc00000);  // NaN: never picked
      }
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int i = int(base + j * kThreads + threadIdx.x);  // < INT_MAX where v[j] is a number
        if (beats(v[j], i, b)) b = Pick{v[j], i};
      }
    }
    b = block_best(b);
    if (threadIdx.x == 0) picks[size_t(r) * kMaxParts + blockIdx.x] = b;
    __syncthreads();  // block_best's shared part[] is read before the next row's call rewrites it
  }
}

// One block of kMaxParts threads per row: thread p takes pick p of its row.
__global__ void __launch_bounds__(kMaxParts) argmax_merge_k(const Pick* __restrict__ picks, int n_parts,
                                                            int32_t* __restrict__ out) {
  pdl_wait();
  pdl_trigger();
  const Pick b = block_best(int(threadIdx.x) < n_parts ? picks[size_t(blockIdx.x) * kMaxParts + threadIdx.x] : no_pick());
  if (threadIdx.x == 0) out[blockIdx.x] = b.i == INT_MAX ? 0 : b.i;
}

}  // namespace

size_t argmax_scratch_bytes(int rows) { return argmax_split::scratch_bytes(rows); }

void argmax_rows(const float* x, int rows, int n, size_t stride, void* scratch, int32_t* out, cudaStream_t s) {
  static_assert(kMaxParts % kWarp == 0 && kThreads % kWarp == 0, "whole warps");
  int32_t* ids = out != nullptr ? out : static_cast<int32_t*>(scratch);
  auto* picks = reinterpret_cast<Pick*>(static_cast<char*>(scratch) + argmax_split::picks_offset(rows));
  const int chunk = argmax_split::chunk(n), n_parts = argmax_split::parts(n);
  const dim3 grid(unsigned(n_parts), unsigned(rows < 65535 ? rows : 65535));
  launch(argmax_chunk_k, grid, kThreads, 0, s, x, rows, n, stride, chunk, picks);
  launch(argmax_merge_k, unsigned(rows), kMaxParts, 0, s, picks, n_parts, ids);
}

}  // namespace df::cuda
