// The prompt GEMM for Q4_K tile weights (quant/q4k_tiles.h) on Hopper's warpgroup mma (wgmma,
// sm_90a): weights dequantized to f16 (the same f16 bits as deq_gemm.cu), f16 activations
// (to_half_rows_scaled in HalfOrder::kQ4k), fp32 sums. Routed for long prompt segments
// (CudaBackend::prompt_matmul_shared_input); tested (CudaOps.DeqWgmmaQ4kAgainstExactAndBatchInvariant)
// and timed (bench/matmul_kernels). Without sm_90a machine code (a build for sm_90 only) the
// kernel traps.
//
// Why this shape. Session 12's first version (a producer warpgroup dequantizing into shared
// memory, two consumer warpgroups running m64n256k16 on shared-memory operands) was correct but
// ran at ~28% of the f16 tensor peak, no faster than deq_gemm: one warpgroup dequantizing
// 8192 elements a slice, with its scale arithmetic, could not keep up with the mma. Here the
// dequantization is spread over the eight consumer warps and overlaps their own asynchronous
// mma: A comes from registers, which wgmma allows, and a Q4_K tile lane's 16 quant bytes of a
// slice are exactly its A fragments for the slice's four k16 steps once the activations are
// stored in the matching order of k (wgmma_layout.h fragment_k_position). The block is 256
// outputs x 128 activation rows rather than 128 x 256: per slice it copies 16 KB of activations
// and 12 KB of weights instead of 32 + 6, which matters because those copies come from L2 at
// ~25 bytes a cycle an SM, about what the tensor cores consume at this tile size.
//
// Block: 256 outputs (sixteen 16-row weight tiles) x 128 activation rows, two warpgroups
// cw = 0, 1 (256 threads; a separate producer warp would leave 168 registers a thread, as each
// SM sub-partition's 16K registers then hold three warps): outputs 128 cw .. + 127 as two m64
// tiles mt; warp q of a warpgroup takes tiles 8 cw + 4 mt + q. Per slice and m64 tile:
// dequantize the A fragments (16 registers), wgmma.fence, four m64n128k16 (A registers, B
// descriptor), commit, then wait until all but the newest group have completed (wait_group 1),
// which frees the other tile's A registers. fp32 sums: 2 x 64 registers a thread. (A variant of
// one warpgroup a block, 128 outputs, two blocks an SM: Shape below; deq_wgmma_narrow_group.)
// Scales: the four lanes of a row pair need the same four (row, sub-block) scales; lane c
// computes one of them (row g + 8 (c % 2), sub-block 2 pair + c / 2) and the others come by
// shuffle.
//
// Pipeline: kStages stages of one slice each, copied by all threads with cp.async kStages - 2
// slices ahead. Step k: wait for this thread's copies of slice k, fence.proxy.async (the copies
// are generic-proxy writes; wgmma reads through the async proxy), __syncthreads; then copy slice
// k + kStages - 2 into the stage of slice k - 2 (its mma completed before every thread's step
// k - 1 ended: the wait after its second tile's successor), and dequantize and multiply slice k.
// The mma of slice k - 1's second tile is still running across the barrier, so the tensor cores
// stay busy while the warps meet.
//
// Shared memory (the base rounded up to 1024 bytes, the 128-byte swizzle's repeat): kStages
// stages of 28 KiB: activations 128 rows x 128 bytes (wgmma_layout.h: K-major, 128-byte
// swizzle), quants 16 tiles x 512 bytes (the slice's word of each tile), headers 16 tiles x 256
// bytes. 197 KiB: one block an SM.
//
// Precision and batch invariance: deq_gemm's weights (same f16 bits), f16 activations, fp32
// sums; a row's outputs depend on its own activations and the weights only (each output column
// of a wgmma is its own dot product; k order fixed; no split-K).
#include <cuda_fp16.h>

#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/imma_common.cuh"
#include "backend/cuda/imma_tiles.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/q4k_half.cuh"
#include "backend/cuda/wgmma.cuh"
#include "backend/cuda/wgmma_layout.h"
#include "quant/q4k_tiles.h"

