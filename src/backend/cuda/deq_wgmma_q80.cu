// The prompt GEMM for Q8_0 tile weights (quant/q80_tiles.h) on Hopper's warpgroup mma (wgmma,
// sm_90a), deq_wgmma.cu's design applied to Q8_0: weights dequantized to f16 straight into the
// register A fragments, f16 activations (to_half_rows_scaled in HalfOrder::kQ4k: Q8_0's order is Q4_K's, wgmma_q80_layout.h), fp32 sums.
// Tested (CudaOps.DeqWgmmaQ80AgainstExactAndBatchInvariant) and timed (bench/matmul_kernels);
// routed for long prompt segments (CudaBackend::prompt_matmul_shared_input). Without sm_90a
// machine code the kernel traps.
//
// Precision. w = half(d) q: d is already f16, q (-128 .. 127) exact in f16, one f16 multiply
// (round to nearest): at most 2^-11 |w| (or f16's subnormal half-spacing 2^-25). f16
// activations (rows scaled by a power of two into range, mma_matmul.cu), fp32 sums.
//
// Order of k (wgmma_q80_layout.h). A 64-element slice js is blocks 2 js and 2 js + 1; a tile
// lane's 16 bytes of a block are its two rows' quants 8c .. 8c + 7, i.e. both rows' fragments of
// two k16 steps once the activations are stored in the matching order. A fragment register is
// two adjacent bytes of one word: XOR 0x80 (per word: int8 -> 128 + q, as u8), PRMT with 0x64
// into the f16 pair 1024 + 128 + q, subtract 1152 (exact), multiply by the row's d (its half of
// the d word, duplicated): 3.5 PTX instructions a register (the duplication is meant to fold into
// the multiply's operand selection; SASS not inspected), 16 registers a tile and slice. Each k16 step takes one block, so one d a row: a lane reads its rows' d of the slice's
// two blocks as one 8-byte word, no shuffles.
//
// Block (as deq_wgmma.cu): 256 outputs (sixteen 16-row tiles) x 128 activation rows, two
// warpgroups cw = 0, 1, each two m64 tiles mt (warp q of cw takes weight tile 8 cw + 4 mt + q);
// per slice and m64 tile: dequantize 16 A registers, wgmma.fence, four m64n128k16 (A registers,
// B descriptor), commit, wait until all but the newest group have completed (frees the other
// tile's A registers).
//
// Shared memory (the base rounded up to 1024 bytes). A ring of kStages slice stages, 32 KiB
// each: activations 128 rows x 128 bytes (wgmma_layout.h: K-major, 128-byte swizzle) and the
// slice's two 512-byte block words of each tile (16 x 1024 bytes: 8-bit quants are twice Q4_K's
// 8 KiB). Beside it a ring of kRing super-block entries, 4 KiB each: every tile's 256 bytes of
// d, copied with the slice that opens the super-block and read by its four slices. Why a second
// ring: a slice needs 64 of a tile's 256 d bytes, as 8 bytes in each of 8 rows' 32-byte runs;
// copied per slice that would be 128 copies of 8 bytes, each fetching a whole 32-byte sector:
// 4 KiB of L2 traffic a slice, against 1 KiB here (4 KiB of 16-byte copies a super-block,
// one a thread); with 16 KiB of activations and 16 KiB of quants a slice that is 33 KiB against
// 36 (those copies run near L2's rate an SM). Budget: 6 stages x 32 KiB + 2 entries x 4 KiB
// + 1 KiB for the alignment = 201 KiB of 227 (one block an SM); 7 stages (224 KiB, plus 3
// entries) would not fit, so kStages = 6 (4 slices ahead), as deq_wgmma_q6k.cu.
//
// Pipeline (deq_wgmma.cu's). Step k: wait for this thread's copies of slice k,
// fence.proxy.async, __syncthreads; copy slice k + kAhead into the stage of slice k - 2 (its
// mma completed before every thread's step k - 1 ended) and, when it opens super-block s, that
// super-block's d into entry s % kRing (last read by slice 4 (s - kRing) + 3 <= k - 1 since
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
#include "backend/cuda/wgmma_q80_layout.h"
#include "quant/q80_tiles.h"

