// The prompt GEMM for IQ4_XS tile weights (quant/iq4xs_tiles.h) on Hopper's warpgroup mma
// (wgmma, sm_90a), deq_wgmma.cu's design for Q4_K applied to IQ4_XS: weights dequantized to f16
// straight into the register A fragments, f16 activations (to_half_rows_scaled in
// HalfOrder::kQ4k), fp32 sums. Tested (CudaOps.DeqWgmmaIq4xsAgainstExactAndBatchInvariant) and
// timed (bench/matmul_kernels); routed for long prompt segments
// (CudaBackend::prompt_matmul_shared_input). Without sm_90a machine code the kernel traps.
//
// Precision. w = half(d (ls - 32)) v: d (ls - 32) (f16 times a 6-bit integer, exact in fp32)
// rounded to f16 once per 32-element sub-block, v the code-book value (-127 .. 113, exact in
// f16), then one f16 multiply: two roundings of at most 2^-11 relative (plus f16's subnormal
// half-spacing 2^-25 in each, the first times up to 127).
//
// Order of k (wgmma_tile_values.h). An IQ4_XS tile lane holds the same elements of a slice as
// a Q4_K tile lane, in another byte placement: word 2p + h of its 16 bytes is sub-block p of the
// slice's pair for row g + 8h, element 8c + i in nibble i. k16 step s takes nibbles 4 (s % 2) ..
// + 3 of word 2 (s / 2) + rr for row rr, which are the elements Q4_K's step s takes, so the
// activations keep Q4_K's order. A word's eight nibbles become code-book bytes (+128) by PRMT
// lookups (wgmma_tile_values.h iq4xs_biased_values), then per fragment register: PRMT to the
// f16 1024 + b, subtract 1152, multiply by the row's sub-block scale.
//
// Block and pipeline: deq_wgmma.cu's (256 outputs, sixteen 16-row tiles, x 128 activation rows;
// two warpgroups cw, each two m64 tiles mt, warp q of cw taking weight tile 8 cw + 4 mt + q; a
// kStages-slice cp.async ring copied kStages - 2 slices ahead; dequant_mma_loop, store_sums).
// Scales: lane c of a row pair forms the scale of row g + 8 (c % 2), sub-block 2 pair + c / 2, and
// the others come by shuffle.
//
// Shared memory (the base rounded up to 1024 bytes): kStages stages of 26 KiB: activations 128
// rows x 128 bytes (K-major, 128-byte swizzle), the slice's quant word of each tile (16 x 512
// bytes), and each tile's 16 row headers (16 x 128 bytes; a super-block's, copied with each of
// its slices as deq_wgmma.cu does with Q4_K's 256). 183 KiB: one block an SM.
//
// Batch invariance: a row's outputs depend on its own activations and the weights only (each
// output column of a wgmma is its own dot product; k order fixed; no split-K).
#include <cuda_fp16.h>

#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/imma_common.cuh"
#include "backend/cuda/imma_tiles.cuh"
#include "backend/cuda/iq4xs_operands.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/q4k_half.cuh"
#include "backend/cuda/wgmma.cuh"
#include "backend/cuda/wgmma_layout.h"
#include "backend/cuda/wgmma_tile_values.h"
#include "quant/iq4xs_tiles.h"

