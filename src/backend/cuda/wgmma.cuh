// The PTX of Hopper's warpgroup mma that the wgmma GEMMs share (deq_wgmma.cu,
// deq_wgmma_q6k.cu, deq_wgmma_iq4xs.cu, deq_wgmma_q5k.cu): fences, commit and wait, and
// m64n128k16 with A from registers; and their pipeline's k loop, epilogue and activation copies. wgmma exists
// in sm_90a machine code only: DF_WGMMA is defined there, and the kernels trap without it.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/imma_common.cuh"
#include "backend/cuda/imma_tiles.cuh"
#include "backend/cuda/q4k_half.cuh"
#include "backend/cuda/wgmma_layout.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DF_WGMMA 1
#endif

namespace df::cuda {

// The activations' copies of a block of kThreads threads and kRows rows (from row r0 of the f16
// scratch, n_in a row): slice k's 64 elements of each row into a stage's swizzled tile
// (wgmma_layout.h). Thread t copies 16-byte chunk t % 8 (positions 8 (t % 8) .. + 7) of rows
// t / 8 + (kThreads / 8) j; rows past rows_pad come in as zeros.
template <int kThreads, int kRows>
struct ActivationCopy {
  static constexpr int kRowsPerPass = kThreads / 8, kPasses = kRows / kRowsPerPass;
  static_assert(kPasses * kRowsPerPass == kRows, "whole passes");
  const __half* xh;
  const __half* src;
  size_t step;
  uint32_t dst[kPasses];
  bool live[kPasses];
  __device__ __forceinline__ ActivationCopy(const __half* xh_, int tid, int r0, int n_in, int rows_pad) : xh(xh_) {
    const int row = tid / 8, chunk = tid % 8;
    src = xh + size_t(r0 + row) * size_t(n_in) + 8 * chunk;
    step = size_t(kRowsPerPass) * size_t(n_in);
#pragma unroll
    for (int j = 0; j < kPasses; ++j) {
      dst[j] = wgmma::sw128_offset(uint32_t(row + kRowsPerPass * j), uint32_t(8 * chunk));
      live[j] = r0 + row + kRowsPerPass * j < rows_pad;
    }
  }
  // Slice k into the tile at shared address tile_s (1024-byte aligned).
  __device__ __forceinline__ void operator()(int k, uint32_t tile_s) const {
    const __half* s = src + size_t(k) * wgmma::kRowElems;
#pragma unroll
    for (int j = 0; j < kPasses; ++j) cp_async16(tile_s + dst[j], live[j] ? s + j * step : xh, live[j]);
  }
};

#ifdef DF_WGMMA
// Orders this thread's generic-proxy writes to shared memory (its cp.async copies once waited
// for) before the async-proxy reads (wgmma) of threads that synchronise with it after.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// After wgmma_wait<0>: the compiler may not move reads of the sums above the wait (they are
// registers, which the wait's "memory" clobber does not cover).
template <int kN>
__device__ __forceinline__ void fence_accumulators(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d += A B^T over one k16 step: A 64 x 16 from the warpgroup's registers (a: this thread's
// fragment), B 128 x 16 K-major from its descriptor; d: this thread's 64 fp32 sums.
__device__ __forceinline__ void wgmma_m64n128k16_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63 "
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
}

// The dynamic shared memory at raw rounded up to the 128-byte swizzle's 1024-byte repeat (the
// kernels ask for that much more): its generic pointer and its shared-window address.
struct SwizzleBase {
  uint8_t* p;
  uint32_t s;
};
__device__ __forceinline__ SwizzleBase swizzle_aligned(uint8_t* raw) {
  const uint32_t raw_s = uint32_t(__cvta_generic_to_shared(raw));
  const uint32_t pad = (wgmma::kAtomBytes - raw_s % wgmma::kAtomBytes) % wgmma::kAtomBytes;
  return {raw + pad, raw_s + pad};
}

// One m64 tile's four k16 steps of a slice: A from the registers just dequantized into a (one
// fragment a step), B from the slice's activations at shared address b_s; one commit group.
__device__ __forceinline__ void mma_tile(float (&d)[64], const uint32_t (&a)[4][4], uint32_t b_s) {
  wgmma_fence();  // the A registers (and, the first time, the zeroed sums) were just written
#pragma unroll
  for (int s = 0; s < 4; ++s) wgmma_m64n128k16_rs(d, a[s], wgmma::sw128_desc(b_s + wgmma::kStepBytes * s));
  wgmma_commit();
}

// The k loop of the dequantizing GEMMs, a super-block's four 64-element slices at a time (the
// slice's index in it a compile-time constant). Step k: wait for this thread's copies of slice
// k, fence.proxy.async (cp.async writes are generic-proxy; wgmma reads through the async proxy),
// __syncthreads (everyone's copies landed, and every thread's step k - 1 ended, so slice k - 2's
// mma completed); copy(k + kAhead, its stage), into the stage slice k - 2 held; then per m64
// tile mt: dequant(slice, sb, stage, mt, a) and its mma, waiting until only the newest group is
// in flight before the other tile's A registers are rewritten. The stage holding slice k's
// activations starts at b0_s + stage * stage_bytes. Zeroes acc first; ends with every mma
// completed.
template <int kStages, int kAhead, class Copy, class Dequant>
__device__ __forceinline__ void dequant_mma_loop(int n_sb, uint32_t b0_s, int stage_bytes, float (&acc)[2][64],
                                                 Copy& copy, Dequant& dequant) {
  static_assert(kAhead <= kStages - 2, "a stage is rewritten only after the mma that read it completed");
  const int n_slices = 4 * n_sb;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[mt][i] = 0.0f;
  uint32_t a0[4][4], a1[4][4];
  int st = 0;
  auto step = [&](auto slice_c, int sb, int k) {
    cp_async_wait<kAhead - 1>();
    fence_proxy_async();
    __syncthreads();
    if (k + kAhead < n_slices) copy(k + kAhead, st + kAhead < kStages ? st + kAhead : st + kAhead - kStages);
    cp_async_commit();  // (empty past the end: the wait counts stay uniform)
    const uint32_t b_s = b0_s + uint32_t(st * stage_bytes);
    dequant(slice_c, sb, st, 0, a0);
    mma_tile(acc[0], a0, b_s);
    wgmma_wait<1>();  // slice k - 1's second tile has completed: a1 is free
    dequant(slice_c, sb, st, 1, a1);
    mma_tile(acc[1], a1, b_s);
    wgmma_wait<1>();  // this slice's first tile has completed: a0 is free
    st = st + 1 < kStages ? st + 1 : 0;
  };
#pragma unroll 1
  for (int sb = 0; sb < n_sb; ++sb) {
    step(std::integral_constant<int, 0>{}, sb, 4 * sb);
    step(std::integral_constant<int, 1>{}, sb, 4 * sb + 1);
    step(std::integral_constant<int, 2>{}, sb, 4 * sb + 2);
    step(std::integral_constant<int, 3>{}, sb, 4 * sb + 3);
  }
  wgmma_wait<0>();
  fence_accumulators(acc[0]);
  fence_accumulators(acc[1]);
}

// The epilogue of the GEMMs' blocks (two warpgroups cw, each two m64n128 tiles mt): after
// wgmma_wait<0> and fence_accumulators, sum 4 i + 2 jo + jr of tile mt, lane 4 g + c of warp q is
// output 128 cw + 64 mt + 16 q + g + 8 jo of the block, activation row r0 + 8 i + 2 c + jr (PTX
// ISA, wgmma D fragments), scaled back by the row's power of two (exact).
__device__ __forceinline__ void store_sums(const float (&acc)[2][64], const BlockSegment& bs, int r0, int rows,
                                           const int* __restrict__ row_shift, int cw, int q, int g, int c) {
#pragma unroll
  for (int i = 0; i < 16; ++i)
#pragma unroll
    for (int jr = 0; jr < 2; ++jr) {
      const int r = r0 + 8 * i + 2 * c + jr;
      if (r >= rows) continue;
      const float scale = ldexpf(1.0f, row_shift[r]);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int jo = 0; jo < 2; ++jo) {
          const int64_t o = bs.o0 + 128 * cw + 64 * mt + 16 * q + g + 8 * jo;
          if (o < bs.n_out) bs.y[int64_t(r) * bs.y_stride + o] = acc[mt][4 * i + 2 * jo + jr] * scale;
        }
    }
}
#endif  // DF_WGMMA

// The host side of every dequantizing wgmma GEMM: the weights checked and x converted into the
// scratch (half_operands, `order`), then per run of segments one launch of kKernel: blocks of
// kBM outputs x kBN activation rows, kThreads threads, smem_bytes of dynamic shared memory.
template <auto kKernel, int kBM, int kBN, int kThreads>
void launch_dequant_gemm(int smem_bytes, const Weight* const* ws, float* const* ys, int n, const float* x, int rows,
                         void* scratch, cudaStream_t s, const char* what, HalfOrder order, GgmlType type) {
  if (n == 0 || rows == 0) return;
  const HalfOperands h = half_operands(ws, n, x, rows, scratch, s, what, order, type);
  (void)raise_smem_limit<kKernel>(smem_bytes, /*carveout_max=*/true);
  for_each_launch(ws, ys, n, [&](const Segments& segs) {
    const Segments t = segments_in_blocks_of(segs, kBM);
    launch(kKernel, dim3(ceil_div(rows, kBN), unsigned(t.first_block[t.n])), dim3(kThreads), smem_bytes, s, t,
           int(h.n_in / kSb), h.xh, h.shift, int(h.n_in), h.rows_pad, rows);
  });
}

}  // namespace df::cuda