namespace df::cuda {

namespace {

constexpr int kBM = 256, kBN = 128, kBK = 64;  // outputs, activation rows, elements per slice
constexpr int kWg = 128;                       // threads of a warpgroup
constexpr int kThreads = 2 * kWg;
constexpr int kTiles = kBM / kQ80TileRows;     // weight tiles a block
constexpr int kSlices = kSb / kBK;             // slices a super-block
constexpr int kSliceBlocks = kBK / 32;         // Q8_0 blocks a slice
constexpr int kStages = 6, kAhead = kStages - 2;  // slices in the ring; slices copied ahead
constexpr int kAcc = kBN / 2;                  // fp32 sums a thread per m64n128 tile
constexpr int kDBytes = kQ80TileBytes - kQ80TileScales;  // a tile super-block's d
static_assert(kBK == int(wgmma::kRowElems), "a slice is one swizzled row");
static_assert(kSlices * kSliceBlocks == kQ80SbBlocks, "slice js is blocks 2 js, 2 js + 1: wgmma_q80_layout.h");
static_assert(kAcc == 64, "m64n128: 64 fp32 sums a thread (wgmma.cuh)");

constexpr int kB = 0;                                          // activations, swizzled
constexpr int kQ = kB + kBN * int(wgmma::kRowBytes);           // block words: tile t's at 1024 t
constexpr int kTileQ = kSliceBlocks * kQ80TileBlockStride;     // a tile's quant bytes in a stage
constexpr int kStageBytes = kQ + kTiles * kTileQ;
constexpr int kEntryBytes = kTiles * kDBytes;
constexpr int kRing = (kAhead + 4 + 3) / 4;
constexpr int kR = kStages * kStageBytes;                      // the super-block ring
constexpr int kAtom = int(wgmma::kAtomBytes);
constexpr int kSmemBytes = kR + kRing * kEntryBytes + kAtom;   // + room to align the base
static_assert(kStageBytes % kAtom == 0, "every stage starts on the swizzle's 1024-byte repeat");
static_assert(kQ80TileBlockStride == 16 * kWarp, "a block word: 16 bytes a lane");
static_assert(kTiles == 2 * (kThreads / kWarp) && kTiles * kDBytes == 16 * kThreads,
              "two tiles' block words a warp; the d of all tiles: 16 bytes a thread");
static_assert(4 * kRing >= kAhead + 4, "an entry is overwritten only after its super-block's last slice");
static_assert(kSmemBytes <= 227 * 1024, "one block an SM");

__global__ void __launch_bounds__(kThreads, 1)
    deq_wgmma_q80_kernel(const Segments segs, int n_sb, const __half* __restrict__ xh,
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

  // Weights of slice k (super-block k / 4, slice js = k % 4) into stage st: warp w copies the
  // 512-byte words of blocks 2 js, 2 js + 1 of tiles w and w + 8 (lane l: bytes 16 l ..); with
  // js = 0 also the super-block's 256 bytes of d of every tile into its ring entry (thread t:
  // chunk t % 16 of tile t / 16). Tiles past the weight's end come in as zeros (q 0, d 0).
  const size_t tile_stride = size_t(n_sb) * kQ80TileBytes;
  const uint8_t* const w0 = bs.w + size_t(bs.o0 / kQ80TileRows) * tile_stride;
  const int64_t live_tiles = (bs.n_out - bs.o0 + kQ80TileRows - 1) / kQ80TileRows;  // may exceed kTiles
  const bool t_live[2] = {warp < live_tiles, warp + 8 < live_tiles};
  const uint8_t* const t_src[2] = {t_live[0] ? w0 + size_t(warp) * tile_stride + 16 * lane : bs.w,
                                   t_live[1] ? w0 + size_t(warp + 8) * tile_stride + 16 * lane : bs.w};
  const bool d_live = tid / 16 < live_tiles;
  const uint8_t* const d_src = d_live ? w0 + size_t(tid / 16) * tile_stride + kQ80TileScales + 16 * (tid % 16) : bs.w;
  auto load_w = [&](int k, int st) {
    const int sb = k / kSlices, js = k % kSlices;
    const size_t at = size_t(sb) * kQ80TileBytes;
    const uint32_t q_dst = smem_s + st * kStageBytes + kQ + warp * kTileQ + 16 * lane;
    const size_t q_at = at + size_t(kSliceBlocks * js) * kQ80TileBlockStride;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int jj = 0; jj < kSliceBlocks; ++jj)
        cp_async16(q_dst + 8 * h * kTileQ + jj * kQ80TileBlockStride,
                   t_src[h] + (t_live[h] ? q_at + size_t(jj) * kQ80TileBlockStride : 0), t_live[h]);
    if (js == 0) cp_async16(smem_s + kR + (sb % kRing) * kEntryBytes + 16 * tid, d_src + (d_live ? at : 0), d_live);
  };
  // Activations of slice k (rows past rows_pad come in as zeros).
  const ActivationCopy<kThreads, kBN> copy_x(xh, tid, r0, n_in, rows_pad);
  auto load_x = [&](int k, int st) { copy_x(k, smem_s + st * kStageBytes + kB); };