namespace df::cuda {

namespace {

constexpr int kBN = 128, kBK = 64;  // activation rows a block, elements per slice
constexpr int kWg = 128;            // threads of a warpgroup
constexpr int kAcc = kBN / 2;       // fp32 sums a thread per m64n128 tile
constexpr int kB = 0;               // a stage's activations (swizzled) start here
constexpr int kAtom = int(wgmma::kAtomBytes);
static_assert(kBK == int(wgmma::kRowElems), "a slice is one swizzled row");

// A block of kWgs warpgroups: 128 kWgs outputs (8 kWgs weight tiles) x kBN activation rows.
// Two warpgroups (the routed shape) share each activation tile between 256 outputs, one block
// an SM; one warpgroup fits two blocks an SM (5 stages of 22 KiB each), twice the blocks for
// prompts whose 256-output blocks fill the SMs unevenly (the same sums: each output's k16 steps
// and fragments do not depend on the block shape).
template <int kWgs>
struct Shape {
  static constexpr int kBM = 128 * kWgs, kThreads = kWg * kWgs, kTiles = kBM / kQ4kTileRows;
  static constexpr int kStages = kWgs == 2 ? 7 : 5, kAhead = kStages - 2;  // slices in the ring; copied ahead
  static constexpr int kQ = kB + kBN * int(wgmma::kRowBytes);              // quants
  static constexpr int kH = kQ + kTiles * kQ4kTileQuantStride;             // headers
  static constexpr int kStageBytes = kH + kTiles * kQ4kTileRows * 16;
  static constexpr int kSmemBytes = kStages * kStageBytes + kAtom;         // + room to align the base
  static_assert(kStageBytes % kAtom == 0, "every stage starts on the swizzle's 1024-byte repeat");
  static_assert(kSmemBytes * (3 - kWgs) <= 228 * 1024 && kSmemBytes <= 227 * 1024, "blocks an SM");
};
static_assert(Shape<1>::kAhead >= 2 && Shape<2>::kAhead >= 2 && kAcc == 64, "m64n128 sums (wgmma.cuh); copies ahead");

template <int kWgs>
__global__ void __launch_bounds__(kWg * kWgs, 3 - kWgs)
    deq_wgmma_q4k_kernel(const Segments segs, int n_sb, const __half* __restrict__ xh, const int* __restrict__ row_shift,
                         int n_in, int rows_pad, int rows) {
#ifdef DF_WGMMA
  using S = Shape<kWgs>;
  constexpr int kBM = S::kBM, kThreads = S::kThreads, kTiles = S::kTiles, kStages = S::kStages, kAhead = S::kAhead;
  constexpr int kQ = S::kQ, kH = S::kH, kStageBytes = S::kStageBytes;
  constexpr int kWarps = kThreads / kWarp;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const SwizzleBase base = swizzle_aligned(smem_raw);
  uint8_t* const smem = base.p;
  const uint32_t smem_s = base.s;
  const int tid = int(threadIdx.x), lane = tid % kWarp, warp = tid / kWarp;
  const BlockSegment bs = block_segment(segs, kBM);
  const int r0 = int(blockIdx.x) * kBN;
  const int n_slices = n_sb * 4;

  // Slice k (super-block k / 4, pair k % 4) of the block's tiles into stage st: warp w copies
  // the pair's 512-byte quant word of tiles w and w + kWarps (lane l: bytes 16 l ..), thread t
  // header chunk t % 16 of tile t / 16. Tiles past the weight's end come in as zeros.
  static_assert(kTiles == 2 * kWarps && kTiles * 16 == kThreads, "two tiles' quants a warp, one header chunk a thread");
  const size_t tile_stride = size_t(n_sb) * kQ4kTileBytes;
  const uint8_t* const w0 = bs.w + size_t(bs.o0 / kQ4kTileRows) * tile_stride;
  const int64_t live_tiles = (bs.n_out - bs.o0 + kQ4kTileRows - 1) / kQ4kTileRows;  // may exceed kTiles
  const bool q_live[2] = {warp < live_tiles, warp + kWarps < live_tiles}, h_live = tid / 16 < live_tiles;
  const uint8_t* const q_src[2] = {q_live[0] ? w0 + size_t(warp) * tile_stride + 16 * lane : bs.w,
                                   q_live[1] ? w0 + size_t(warp + kWarps) * tile_stride + 16 * lane : bs.w};
  const uint8_t* const h_src = h_live ? w0 + size_t(tid / 16) * tile_stride + kQ4kTileHeaders + 16 * (tid % 16) : bs.w;
  const uint32_t q_dst = kQ + warp * kQ4kTileQuantStride + 16 * lane, h_dst = kH + 16 * tid;
  auto load_w = [&](int k, int st) {
    const size_t at = size_t(k / 4) * kQ4kTileBytes;  // the super-block
    const uint32_t dst = smem_s + st * kStageBytes;
    const int pair = k % 4;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      cp_async16(dst + q_dst + kWarps * h * kQ4kTileQuantStride,
                 q_src[h] + (q_live[h] ? at + kQ4kTileQuantStride * pair : 0), q_live[h]);
    cp_async16(dst + h_dst, h_src + (h_live ? at : 0), h_live);
  };
  // Activations of slice k (rows past rows_pad come in as zeros).
  const ActivationCopy<kThreads, kBN> copy_x(xh, tid, r0, n_in, rows_pad);
  auto load_x = [&](int k, int st) { copy_x(k, smem_s + st * kStageBytes + kB); };

  // Weights first (immutable: they may load before the previous kernel ends), then pdl_wait
  // (also before any write of y), then the activations; one commit group a slice.
  pipeline_prologue<kAhead + 1>(n_slices, load_w, load_x);

  const int cw = warp / 4, q = warp % 4, g = lane / 4, c = lane % 4;
  float acc[2][kAcc];  // (zeroed by dequant_mma_loop)

  // The A fragments of tile t for the slice in `stage` (sub-block pair kPair), k16 step s in
  // a[s] (wgmma_layout.h: quant bytes 4 (s % 2) .. + 3, low nibbles for s < 2).
  auto dequant = [&](auto pair_c, const uint8_t* stage, int t, uint32_t (&a)[4][4]) {
    constexpr int kPair = decltype(pair_c)::value;
    const uint4 qv = *reinterpret_cast<const uint4*>(stage + kQ + t * kQ4kTileQuantStride + 16 * lane);
    __half2 sc, mn;
    q4k_pair_scale<kPair>(stage + kH + t * kQ4kTileRows * 16 + 16 * (g + 8 * (c % 2)), c / 2, sc, mn);
    uint32_t scs[2][2], mns[2][2];  // [row g / g + 8][sub-block 2 pair / + 1]
#pragma unroll
    for (int rr = 0; rr < 2; ++rr)
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        scs[rr][hi] = __shfl_sync(0xFFFFFFFFu, half2_bits(sc), (lane & ~3) | (rr + 2 * hi));
        mns[rr][hi] = __shfl_sync(0xFFFFFFFFu, half2_bits(mn), (lane & ~3) | (rr + 2 * hi));
      }
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const int hi = s / 2, shift = 4 * hi;
      const uint32_t rows_w[2] = {((s % 2 ? qv.y : qv.x) >> shift) & 0x0F0F0F0Fu,
                                  ((s % 2 ? qv.w : qv.z) >> shift) & 0x0F0F0F0Fu};
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        __half2 lo, up;
        nibbles_to_half(rows_w[rr], lo, up);
        a[s][rr] = half2_bits(__hfma2(lo, bits_half2(scs[rr][hi]), bits_half2(mns[rr][hi])));
        a[s][2 + rr] = half2_bits(__hfma2(up, bits_half2(scs[rr][hi]), bits_half2(mns[rr][hi])));
      }
    }
  };
  auto copy = [&](int k, int st) {
    load_w(k, st);
    load_x(k, st);
  };
  auto dequant_tile = [&](auto pair_c, int /*sb*/, int st, int mt, uint32_t (&a)[4][4]) {
    dequant(pair_c, smem + st * kStageBytes, 8 * cw + 4 * mt + q, a);
  };
  dequant_mma_loop<kStages, kAhead>(n_sb, smem_s + kB, kStageBytes, acc, copy, dequant_tile);
  store_sums(acc, bs, r0, rows, row_shift, cw, q, g, c);
