// The prompt GEMM for Q6_K tile weights (quant/q6k_tiles.h) on Hopper's warpgroup mma (wgmma,
// sm_90a), deq_wgmma.cu's design for Q4_K applied to Q6_K: weights dequantized to f16 straight
// into the register A fragments, f16 activations (to_half_rows_scaled in HalfOrder::kQ6k), fp32
// sums. Routed beside it for long prompt segments; tested
// (CudaOps.DeqWgmmaQ6kAgainstExactAndBatchInvariant) and timed (bench/matmul_kernels). Without
// sm_90a machine code the kernel traps.
//
// Precision. w = (q - 32) * half(d sc): d sc (f16 times int8, exact in fp32) rounded to f16 once
// per 16-element group, q - 32 exact in f16, then one f16 multiply (round to nearest): two
// roundings of at most 2^-11 relative (plus f16's subnormal half-spacing 2^-25 each). f16
// activations (rows scaled by a power of two into range, mma_matmul.cu), fp32 sums.
//
// Order of k (wgmma_q6k_layout.h). A 64-element slice j = 2 hh + t of a super-block is the four
// 16-element groups 8 hh + t + 2m (k16 step m), not a run of consecutive elements: then a tile
// lane's bytes for the slice are one 16-byte ql word (its slice's nibbles of both rows, each
// byte already in its fragment slot) and half of a qh word, each k16 step needs one scale a
// row, and a fragment register is two bytes of one word after one shift-and-mask (ql nibble, qh
// bit pair), an OR, a PRMT to f16, one subtract and one multiply: no byte moves between words.
// The activations are stored in the same order, with the tile layout's slot rotation in odd
// super-blocks.
//
// Block (as deq_wgmma.cu): 256 outputs (sixteen 16-row tiles) x 128 activation rows, two
// warpgroups cw = 0, 1, each two m64 tiles mt (warp q of cw takes weight tile 8 cw + 4 mt + q);
// per slice and m64 tile: dequantize 16 A registers, wgmma.fence, four m64n128k16 (A registers,
// B descriptor), commit, wait until all but the newest group have completed (frees the other
// tile's A registers). Scales: lane c of a row pair forms step c's two scales (rows g, g + 8)
// as a half2, and the others come by shuffle.
//
// Shared memory (the base rounded up to 1024 bytes). A ring of kStages slice stages, 24 KiB
// each: activations 128 rows x 128 bytes (wgmma_layout.h: K-major, 128-byte swizzle) and the
// slice's ql word of each tile (16 x 512 bytes). Beside it a ring of kRing super-block entries,
// 20.5 KiB each: per tile its two qh words and its scales and d (1024 + 288 bytes), copied with
// the slice that opens the super-block and read by its four slices. Why: a qh word serves two
// slices and the scales four; copying them per slice would cost 37 KB of L2 traffic a slice
// against 29.8 KB (deq_wgmma.cu's Q4_K: 28 KB; those copies run near L2's rate an SM), and
// 8-byte copies of the qh halves would fetch the same 32-byte sectors twice. 186 KiB: one
// block an SM; kStages = 6 (4 slices ahead, deq_wgmma.cu 5), as 7 with three entries would not fit.
//
// Pipeline (deq_wgmma.cu's). Step k: wait for this thread's copies of slice k,
// fence.proxy.async, __syncthreads; copy slice k + kAhead into the stage of slice k - 2 (its
// mma completed before every thread's step k - 1 ended) and, when it opens super-block s, that
// super-block's entry into entry s % kRing (last read by slice 4 (s - kRing) + 3 <= k - 1 since
// 4 kRing >= kAhead + 4); dequantize and multiply slice k.
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
#include "backend/cuda/wgmma_q6k_layout.h"
#include "quant/q6k_tiles.h"

