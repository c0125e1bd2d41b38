// The prompt GEMM for Q4_K tile weights (quant/q4k_tiles.h) on Hopper's warpgroup mma (wgmma,
// sm_90a): what deq_gemm.cu computes (weights dequantized to f16 in shared memory, f16
// activations from to_half_rows_scaled, fp32 sums, the same f16 weight bits), with the mma
// asynchronous and its operands read from shared memory through matrix descriptors. Prototype,
// not yet run on a GPU (session 11 wrote it after the device time was spent): not routed; tested (CudaOps.DeqWgmmaQ4kAgainstExactAndBatchInvariant) and timed
// (bench/matmul_kernels). Without sm_90a machine code (a build for sm_90 only) the kernel traps.
//
// Why. deq_gemm's mma.sync m16n8k16 waits on ldmatrix results and on the mma.sync pipe (~19
// cycles per mma per scheduler, Nsight Compute, session 11). wgmma m64n256k16 reads both
// operands from shared memory itself, runs asynchronously while the issuing warps wait on
// barriers, and keeps the fp32 sums in registers: the issue slots go to one instruction per
// 64 x 256 x 16 products.
//
// Block: 128 outputs (eight 16-row weight tiles) x 256 activation rows, three warpgroups.
//   Warpgroup 0, the producer: cp.async copies of each 64-element slice (a Q4_K sub-block pair)
//     -- the tiles' quants and headers and the 256 activation rows -- kAhead = 3 slices ahead
//     of the slice it dequantizes; then it dequantizes slice k to f16 into A buffer k % 2.
//   Warpgroups 1 and 2, the consumers: outputs 0..63 and 64..127 of the block, each four
//     wgmma m64n256k16 a slice (k16 steps in order) into 128 fp32 registers a thread, one
//     commit group in flight while it waits for the next slice.
// Why a producer warpgroup rather than consumers that dequantize between their mma: the
// dequantization (8192 elements a slice, ~90 instructions a producer thread) and the copies
// then overlap the consumers' mma without taking their issue slots or their registers (128
// accumulators each), and the consumers only wait and issue.
//
// Pipeline (mbarriers in shared memory, phases by parity; no __syncthreads after the setup):
//   full[b]  (b = k % 2, 128 arrivals): the producer threads, each after its cp.async copies of
//            slice k completed (cp.async.wait_group), its dequantized stores to A buffer b, and
//            fence.proxy.async (generic-proxy writes, the cp.async data included, made visible
//            to the async proxy that wgmma reads through), arrive; consumers wait with parity
//            (k / 2) & 1 before their wgmma of slice k.
//   empty[b] (256 arrivals): each consumer thread arrives once wgmma.wait_group<1> says its mma
//            of slice k - 1 completed (completion carries an implicit async-to-generic proxy
//            fence), freeing that slice's A buffer and raw stage; the producer waits with parity
//            ((k - 2) / 2) & 1 before it copies slice k + 3 into raw stage (k + 3) % 5 (last held
//            slice k - 2) and dequantizes slice k into A buffer k % 2 (last held slice k - 2).
//   A barrier's phase cannot run two ahead of its waiter (each side needs the other's next
//   arrival first), so one parity bit names the phase.
//   Within the producer no warpgroup barrier: each warp copies and dequantizes its own two
//   tiles (w and w + 4), so __syncwarp after cp.async.wait_group orders its lanes' copies before
//   their reads, and the reads of slice k before the copies of slice k + 5 into the same stage.
//   The activation copies go to the consumers only, through full[].
//
// Shared memory (the base rounded up to 1024 bytes, the 128-byte swizzle's repeat):
//   raw stages s < 5, 38912 bytes each: activations 256 rows x 128 bytes (wgmma_layout.h: K-major,
//     128-byte swizzle, the B operand), quants 8 tiles x 512 bytes (the slice's 512-byte word of
//     each tile, in the tile order), headers 8 tiles x 256 bytes;
//   A buffers b < 2, 128 rows x 128 bytes (the same layout, the A operand; consumer c's 64 rows
//     start at 8192 c, a multiple of 1024); then the four mbarriers. 222 KiB: one block an SM.
// Layout decisions: 64-element slices make a row exactly the 128-byte swizzle's width, so one
// descriptor per operand and k16 step covers a whole 64- or 256-row operand (stride byte offset
// 1024 between 8-row groups) and the k16 steps are start addresses 32 bytes apart. The swizzle
// spreads the producer's 16-byte stores and copies over all banks: a warp's dequantized stores
// (8 rows x 4 chunks) and its quant loads (512 consecutive bytes) take 4 wavefronts each, the
// minimum for 512 bytes. Producer lane l of warp w takes the tile layout's natural unit of tile t
// (w, w + 4): the 16 quant bytes at 16 l (rows g = l / 4 and g + 8, quant bytes 8 (l % 4) .. + 7),
// which become elements 8 (l % 4) .. + 7 (low nibbles, sub-block 2 pair) and 32 + 8 (l % 4) .. + 7
// (high nibbles, sub-block 2 pair + 1) of both rows: 16-byte chunks l % 4 and 4 + l % 4.
//
// Precision and batch invariance: deq_gemm's (same f16 weights and activations, fp32 sums); a
// row's outputs depend on its own activations and the weights only (each output column of a
// wgmma is its own dot product; k order fixed: slices in order, k16 steps in order; no split-K).
#include <cuda_fp16.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/imma_common.cuh"
#include "backend/cuda/imma_tiles.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/q4k_half.cuh"
#include "backend/cuda/wgmma_layout.h"
#include "quant/q4k_tiles.h"