#else
  __trap();  // no sm_90a machine code in this build
#endif
}

__global__ void deq_wgmma_probe_kernel(int* has_wgmma) {
#ifdef DF_WGMMA
  *has_wgmma = 1;
#else
  *has_wgmma = 0;
#endif
}

}  // namespace

bool deq_wgmma_runs() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess || major != 9 || minor != 0) {
    (void)cudaGetLastError();
    return false;
  }
  int* flag = nullptr;
  int host = 0;
  bool ok = cudaMalloc(reinterpret_cast<void**>(&flag), sizeof(int)) == cudaSuccess;
  if (ok) {
    deq_wgmma_probe_kernel<<<1, 1>>>(flag);
    ok = cudaMemcpy(&host, flag, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
    cudaFree(flag);
  }
  (void)cudaGetLastError();
  return ok && host == 1;
}

void deq_wgmma_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                     cudaStream_t s) {
  using S = Shape<2>;
  launch_dequant_gemm<deq_wgmma_q4k_kernel<2>, S::kBM, kBN, S::kThreads>(
      S::kSmemBytes, ws, ys, n, x, rows, scratch, s, "deq_wgmma_group", HalfOrder::kQ4k, GgmlType::Q4_K);
}

void deq_wgmma_narrow_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                            cudaStream_t s) {
  using S = Shape<1>;
  launch_dequant_gemm<deq_wgmma_q4k_kernel<1>, S::kBM, kBN, S::kThreads>(
      S::kSmemBytes, ws, ys, n, x, rows, scratch, s, "deq_wgmma_narrow_group", HalfOrder::kQ4k, GgmlType::Q4_K);
}

}  // namespace df::cuda
