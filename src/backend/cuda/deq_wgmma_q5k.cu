// The prompt GEMM for Q5_K tile weights (quant/q5k_tiles.h) on Hopper's warpgroup mma (wgmma,
// sm_90a), deq_wgmma.cu's design for Q4_K applied to Q5_K: weights dequantized to f16 straight
// into the register A fragments, f16 activations (to_half_rows_scaled in HalfOrder::kQ4k), fp32
// sums. Tested (CudaOps.DeqWgmmaQ5kAgainstExactAndBatchInvariant) and timed
// (bench/matmul_kernels); routed for long prompt segments (CudaBackend::prompt_matmul_shared_input).
// Without sm_90a machine code the kernel traps.
//
// Precision: Q4_K's weight formula with 5-bit quants, w = fma(v, half(d sc), half(-dmin m)), v
// 0..31 (exact in f16), the header Q4_K's (q4k_half.cuh q4k_pair_scale): three roundings of at
// most 2^-11 of the sub-block's range 31 d sc + dmin m.
//
// Order of k (wgmma_tile_values.h): a Q5_K tile keeps Q4_K's byte placement (byte 8h + k of a
// lane's 16 bytes of a pair: element 8c + k of the low sub-block in bits 0-4, the high one's
// bits 2-4 in bits 5-7, its bits 0-1 in the pair's 128-byte high-bit word), so k16 step s takes
// the bytes 4 (s % 2) .. + 3 of each row as the Q4_K kernel does and the activations keep Q4_K's
// order. Per fragment register pair: the low sub-block's values are one AND (bytes v, PRMT to the
// f16 1024 + v), the high one's a shift and a LOP3 (bytes 8 v, PRMT to the f16 128 + v); then,
// per register, a subtract and the fused multiply-add.
//
// Block and pipeline: deq_wgmma.cu's (256 outputs, sixteen 16-row tiles, x 128 activation rows;
// two warpgroups cw, each two m64 tiles mt, warp q of cw taking weight tile 8 cw + 4 mt + q; a
// kStages-slice cp.async ring copied kStages - 2 slices ahead; dequant_mma_loop, store_sums;
// scales shared by shuffles as there).
//
// Shared memory (the base rounded up to 1024 bytes): kStages stages of 30 KiB: activations 128
// rows x 128 bytes (K-major, 128-byte swizzle), the slice's quant word of each tile (16 x 512
// bytes), each tile's 16 headers (16 x 256 bytes, as deq_wgmma.cu) and the slice's high-bit word
// of each tile (16 x 128 bytes). The high bits travel with their slice: each of a super-block's
// four 128-byte words is read by one slice only, so copying it with that slice moves each byte
// once, as a per-super-block ring (deq_wgmma_q6k.cu's, for qh words that two slices share) would,
// without a second ring. 30 KB a slice from L2 (Q4_K's 28). 211 KiB: one block an SM.
//
// Batch invariance: a row's outputs depend on its own activations and the weights only (each
// output column of a wgmma is its own dot product; k order fixed; no split-K).
#include <cuda_fp16.h>

#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/imma_common.cuh"
#include "backend/cuda/imma_tiles.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/q4k_half.cuh"
#include "backend/cuda/wgmma.cuh"
#include "backend/cuda/wgmma_layout.h"
#include "backend/cuda/wgmma_tile_values.h"
#include "quant/q4k_tiles.h"
#include "quant/q5k_tiles.h"

