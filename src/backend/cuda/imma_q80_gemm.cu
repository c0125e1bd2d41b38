// The tiled prefill product for Q8_0 weights: imma_q80.cu's integer tensor-core math for calls
// of many rows (imma_q80_group sends it those above kImmaGemmMinRows), each output
// bit-identical to what that kernel computes for the row alone. Built like the Q4_K prefill
// GEMM on tiles (imma_gemm.cu: its header comment gives the why).
//
// Shape. A block owns a BM x BN tile of outputs (weight rows x activation rows) and walks the
// super-blocks once, in order: per super-block the tile's weights (BM / 16 tiles of 4352 bytes,
// copied as they lie: 272 coalesced 16-byte copies a tile), activations and their scales are
// staged in shared memory (cp.async, two stages, so the next super-block loads while this one
// computes), and each warp multiplies a 16 MT x 8 NT sub-tile: every weight fragment serves NT
// n-tiles and every activation fragment MT m-tiles.
//
// Bit identity. Per (row, output) and block both kernels form the same exact dot (an mma's sum
// is exact, and both read the same k permutation) and add its term with q80_block_fma to a
// running slot sum that starts at 0.0f; a slot (slots_of, a function of n_in) ends with
// total = its sum (the first) or total + its sum (end_of_super_block). The slot sums live in
// registers, the totals in shared memory (touched once a slot): both in registers took 255 and
// spilled.
//
// Shared memory. A lane reads its m-tile's quants of block j in one conflict-free 16-byte load
// (the tile's 512-byte word of that block) and the scale word of its rows g, g + 8 (4 bytes;
// lanes of one g share it, rows g and g + 4 meet in one bank: a 2-way conflict on one load per
// m-tile and block, beside its NT mma). Activation rows are 288 bytes apart (32 mod 128): a half-warp's
// 8-byte loads (rows g = 0..3, bytes 8c..8c+7 of a block) fall in distinct banks. Their scales
// are 48 bytes a row (8 floats, 16 bytes of padding): lanes c = 0..3 reading columns 2c (and
// 2c + 1) meet no conflict.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/imma_common.cuh"
#include "backend/cuda/imma_q80.cuh"
#include "backend/cuda/imma_tiles.cuh"