// wgmma exists in sm_90a machine code only.
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DF_DEQ_WGMMA 1
#endif

namespace df::cuda {

namespace {

constexpr int kBM = 128, kBN = 256, kBK = 64;  // outputs, activation rows, elements per slice
constexpr int kWg = 128;                       // threads of a warpgroup
constexpr int kThreads = 3 * kWg;              // producer, two consumers
constexpr int kTiles = kBM / kQ4kTileRows;     // weight tiles a block
constexpr int kRaw = 5;                        // raw stages (copies)
constexpr int kABufs = 2;                      // dequantized A buffers
constexpr int kAhead = kRaw - kABufs;          // slices copied ahead of the one dequantized
constexpr int kAcc = kBN / 2;                  // fp32 accumulators a consumer thread (m64n256)
static_assert(kBK == int(wgmma::kRowElems), "a slice is one swizzled row");
static_assert(kAhead + kABufs == kRaw, "slice k + kAhead's raw stage last held slice k - kABufs");
static_assert(kAcc == 128, "m64n256k16: 64 x 256 fp32 sums over 128 threads");

constexpr int kB = 0;                                          // activations, swizzled
constexpr int kQ = kB + kBN * int(wgmma::kRowBytes);           // quants
constexpr int kH = kQ + kTiles * kQ4kTileQuantStride;          // headers
constexpr int kStageBytes = kH + kTiles * kQ4kTileRows * 16;
constexpr int kA = kRaw * kStageBytes;
constexpr int kABytes = kBM * int(wgmma::kRowBytes);
constexpr int kBar = kA + kABufs * kABytes;                    // full[2], then empty[2]
constexpr int kSmemBytes = kBar + 4 * 8 + int(wgmma::kAtomBytes);  // + room to align the base
constexpr int kAtom = int(wgmma::kAtomBytes);
static_assert(kStageBytes % kAtom == 0 && kA % kAtom == 0 && kABytes % kAtom == 0 && (kBM / 2) * 128 % kAtom == 0,
              "every operand tile starts on the swizzle's 1024-byte repeat");
static_assert(kSmemBytes <= 227 * 1024, "one block an SM");

#ifdef DF_DEQ_WGMMA
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Arrive (release semantics: this thread's earlier writes happen before the phase completes).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
// Waits (acquire) until the phase of the given parity has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
// Orders this thread's generic-proxy writes to shared memory (its stores, and its cp.async copies
// once waited for) before the async-proxy reads (wgmma) of threads that synchronise with it after.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// After wgmma_wait<0>: the compiler may not move reads of the sums above the wait (they are
// registers, which the wait's "memory" clobber does not cover).
__device__ __forceinline__ void fence_accumulators(float (&d)[kAcc]) {
#pragma unroll
  for (int i = 0; i < kAcc; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d += A B^T over one k16 step: A 64 x 16 and B 256 x 16 (both K-major) from their descriptors.
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[kAcc], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127 "
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(1));
}
#endif  // DF_DEQ_WGMMA

__global__ void __launch_bounds__(kThreads, 1)
    deq_wgmma_q4k_kernel(const Segments segs, int n_sb, const __half* __restrict__ xh, const int* __restrict__ row_shift,
                         int n_in, int rows_pad, int rows) {
#ifdef DF_DEQ_WGMMA
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw_s = uint32_t(__cvta_generic_to_shared(smem_raw));
  const uint32_t pad = (uint32_t(kAtom) - raw_s % uint32_t(kAtom)) % uint32_t(kAtom);
  uint8_t* const smem = smem_raw + pad;
  const uint32_t smem_s = raw_s + pad;
  const int tid = int(threadIdx.x), wg = tid / kWg, lane = tid % kWarp;
  const uint32_t full_s = smem_s + kBar, empty_s = smem_s + kBar + 8 * kABufs;  // + 8 b: buffer b's
  const BlockSegment bs = block_segment(segs, kBM);
  const int r0 = int(blockIdx.x) * kBN;
  const int n_slices = n_sb * 4;

  if (tid == 0) {
    for (int b = 0; b < kABufs; ++b) {
      mbar_init(full_s + 8 * b, kWg);
      mbar_init(empty_s + 8 * b, 2 * kWg);
    }
  }
  __syncthreads();  // the barriers' initial state, for every thread (CTA scope: no cluster fence)

  if (wg == 0) {
    // ---- Producer ----
    const int warp = tid / kWarp;
    // Quants and headers of slice k (super-block k / 4, pair k % 4) of this warp's tiles w and
    // w + 4 into raw stage k % kRaw: lane l copies 16 quant bytes of each (the tile layout's 16 l
    // of the pair's 512-byte word) and 16-byte chunk l % 16 of the headers of tile w + 4 (l / 16).
    // Tiles past the weight's end come in as zeros.
    auto tile_src = [&](int t, int sb, bool& live) {
      live = bs.o0 + kQ4kTileRows * t < bs.n_out;
      const int64_t tile = live ? bs.o0 / kQ4kTileRows + t : 0;
      return bs.w + (size_t(tile) * size_t(n_sb) + size_t(sb)) * kQ4kTileBytes;
    };
    auto load_w = [&](int k) {
      const int sb = k / 4, pair = k % 4;
      const uint32_t dst = smem_s + (k % kRaw) * kStageBytes;
      bool live;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int t = warp + 4 * h;
        const uint8_t* src = tile_src(t, sb, live);
        cp_async16(dst + kQ + t * kQ4kTileQuantStride + 16 * lane, src + kQ4kTileQuantStride * pair + 16 * lane,
                   live);
      }
      const int t = warp + 4 * (lane / 16), ch = lane % 16;
      const uint8_t* src = tile_src(t, sb, live);
      cp_async16(dst + kH + t * kQ4kTileRows * 16 + 16 * ch, src + kQ4kTileHeaders + 16 * ch, live);
    };
    // Activations of slice k: thread t copies 16-byte chunk t % 8 (elements 8 (t % 8) .. + 7) of
    // rows t / 8 + 16 j (j < 16); rows past rows_pad come in as zeros. Row n's chunk c goes to
    // sw128_offset(n, 8 c), the same for every j (16 j rows is two whole swizzle atoms).
    const int x_row = tid / 8, x_chunk = tid % 8;
    constexpr int kXRowsPerPass = kWg / 8;
    const uint32_t x_dst = kB + wgmma::sw128_offset(uint32_t(x_row), uint32_t(8 * x_chunk));
    const __half* const x_src = xh + size_t(r0 + x_row) * size_t(n_in) + 8 * x_chunk;
    auto load_x = [&](int k) {
      const uint32_t dst = smem_s + (k % kRaw) * kStageBytes + x_dst;
#pragma unroll
      for (int j = 0; j < kBN / kXRowsPerPass; ++j) {
        const bool live = r0 + x_row + kXRowsPerPass * j < rows_pad;
        cp_async16(dst + kXRowsPerPass * j * wgmma::kRowBytes,
                   live ? x_src + size_t(kXRowsPerPass * j) * size_t(n_in) + size_t(k) * kBK : xh, live);
      }
    };
    // Slice k (raw stage k % kRaw) to f16 in A buffer k % 2, row = output 16 t + r of the block
    // (module comment: lane l's 16 quant bytes, rows g and g + 8, chunks c and 4 + c).
    const int g = lane / 4, c = lane % 4;
    auto dequant = [&](int k) {
      const int pair = k % 4;
      const uint8_t* stage = smem + (k % kRaw) * kStageBytes;
      uint8_t* const a = smem + kA + (k % kABufs) * kABytes;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int t = warp + 4 * h;
        const uint4 q = *reinterpret_cast<const uint4*>(stage + kQ + t * kQ4kTileQuantStride + 16 * lane);
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {  // tile row g + 8 hr: quant bytes 8 hr .. + 7 of the 16
          const int r = g + 8 * hr;
          const uint8_t* hdr = stage + kH + t * kQ4kTileRows * 16 + 16 * r;
          __half2 sc_lo, mn_lo, sc_hi, mn_hi;
          sub_block_scale(hdr, 2 * pair, sc_lo, mn_lo);
          sub_block_scale(hdr, 2 * pair + 1, sc_hi, mn_hi);
          const uint2 qq = hr == 0 ? make_uint2(q.x, q.y) : make_uint2(q.z, q.w);
          const uint32_t row = uint32_t(kQ4kTileRows * t + r);
          *reinterpret_cast<uint4*>(a + wgmma::sw128_offset(row, uint32_t(8 * c))) =
              q4k_eight_halves(qq, 0, sc_lo, mn_lo);
          *reinterpret_cast<uint4*>(a + wgmma::sw128_offset(row, uint32_t(32 + 8 * c))) =
              q4k_eight_halves(qq, 4, sc_hi, mn_hi);
        }
      }
    };

    // Weights first (immutable: they may load before the previous kernel ends), then the
    // activations, each slice's in its own commit group (the weights ride in group 0).
    for (int k = 0; k < kAhead; ++k)
      if (k < n_slices) load_w(k);
    pdl_wait();
    pdl_trigger();
    for (int k = 0; k < kAhead; ++k) {
      if (k < n_slices) load_x(k);
      cp_async_commit();
    }
#pragma unroll 1
    for (int k = 0; k < n_slices; ++k) {
      if (k >= kABufs) mbar_wait(empty_s + 8 * (k % kABufs), uint32_t((k - kABufs) / kABufs) & 1);
      const int next = k + kAhead;
      if (next < n_slices) {
        load_w(next);
        load_x(next);
      }
      cp_async_commit();
      cp_async_wait<kAhead>();  // this thread's copies of slice k have landed
      __syncwarp();             // ... and its warp's (the quants and headers it reads)
      dequant(k);
      fence_proxy_async();
      mbar_arrive(full_s + 8 * (k % kABufs));
    }
    return;
  }