namespace df::cuda {

namespace {

constexpr int kBM = 256, kBN = 128, kBK = 64;  // outputs, activation rows, elements per slice
constexpr int kWg = 128;                       // threads of a warpgroup
constexpr int kThreads = 2 * kWg, kWarps = kThreads / kWarp;
constexpr int kTiles = kBM / kQ4kTileRows;     // weight tiles a block
constexpr int kStages = 7, kAhead = kStages - 2;  // slices in the ring; slices copied ahead
constexpr int kAcc = kBN / 2;                  // fp32 sums a thread per m64n128 tile
constexpr int kHdrTile = kQ4kTileRows * 16;    // a tile's 16 row headers
constexpr int kHighTile = 128;                 // a tile's high-bit word of a pair: 4 bytes a lane
static_assert(kBK == int(wgmma::kRowElems), "a slice is one swizzled row");
static_assert(kAcc == 64, "m64n128: 64 fp32 sums a thread (wgmma.cuh)");
static_assert(kTiles == 2 * kWarps && kTiles * kHdrTile / 16 == kThreads, "two tiles' quants a warp, one header chunk a thread");
static_assert(kQ5kTileHighBits + 4 * kHighTile == kQ5kTileBytes && kTiles * kHighTile / 16 <= kThreads,
              "four high-bit words a super-block; one 16-byte chunk a thread at most");

constexpr int kB = 0;                                  // activations, swizzled
constexpr int kQ = kB + kBN * int(wgmma::kRowBytes);   // quant words
constexpr int kH = kQ + kTiles * kQ4kTileQuantStride;  // headers
constexpr int kF = kH + kTiles * kHdrTile;             // high-bit words
constexpr int kStageBytes = kF + kTiles * kHighTile;
constexpr int kAtom = int(wgmma::kAtomBytes);
constexpr int kSmemBytes = kStages * kStageBytes + kAtom;  // + room to align the base
static_assert(kStageBytes % kAtom == 0, "every stage starts on the swizzle's 1024-byte repeat");
static_assert(kSmemBytes <= 227 * 1024, "one block an SM");

__global__ void __launch_bounds__(kThreads, 1)
    deq_wgmma_q5k_kernel(const Segments segs, int n_sb, const __half* __restrict__ xh,
                         const int* __restrict__ row_shift, int n_in, int rows_pad, int rows) {
#ifdef DF_WGMMA
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const SwizzleBase base = swizzle_aligned(smem_raw);
  uint8_t* const smem = base.p;
  const uint32_t smem_s = base.s;
  const int tid = int(threadIdx.x), lane = tid % kWarp, warp = tid / kWarp;
  const BlockSegment bs = block_segment(segs, kBM);
  const int r0 = int(blockIdx.x) * kBN;
  const int n_slices = n_sb * 4;

  // Weights of slice k (super-block k / 4, pair k % 4) into stage st: warp w copies the pair's
  // 512-byte quant word of tiles w and w + 8 (lane l: bytes 16 l ..), thread t header chunk
  // t % 16 of tile t / 16 and, for t < 128, chunk t % 8 of tile t / 8's high-bit word of the
  // pair. Tiles past the weight's end come in as zeros.
  const size_t tile_stride = size_t(n_sb) * kQ5kTileBytes;
  const uint8_t* const w0 = bs.w + size_t(bs.o0 / kQ4kTileRows) * tile_stride;
  const int64_t live_tiles = (bs.n_out - bs.o0 + kQ4kTileRows - 1) / kQ4kTileRows;  // may exceed kTiles
  const bool q_live[2] = {warp < live_tiles, warp + kWarps < live_tiles}, h_live = tid / 16 < live_tiles;
  const uint8_t* const q_src[2] = {q_live[0] ? w0 + size_t(warp) * tile_stride + 16 * lane : bs.w,
                                   q_live[1] ? w0 + size_t(warp + kWarps) * tile_stride + 16 * lane : bs.w};
  const uint8_t* const h_src = h_live ? w0 + size_t(tid / 16) * tile_stride + kQ4kTileHeaders + 16 * (tid % 16) : bs.w;
  constexpr int kHighChunks = kTiles * kHighTile / 16;
  const bool f_copy = tid < kHighChunks, f_live = f_copy && tid / 8 < live_tiles;
  const uint8_t* const f_src = f_live ? w0 + size_t(tid / 8) * tile_stride + kQ5kTileHighBits + 16 * (tid % 8) : bs.w;
  const uint32_t q_dst = kQ + warp * kQ4kTileQuantStride + 16 * lane, h_dst = kH + 16 * tid, f_dst = kF + 16 * tid;
  auto load_w = [&](int k, int st) {
    const size_t at = size_t(k / 4) * kQ5kTileBytes;  // the super-block
    const uint32_t dst = smem_s + st * kStageBytes;
    const int pair = k % 4;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      cp_async16(dst + q_dst + kWarps * h * kQ4kTileQuantStride,
                 q_src[h] + (q_live[h] ? at + kQ4kTileQuantStride * pair : 0), q_live[h]);
    cp_async16(dst + h_dst, h_src + (h_live ? at : 0), h_live);
    if (f_copy) cp_async16(dst + f_dst, f_src + (f_live ? at + kHighTile * pair : 0), f_live);
  };
  const ActivationCopy<kThreads, kBN> load_x(xh, tid, r0, n_in, rows_pad);
  auto copy = [&](int k, int st) {
    load_w(k, st);
    load_x(k, smem_s + st * kStageBytes + kB);
  };
  auto load_x_stage = [&](int k, int st) { load_x(k, smem_s + st * kStageBytes + kB); };

  // Weights first (immutable: they may load before the previous kernel ends), then pdl_wait
  // (also before any write of y), then the activations; one commit group a slice.
  pipeline_prologue<kAhead + 1>(n_slices, load_w, load_x_stage);

  const int cw = warp / 4, q = warp % 4, g = lane / 4, c = lane % 4;
  float acc[2][kAcc];  // (zeroed by dequant_mma_loop)

  // The A fragments of tile t for the slice in `stage` (sub-block pair kPair), k16 step s in
  // a[s] (wgmma_tile_values.h: bytes 4 (s % 2) .. + 3 of row rr, word w = 2 rr + s % 2; the low
  // sub-block's values for s < 2, the high one's after).
  auto dequant = [&](auto pair_c, const uint8_t* stage, int t, uint32_t (&a)[4][4]) {
    constexpr int kPair = decltype(pair_c)::value;
    const uint4 qv = *reinterpret_cast<const uint4*>(stage + kQ + t * kQ4kTileQuantStride + 16 * lane);
    const uint32_t f = *reinterpret_cast<const uint32_t*>(stage + kF + t * kHighTile + 4 * lane);
    __half2 sc, mn;
    q4k_pair_scale<kPair>(stage + kH + t * kHdrTile + 16 * (g + 8 * (c % 2)), c / 2, sc, mn);
    uint32_t scs[2][2], mns[2][2];  // [row g / g + 8][sub-block 2 pair / + 1]
#pragma unroll
    for (int rr = 0; rr < 2; ++rr)
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        scs[rr][hi] = __shfl_sync(0xFFFFFFFFu, half2_bits(sc), (lane & ~3) | (rr + 2 * hi));
        mns[rr][hi] = __shfl_sync(0xFFFFFFFFu, half2_bits(mn), (lane & ~3) | (rr + 2 * hi));
      }
    const uint32_t words[4] = {qv.x, qv.y, qv.z, qv.w};
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const int hi = s / 2;
      const uint32_t high = wgmma::q5k_step_high_byte(s);
      const __half2 off = __half2half2(__ushort_as_half(wgmma::q5k_step_offset_bits(s)));
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int w = 2 * rr + s % 2;
        const uint32_t v = wgmma::q5k_step_bytes(words[w], f, s, w);
        const __half2 lo = __hsub2(bits_half2(__byte_perm(v, high, 0x4140)), off);
        const __half2 up = __hsub2(bits_half2(__byte_perm(v, high, 0x4342)), off);
        a[s][rr] = half2_bits(__hfma2(lo, bits_half2(scs[rr][hi]), bits_half2(mns[rr][hi])));
        a[s][2 + rr] = half2_bits(__hfma2(up, bits_half2(scs[rr][hi]), bits_half2(mns[rr][hi])));
      }
    }
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

}  // namespace

bool deq_wgmma_q5k_supports(const Weight& w) { return w.type == GgmlType::Q5_K && w.tiles && w.n_in % kSb == 0; }

void deq_wgmma_q5k_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                         cudaStream_t s) {
  launch_dequant_gemm<deq_wgmma_q5k_kernel, kBM, kBN, kThreads>(kSmemBytes, ws, ys, n, x, rows, scratch, s,
                                                                "deq_wgmma_q5k_group", HalfOrder::kQ4k, GgmlType::Q5_K);
}

}  // namespace df::cuda