namespace df::cuda {

namespace {

constexpr int kXRow = kSb + 32;  // bytes per activation row in shared memory
constexpr int kDRow = 48;        // bytes per row of activation scales in shared memory
constexpr int kStages = 2;       // one super-block computes while the next loads

// One pipeline stage for a BM x BN tile: weight tiles, activations, activation scales.
template <int BM, int BN>
struct Stage {
  static constexpr int kW = 0;
  static constexpr int kX = kW + (BM / kQ80TileRows) * kQ80TileBytes;
  static constexpr int kD = kX + BN * kXRow;
  static constexpr int kBytes = (kD + BN * kDRow + 127) / 128 * 128;
};

// A block of WM x WN warps, each multiplying MT m-tiles by NT n-tiles (MT NT 4 registers of slot
// sums; 16 bytes a thread and (mt, nt) of totals after the stages in shared memory).
template <int MT, int NT, int WM, int WN>
__global__ void __launch_bounds__(WM* WN* kWarp, WM* WN >= 8 ? 1 : 8 / (WM * WN))
    imma_q80_gemm_kernel(const Segments segs, int n_sb, int per_slot, const int8_t* __restrict__ xq,
                         const float* __restrict__ xd, int n_in, int rows_pad, int rows) {
  constexpr int BM = 16 * MT * WM, BN = 8 * NT * WN, kThreads = WM * WN * kWarp;
  using S = Stage<BM, BN>;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t smem_s = uint32_t(__cvta_generic_to_shared(smem));

  const int tid = int(threadIdx.x), lane = tid % kWarp, warp = tid / kWarp;
  const int g = lane / 4, c = lane % 4;
  const int wt0 = (warp / WN) * MT, wn0 = (warp % WN) * 8 * NT;  // the warp's first tile and row
  int seg = 0;
#pragma unroll
  for (int i = 1; i < kMaxSegments; ++i)
    if (i < segs.n && int(blockIdx.y) >= segs.first_block[i]) seg = i;
  const uint8_t* const w = segs.w[seg];
  const int64_t n_out = segs.n_out[seg];
  const int64_t o0 = int64_t(int(blockIdx.y) - segs.first_block[seg]) * BM;
  const int r0 = int(blockIdx.x) * BN;

  // Copies of super-block sb into stage st; tiles past n_out and rows past `rows` come in as
  // zeros (a live tile's padding rows are stored).
  auto load_w = [&](int st, int sb) {
    const uint32_t dst = smem_s + st * S::kBytes + S::kW;
    constexpr int kTileChunks = kQ80TileBytes / 16;
#pragma unroll 1
    for (int i = tid; i < (BM / kQ80TileRows) * kTileChunks; i += kThreads) {
      const int t = i / kTileChunks, chunk = i % kTileChunks;
      const bool live = o0 + kQ80TileRows * t < n_out;
      const int64_t tile = live ? o0 / kQ80TileRows + t : 0;
      const uint8_t* src = w + (size_t(tile) * size_t(n_sb) + size_t(sb)) * kQ80TileBytes + 16 * chunk;
      cp_async16(dst + t * kQ80TileBytes + 16 * chunk, src, live);
    }
  };
  auto load_x = [&](int st, int sb) {
    const uint32_t dst = smem_s + st * S::kBytes;
    constexpr int kChunks = kSb / 16 + 2;  // a row's 16 copies of values, then 2 of scales
#pragma unroll 1
    for (int i = tid; i < BN * kChunks; i += kThreads) {
      const int row = i / kChunks, k = i % kChunks;
      const bool live = r0 + row < rows;
      const size_t r = size_t(live ? r0 + row : 0);
      if (k < kSb / 16)
        cp_async16(dst + S::kX + row * kXRow + 16 * k, xq + r * size_t(n_in) + size_t(sb) * kSb + 16 * k, live);
      else
        cp_async16(dst + S::kD + row * kDRow + 16 * (k - kSb / 16),
                   xd + (size_t(sb) * size_t(rows_pad) + r) * kQ80SbBlocks + 4 * (k - kSb / 16), live);
    }
  };

  pipeline_prologue<kStages>(n_sb, load_w, load_x);

  float run[MT][NT][4];
  float4* const tot_s = reinterpret_cast<float4*>(smem + kStages * S::kBytes);
  zero_accumulators(run);
  bool first_slot = true;
  int left_in_slot = per_slot;

  for (int sb = 0; sb < n_sb; ++sb) {
    pipeline_advance<kStages>(sb, n_sb, load_w, load_x);
    const uint8_t* const ws = smem + (sb % kStages) * S::kBytes + S::kW;
    const uint8_t* const xs = smem + (sb % kStages) * S::kBytes + S::kX;
    const uint8_t* const ds = smem + (sb % kStages) * S::kBytes + S::kD;

#pragma unroll 1
    for (int j = 0; j < kQ80SbBlocks; ++j) {
      // B fragments (activation row wn0 + 8 nt + g, bytes 8c .. 8c + 7 of block j: the tiles'
      // k order) and the scales of the lane's columns wn0 + 8 nt + 2c, + 1.
      uint32_t b[NT][2];
      float dx[NT][2];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint2 v = *reinterpret_cast<const uint2*>(xs + (wn0 + 8 * nt + g) * kXRow + 32 * j + 8 * c);
        b[nt][0] = v.x, b[nt][1] = v.y;
        const uint8_t* const dc = ds + (wn0 + 8 * nt + 2 * c) * kDRow + 4 * j;
        dx[nt][0] = *reinterpret_cast<const float*>(dc);
        dx[nt][1] = *reinterpret_cast<const float*>(dc + kDRow);
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const uint8_t* const tile = ws + (wt0 + mt) * kQ80TileBytes;
        const uint4 v = *reinterpret_cast<const uint4*>(tile + kQ80TileBlockStride * j + 16 * lane);
        const uint32_t a[4] = {v.x, v.z, v.y, v.w};  // rows g, g + 8: quants 8c.., then 8c + 4..
        const float2 dw = q80_scale_pair(*reinterpret_cast<const uint32_t*>(tile + kQ80TileScales + 32 * g + 4 * j));
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          int dot[4];
          imma_16832_ss(dot, a, b[nt][0], b[nt][1], kMsumMagic);
#pragma unroll
          for (int k = 0; k < 4; ++k)
            run[mt][nt][k] = q80_block_fma(run[mt][nt][k], dot[k], k < 2 ? dw.x : dw.y, dx[nt][k % 2]);
        }
      }
    }