  // Weights first (immutable: they may load before the previous kernel ends), then pdl_wait
  // (also before any write of y), then the activations; one commit group a slice.
  pipeline_prologue<kAhead + 1>(n_slices, load_w, load_x);

  const int cw = warp / 4, q = warp % 4, g = lane / 4, c = lane % 4;
  float acc[2][kAcc];  // (zeroed by dequant_mma_loop)

  // The A fragments of tile t for slice kJs of super-block sb (its block words in `stage`, its
  // d in the super-block's ring entry), k16 step s = 2 jj + u in a[s] (wgmma_q80_layout.h): word
  // 2h + u of block jj's 16 bytes is row g + 8h's quants; its bytes 0, 1 go to register h, bytes
  // 2, 3 to register 2 + h.
  auto dequant = [&](auto js_c, int sb, const uint8_t* stage, int t, uint32_t (&a)[4][4]) {
    constexpr int kJs = decltype(js_c)::value;
    const uint8_t* const qp = stage + kQ + t * kTileQ + 16 * lane;
    const uint4 qv[kSliceBlocks] = {*reinterpret_cast<const uint4*>(qp),
                                    *reinterpret_cast<const uint4*>(qp + kQ80TileBlockStride)};
    const uint8_t* const ent = smem + kR + (sb % kRing) * kEntryBytes + t * kDBytes;
    // d of rows g (low half) and g + 8 of blocks 2 kJs (.x) and 2 kJs + 1 (.y).
    const uint2 dv = *reinterpret_cast<const uint2*>(ent + wgmma::q80_scale_offset(g, kSliceBlocks * kJs, 0));
    const __half2 k1152 = __half2half2(__ushort_as_half(0x6480));  // 1024 + 128: PRMT's 1024 and the XOR's 128
#pragma unroll
    for (int jj = 0; jj < kSliceBlocks; ++jj) {
      const uint32_t words[4] = {qv[jj].x, qv[jj].y, qv[jj].z, qv[jj].w};
      const __half2 d2 = bits_half2(jj == 0 ? dv.x : dv.y);
#pragma unroll
      for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t v = words[2 * h + u] ^ 0x80808080u;  // four 128 + q
          const __half2 d = h == 0 ? __low2half2(d2) : __high2half2(d2);
          a[2 * jj + u][h] = half2_bits(__hmul2(__hsub2(bits_half2(__byte_perm(v, 0x64u, 0x4140)), k1152), d));
          a[2 * jj + u][2 + h] = half2_bits(__hmul2(__hsub2(bits_half2(__byte_perm(v, 0x64u, 0x4342)), k1152), d));
        }
    }
  };
  auto copy = [&](int k, int st) {
    load_w(k, st);
    load_x(k, st);
  };
  auto dequant_tile = [&](auto js_c, int sb, int st, int mt, uint32_t (&a)[4][4]) {
    dequant(js_c, sb, smem + st * kStageBytes, 8 * cw + 4 * mt + q, a);
  };
  dequant_mma_loop<kStages, kAhead>(n_sb, smem_s + kB, kStageBytes, acc, copy, dequant_tile);
  store_sums(acc, bs, r0, rows, row_shift, cw, q, g, c);
#else
  __trap();  // no sm_90a machine code in this build
#endif
}

}  // namespace

bool deq_wgmma_q80_supports(const Weight& w) { return w.type == GgmlType::Q8_0 && w.tiles && w.n_in % kSb == 0; }

void deq_wgmma_q80_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                         cudaStream_t s) {
  launch_dequant_gemm<deq_wgmma_q80_kernel, kBM, kBN, kThreads>(kSmemBytes, ws, ys, n, x, rows, scratch, s,
                                                                "deq_wgmma_q80_group", HalfOrder::kQ4k, GgmlType::Q8_0);
}

}  // namespace df::cuda