namespace df::cuda {

namespace {

constexpr int kBM = 256, kBN = 128, kBK = 64;  // outputs, activation rows, elements per slice
constexpr int kWg = 128;                       // threads of a warpgroup
constexpr int kThreads = 2 * kWg, kWarps = kThreads / kWarp;
constexpr int kTiles = kBM / kIq4xsTileRows;   // weight tiles a block
constexpr int kStages = 7, kAhead = kStages - 2;  // slices in the ring; slices copied ahead
constexpr int kAcc = kBN / 2;                  // fp32 sums a thread per m64n128 tile
constexpr int kHdrTile = kIq4xsTileBytes - kIq4xsTileHeaders;  // a tile's 16 row headers: 128 bytes
static_assert(kBK == int(wgmma::kRowElems), "a slice is one swizzled row");
static_assert(kAcc == 64, "m64n128: 64 fp32 sums a thread (wgmma.cuh)");
static_assert(kTiles == 2 * kWarps, "two tiles' quants a warp");
static_assert(kHdrTile == 16 * 8 && kTiles * kHdrTile / 16 <= kThreads, "one 16-byte header chunk a thread at most");

constexpr int kB = 0;                                    // activations, swizzled
constexpr int kQ = kB + kBN * int(wgmma::kRowBytes);     // quant words
constexpr int kH = kQ + kTiles * kIq4xsTileQuantStride;  // headers
constexpr int kStageBytes = kH + kTiles * kHdrTile;
constexpr int kAtom = int(wgmma::kAtomBytes);
constexpr int kSmemBytes = kStages * kStageBytes + kAtom;  // + room to align the base
static_assert(kStageBytes % kAtom == 0, "every stage starts on the swizzle's 1024-byte repeat");
static_assert(kSmemBytes <= 227 * 1024, "one block an SM");

__global__ void __launch_bounds__(kThreads, 1)
    deq_wgmma_iq4xs_kernel(const Segments segs, int n_sb, const __half* __restrict__ xh,
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
  // 512-byte quant word of tiles w and w + 8 (lane l: bytes 16 l ..), thread t < 128 header
  // chunk t % 8 of tile t / 8. Tiles past the weight's end come in as zeros.
  const size_t tile_stride = size_t(n_sb) * kIq4xsTileBytes;
  const uint8_t* const w0 = bs.w + size_t(bs.o0 / kIq4xsTileRows) * tile_stride;
  const int64_t live_tiles = (bs.n_out - bs.o0 + kIq4xsTileRows - 1) / kIq4xsTileRows;  // may exceed kTiles
  const bool q_live[2] = {warp < live_tiles, warp + kWarps < live_tiles};
  const uint8_t* const q_src[2] = {q_live[0] ? w0 + size_t(warp) * tile_stride + 16 * lane : bs.w,
                                   q_live[1] ? w0 + size_t(warp + kWarps) * tile_stride + 16 * lane : bs.w};
  constexpr int kHdrChunks = kTiles * kHdrTile / 16;
  const bool h_copy = tid < kHdrChunks, h_live = h_copy && tid / 8 < live_tiles;
  const uint8_t* const h_src = h_live ? w0 + size_t(tid / 8) * tile_stride + kIq4xsTileHeaders + 16 * (tid % 8) : bs.w;
  const uint32_t q_dst = kQ + warp * kIq4xsTileQuantStride + 16 * lane, h_dst = kH + 16 * tid;
  auto load_w = [&](int k, int st) {
    const size_t at = size_t(k / 4) * kIq4xsTileBytes;  // the super-block
    const uint32_t dst = smem_s + st * kStageBytes;
    const int pair = k % 4;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      cp_async16(dst + q_dst + kWarps * h * kIq4xsTileQuantStride,
                 q_src[h] + (q_live[h] ? at + kIq4xsTileQuantStride * pair : 0), q_live[h]);
    if (h_copy) cp_async16(dst + h_dst, h_src + (h_live ? at : 0), h_live);
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
  // a[s]: word 2 (s / 2) + rr of the lane's 16 bytes, nibbles 4 (s % 2) .. + 3 (bytes 0, 1 of
  // their code-book values to register rr, 2, 3 to register 2 + rr).
  auto dequant = [&](auto pair_c, const uint8_t* stage, int t, uint32_t (&a)[4][4]) {
    constexpr int kPair = decltype(pair_c)::value;
    const uint4 qv = *reinterpret_cast<const uint4*>(stage + kQ + t * kIq4xsTileQuantStride + 16 * lane);
    // This lane's scale: row g + 8 (c % 2), sub-block 2 kPair + c / 2 (header words x, y).
    const uint2 hw = *reinterpret_cast<const uint2*>(stage + kH + t * kHdrTile + 16 * g + 8 * (c % 2));
    const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(iq4xs::d_bits(hw.x, hw.y) & 0xFFFF)));
    const int ls = iq4xs::scale_at(kPair < 2 ? hw.x : hw.y, iq4xs::scale_shift(2 * kPair + c / 2));
    const __half2 mine = __float2half2_rn(d * float(ls));  // exact in fp32: one rounding, to f16
    uint32_t scs[2][2];  // [row g / g + 8][sub-block 2 pair / + 1]
#pragma unroll
    for (int rr = 0; rr < 2; ++rr)
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) scs[rr][hi] = __shfl_sync(0xFFFFFFFFu, half2_bits(mine), (lane & ~3) | (rr + 2 * hi));
    const __half2 k1152 = __half2half2(__ushort_as_half(0x6480));  // 1024 of the PRMT + the code book's 128
    const uint32_t words[2][2] = {{qv.x, qv.y}, {qv.z, qv.w}};     // [sub-block][row]
#pragma unroll
    for (int hi = 0; hi < 2; ++hi)
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        uint32_t b[2];  // code-book bytes (+128) of nibbles 0..3 and 4..7
        wgmma::iq4xs_biased_values(words[hi][rr], b);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int s = 2 * hi + half;
          const __half2 sc = bits_half2(scs[rr][hi]);
          a[s][rr] = half2_bits(__hmul2(__hsub2(bits_half2(__byte_perm(b[half], 0x64u, 0x4140)), k1152), sc));
          a[s][2 + rr] = half2_bits(__hmul2(__hsub2(bits_half2(__byte_perm(b[half], 0x64u, 0x4342)), k1152), sc));
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

bool deq_wgmma_iq4xs_supports(const Weight& w) { return w.type == GgmlType::IQ4_XS && w.tiles && w.n_in % kSb == 0; }

void deq_wgmma_iq4xs_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                           cudaStream_t s) {
  launch_dequant_gemm<deq_wgmma_iq4xs_kernel, kBM, kBN, kThreads>(
      kSmemBytes, ws, ys, n, x, rows, scratch, s, "deq_wgmma_iq4xs_group", HalfOrder::kQ4k, GgmlType::IQ4_XS);
}

}  // namespace df::cuda