    // A slot ends: the total takes its sum, in slot order, and the slot sum restarts from 0.
    end_of_super_block(run, tot_s, tid, kThreads, first_slot, left_in_slot, per_slot, sb, n_sb);
  }

  float* const y = segs.y[seg];
  const int64_t y_stride = segs.y_stride[seg];
  store_gemm_outputs</*kMulti=*/true>(run, tot_s, tid, kThreads, o0 + 16 * wt0, r0 + wn0, g, c, n_out, rows, y, y_stride);
}

template <int MT, int NT, int WM, int WN>
void gemm_launch(const Segments& segs, int n_sb, int per_slot, const Q80Acts& a, int n_in, int rows, cudaStream_t s) {
  constexpr int BM = 16 * MT * WM, BN = 8 * NT * WN;
  constexpr auto kernel = imma_q80_gemm_kernel<MT, NT, WM, WN>;
  constexpr size_t smem = kStages * size_t(Stage<BM, BN>::kBytes) + size_t(BM) * BN * sizeof(float);
  // Above the default 48 KiB of dynamic shared memory (216 KiB for 128 x 128: one block an SM);
  // all of the unified L1 as shared memory. A refusal shows as the launch error, which the caller
  // checks.
  (void)raise_smem_limit<kernel>(int(smem), /*carveout_max=*/true);
  const Segments t = segments_in_blocks_of(segs, BM);
  launch(kernel, dim3(ceil_div(rows, BN), unsigned(t.first_block[t.n])), dim3(WM * WN * kWarp), smem, s, t, n_sb,
         per_slot, a.q, a.d, n_in, a.rows_pad, rows);
}

}  // namespace

// The Q4_K GEMM's three block shapes (imma_gemm.cu), with its choice between the first two; but
// 128 x 64 takes eight warps of 64 x 16 here (four warps would be alone on an SM: a block's
// stages and totals take 142 KiB of shared memory).
void imma_q80_gemm(const Segments& segs, int64_t n_in, const Q80Acts& a, int rows, cudaStream_t s,
                   ImmaGemmShape shape) {
  const int n_sb = int(n_in / kSb);
  const Slots slots = slots_of(n_sb);
  if (shape == ImmaGemmShape::kAuto) {
    int64_t m_tiles = 0;
    for (int k = 0; k < segs.n; ++k) m_tiles += (segs.n_out[k] + 127) / 128;
    const int64_t big_tiles = m_tiles * ((rows + 127) / 128);
    shape = big_tiles >= 3 * int64_t(sm_count()) ? ImmaGemmShape::k128x128Warps8 : ImmaGemmShape::k128x64Warps4;
  }
  switch (shape) {
    case ImmaGemmShape::k128x128Warps16:
      return gemm_launch<2, 4, 4, 4>(segs, n_sb, slots.per_slot, a, int(n_in), rows, s);
    case ImmaGemmShape::k128x128Warps8:
      return gemm_launch<4, 4, 2, 4>(segs, n_sb, slots.per_slot, a, int(n_in), rows, s);
    default:
      return gemm_launch<4, 2, 2, 4>(segs, n_sb, slots.per_slot, a, int(n_in), rows, s);
  }
}

}  // namespace df::cuda