namespace df::cuda {

namespace {

constexpr int kBM = 256, kBN = 128, kBK = 64;  // outputs, activation rows, elements per slice
constexpr int kWg = 128;                       // threads of a warpgroup
constexpr int kThreads = 2 * kWg;
constexpr int kTiles = kBM / kQ6kTileRows;     // weight tiles a block
constexpr int kSlices = kSb / kBK;             // slices a super-block
constexpr int kStages = 6, kAhead = kStages - 2;  // slices in the ring; slices copied ahead
constexpr int kAcc = kBN / 2;                  // fp32 sums a thread per m64n128 tile
static_assert(kBK == int(wgmma::kRowElems), "a slice is one swizzled row");
static_assert(kSlices == 4, "slice j of a super-block: wgmma_q6k_layout.h");
static_assert(kAcc == 64, "m64n128: 64 fp32 sums a thread (wgmma.cuh)");

constexpr int kB = 0;                                          // activations, swizzled
constexpr int kQ = kB + kBN * int(wgmma::kRowBytes);           // ql words
constexpr int kStageBytes = kQ + kTiles * kQ6kTileQuantStride;
constexpr int kHdr = 2 * kQ6kTileQuantStride;                  // in an entry's tile: scales, then d
constexpr int kEntryTile = kHdr + kQ6kTileBytes - kQ6kTileScales;  // qh words 0, 1; scales; d
constexpr int kEntryBytes = kTiles * kEntryTile;
constexpr int kRing = (kAhead + 4 + 3) / 4;
constexpr int kR = kStages * kStageBytes;                      // the super-block ring
constexpr int kAtom = int(wgmma::kAtomBytes);
constexpr int kSmemBytes = kR + kRing * kEntryBytes + kAtom;   // + room to align the base
static_assert(kStageBytes % kAtom == 0, "every stage starts on the swizzle's 1024-byte repeat");
static_assert(kEntryTile % 16 == 0 && (kQ6kTileBytes - kQ6kTileScales) % 16 == 0 &&
                  (kQ6kTileBytes - kQ6kTileScales) / 16 <= kWarp,
              "the scales and d: 16-byte copies, one a lane");
static_assert(4 * kRing >= kAhead + 4, "an entry is overwritten only after its super-block's last slice");
static_assert(kSmemBytes <= 227 * 1024, "one block an SM");

__global__ void __launch_bounds__(kThreads, 1)
    deq_wgmma_q6k_kernel(const Segments segs, int n_sb, const __half* __restrict__ xh,
                         const int* __restrict__ row_shift, int n_in, int rows_pad, int rows) {
#ifdef DF_WGMMA
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const SwizzleBase base = swizzle_aligned(smem_raw);
  uint8_t* const smem = base.p;
  const uint32_t smem_s = base.s;
  const int tid = int(threadIdx.x), lane = tid % kWarp, warp = tid / kWarp;
  const BlockSegment bs = block_segment(segs, kBM);
  const int r0 = int(blockIdx.x) * kBN;
  const int n_slices = n_sb * kSlices;

  // Weights of slice k (super-block k / 4, slice j = k % 4) into stage st: warp w copies the
  // slice's ql word of tiles w and w + 8 (lane l: bytes 16 l ..); with j = 0 also the
  // super-block's qh words (lane l: bytes 16 l .. of each) and its 288 scale and d bytes (lanes
  // < 18) of the same tiles into their ring entry. Tiles past the weight's end come in as zeros.
  const size_t tile_stride = size_t(n_sb) * kQ6kTileBytes;
  const uint8_t* const w0 = bs.w + size_t(bs.o0 / kQ6kTileRows) * tile_stride;
  const int64_t live_tiles = (bs.n_out - bs.o0 + kQ6kTileRows - 1) / kQ6kTileRows;  // may exceed kTiles
  const bool t_live[2] = {warp < live_tiles, warp + 8 < live_tiles};
  const uint8_t* const t_src[2] = {t_live[0] ? w0 + size_t(warp) * tile_stride : bs.w,
                                   t_live[1] ? w0 + size_t(warp + 8) * tile_stride : bs.w};
  const bool hdr_lane = lane < (kQ6kTileBytes - kQ6kTileScales) / 16;
  auto load_w = [&](int k, int st) {
    const int sb = k / kSlices, j = k % kSlices;
    const size_t at = size_t(sb) * kQ6kTileBytes;
    const uint32_t q_dst = smem_s + st * kStageBytes + kQ + warp * kQ6kTileQuantStride + 16 * lane;
    const size_t q_at = at + size_t(wgmma::q6k_slice_ql_word(j)) * kQ6kTileQuantStride + 16 * lane;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      cp_async16(q_dst + 8 * h * kQ6kTileQuantStride, t_src[h] + (t_live[h] ? q_at : 0), t_live[h]);
    if (j == 0) {
      const uint32_t e_dst = smem_s + kR + (sb % kRing) * kEntryBytes + warp * kEntryTile + 16 * lane;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t d = e_dst + 8 * h * kEntryTile;
        const uint8_t* src = t_src[h] + (t_live[h] ? at + 16 * lane : 0);
        const size_t qh0 = size_t(wgmma::q6k_slice_qh_word(0)) * kQ6kTileQuantStride;
        const size_t qh1 = size_t(wgmma::q6k_slice_qh_word(2)) * kQ6kTileQuantStride;
        cp_async16(d, src + (t_live[h] ? qh0 : 0), t_live[h]);
        cp_async16(d + kQ6kTileQuantStride, src + (t_live[h] ? qh1 : 0), t_live[h]);
        if (hdr_lane) cp_async16(d + kHdr, src + (t_live[h] ? size_t(kQ6kTileScales) : 0), t_live[h]);
      }
    }
  };
  // Activations of slice k (rows past rows_pad come in as zeros).
  const ActivationCopy<kThreads, kBN> copy_x(xh, tid, r0, n_in, rows_pad);
  auto load_x = [&](int k, int st) { copy_x(k, smem_s + st * kStageBytes + kB); };