  // ---- Consumers: warpgroup 1 takes outputs 0..63 of the block, warpgroup 2 64..127 ----
  const int cw = wg - 1;
  pdl_wait();  // (before any write of y: an earlier kernel may still read it)
  pdl_trigger();
  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
#pragma unroll 1
  for (int k = 0; k < n_slices; ++k) {
    const int b = k % kABufs;
    mbar_wait(full_s + 8 * b, uint32_t(k / kABufs) & 1);
    __syncwarp();  // (the warp converged again for the .aligned wgmma instructions)
    const uint32_t a_s = smem_s + kA + b * kABytes + cw * (kBM / 2) * wgmma::kRowBytes;
    const uint32_t b_s = smem_s + (k % kRaw) * kStageBytes + kB;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk)
      wgmma_m64n256k16(acc, wgmma::sw128_desc(a_s + wgmma::kStepBytes * kk),
                       wgmma::sw128_desc(b_s + wgmma::kStepBytes * kk));
    wgmma_commit();
    wgmma_wait<1>();  // slice k - 1's mma have completed: its buffers are free
    if (k > 0) mbar_arrive(empty_s + 8 * ((k - 1) % kABufs));
  }
  wgmma_wait<0>();
  fence_accumulators(acc);

  // Outputs: accumulator 4 i + 2 jo + jr of warp q (of the warpgroup), lane 4 g + c is output
  // 64 cw + 16 q + g + 8 jo of the block, activation row 8 i + 2 c + jr (PTX ISA, wgmma D
  // fragments), scaled back by the row's power of two (exact).
  const int q = (tid % kWg) / kWarp, g = lane / 4, c = lane % 4;
  const int64_t o_base = bs.o0 + (kBM / 2) * cw + 16 * q + g;
#pragma unroll
  for (int i = 0; i < kAcc / 4; ++i)
#pragma unroll
    for (int jr = 0; jr < 2; ++jr) {
      const int r = r0 + 8 * i + 2 * c + jr;
      if (r >= rows) continue;
      const float scale = ldexpf(1.0f, row_shift[r]);
#pragma unroll
      for (int jo = 0; jo < 2; ++jo) {
        const int64_t o = o_base + 8 * jo;
        if (o < bs.n_out) bs.y[int64_t(r) * bs.y_stride + o] = acc[4 * i + 2 * jo + jr] * scale;
      }
    }
#else
  __trap();  // no sm_90a machine code in this build
#endif
}

}  // namespace

void deq_wgmma_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                     cudaStream_t s) {
  if (n == 0 || rows == 0) return;
  const HalfOperands h = half_operands(ws, n, x, rows, scratch, s, "deq_wgmma_group");
  (void)raise_smem_limit<deq_wgmma_q4k_kernel>(kSmemBytes, /*carveout_max=*/true);
  for_each_launch(ws, ys, n, [&](const Segments& segs) {
    const Segments t = segments_in_blocks_of(segs, kBM);
    launch(deq_wgmma_q4k_kernel, dim3(ceil_div(rows, kBN), unsigned(t.first_block[t.n])), dim3(kThreads),
           kSmemBytes, s, t, int(h.n_in / kSb), h.xh, h.shift, int(h.n_in), h.rows_pad, rows);
  });
}

}  // namespace df::cuda