  // Weights first (immutable: they may load before the previous kernel ends), then pdl_wait
  // (also before any write of y), then the activations; one commit group a slice.
  pipeline_prologue<kAhead + 1>(n_slices, load_w, load_x);

  const int cw = warp / 4, q = warp % 4, g = lane / 4, c = lane % 4;
  float acc[2][kAcc];  // (zeroed by dequant_mma_loop)

  // The A fragments of tile t for slice kJ of super-block sb (its ql words in `stage`, the rest
  // in the super-block's ring entry), k16 step m in a[m] (wgmma_q6k_layout.h): byte i of row
  // h's word is the 6-bit q of fragment k 2c + 8 (i / 2) + i % 2, register 2 (i / 2) + h.
  auto dequant = [&](auto j_c, int sb, const uint8_t* stage, int t, uint32_t (&a)[4][4]) {
    constexpr int kJ = decltype(j_c)::value;
    const uint4 ql = *reinterpret_cast<const uint4*>(stage + kQ + t * kQ6kTileQuantStride + 16 * lane);
    const uint8_t* const ent = smem + kR + (sb % kRing) * kEntryBytes + t * kEntryTile;
    const uint2 qh = *reinterpret_cast<const uint2*>(ent + (kJ / 2) * kQ6kTileQuantStride + 16 * lane + 8 * (kJ % 2));
    const uint8_t* const hdr = ent + kHdr;
    const uint8_t* const scp = hdr + wgmma::q6k_scale_offset(sb, wgmma::q6k_step_group(kJ, c)) + 16 * g;
    const float2 d = __half22float2(*reinterpret_cast<const __half2*>(hdr + (kQ6kTileD - kQ6kTileScales) + 4 * g));
    // d sc is exact in fp32 (11 x 8 significant bits): one rounding, to f16.
    const __half2 mine = __floats2half2_rn(d.x * float(int8_t(scp[0])), d.y * float(int8_t(scp[4])));
    uint32_t sc[4];  // step m's scales of rows g (low half) and g + 8
#pragma unroll
    for (int m = 0; m < 4; ++m) sc[m] = __shfl_sync(0xFFFFFFFFu, half2_bits(mine), (lane & ~3) | m);
    const __half2 k1056 = __half2half2(__ushort_as_half(0x6420));  // 1024 + 32: PRMT's 1024 and Q6_K's offset
    const uint32_t qhw[2] = {qh.x, qh.y};
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const uint32_t qlw[2] = {m % 2 ? ql.z : ql.x, m % 2 ? ql.w : ql.y};
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t lo = (qlw[h] >> (4 * (m / 2))) & 0x0F0F0F0Fu;
        const uint32_t hi = (m < 2 ? qhw[h] << (4 - 2 * m) : qhw[h] >> (2 * m - 4)) & 0x30303030u;
        const uint32_t v = lo | hi;  // four 6-bit q
        const __half2 s = h == 0 ? __low2half2(bits_half2(sc[m])) : __high2half2(bits_half2(sc[m]));
        a[m][h] = half2_bits(__hmul2(__hsub2(bits_half2(__byte_perm(v, 0x64u, 0x4140)), k1056), s));
        a[m][2 + h] = half2_bits(__hmul2(__hsub2(bits_half2(__byte_perm(v, 0x64u, 0x4342)), k1056), s));
      }
    }
  };
  auto copy = [&](int k, int st) {
    load_w(k, st);
    load_x(k, st);
  };
  auto dequant_tile = [&](auto j_c, int sb, int st, int mt, uint32_t (&a)[4][4]) {
    dequant(j_c, sb, smem + st * kStageBytes, 8 * cw + 4 * mt + q, a);
  };
  dequant_mma_loop<kStages, kAhead>(n_sb, smem_s + kB, kStageBytes, acc, copy, dequant_tile);
  store_sums(acc, bs, r0, rows, row_shift, cw, q, g, c);
#else
  __trap();  // no sm_90a machine code in this build
#endif
}

}  // namespace

bool deq_wgmma_q6k_supports(const Weight& w) { return w.type == GgmlType::Q6_K && w.tiles && w.n_in % kSb == 0; }

void deq_wgmma_q6k_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                         cudaStream_t s) {
  launch_dequant_gemm<deq_wgmma_q6k_kernel, kBM, kBN, kThreads>(kSmemBytes, ws, ys, n, x, rows, scratch, s,
                                                                "deq_wgmma_q6k_group", HalfOrder::kQ6k, GgmlType::Q6_K);
}

}  // namespace df::cuda
