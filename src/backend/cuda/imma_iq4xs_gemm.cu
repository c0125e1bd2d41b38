// The tiled prefill product for IQ4_XS weights: imma_iq4xs.cu's integer tensor-core math for
// calls of more than kImmaGemmMinRows rows, each output bit-identical to what that kernel
// computes for the row alone. It is to imma_iq4xs.cu what imma_gemm.cu is to imma_matmul.cu
// (read that header too: the block tiles, the two-stage cp.async pipeline and the slot order are
// the same; so are the block shapes and how the grid picks one).
//
// Bit identity. Per (row, output) and super-block both kernels form the same exact integer
// isum = sum_j (ls_j - 32) dot_j (the same fragments: iq4xs_operands.cuh) and the same float
// term (iq4xs_sb_term), added in the decode kernel's order: within a slot (slots_of) in
// super-block order from 0.0f, then the slot sums in slot order, the first as it is.
//
// Shared memory. The weights' tiles are copied as they lie (a tile's super-block is 2176
// consecutive bytes: 136 coalesced 16-byte copies); a lane then reads its m-tile's quants of a
// sub-block pair as one conflict-free 16-byte load (the 512-byte word of the pair) and its rows'
// scale words as two 4-byte loads (eight distinct words a warp). Activation rows are 288 bytes
// apart (32 mod 128: a half-warp's 8-byte loads at element 8c of rows g = 0..3 fall in distinct
// banks), scales 4 bytes a row.
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/imma_common.cuh"
#include "backend/cuda/imma_iq4xs.cuh"
#include "backend/cuda/imma_tiles.cuh"

namespace df::cuda {

namespace {

constexpr int kXRow = kSb + 32;  // bytes per activation row in shared memory
constexpr int kStages = 2;       // one super-block computes while the next loads
constexpr int kTileChunks = kIq4xsTileBytes / 16;

// One pipeline stage for a BM x BN tile: the weights' BM / 16 tiles, activations, their scales.
template <int BM, int BN>
struct Iq4xsStage {
  static constexpr int kW = 0;
  static constexpr int kX = kW + (BM / kIq4xsTileRows) * kIq4xsTileBytes;
  static constexpr int kD = kX + BN * kXRow;
  static constexpr int kBytes = (kD + BN * 4 + 127) / 128 * 128;
};

// A block of WM x WN warps, each multiplying MT m-tiles by NT n-tiles. kMulti: slots of several
// super-blocks (n_in > 32 * 256); the slot sums then stay in registers and the running totals
// move to shared memory (end_of_super_block), as in imma_gemm.cu.
template <int MT, int NT, int WM, int WN, bool kMulti>
__global__ void __launch_bounds__(WM* WN* kWarp, WM* WN >= 8 ? 1 : 8 / (WM * WN))
    imma_iq4xs_gemm_kernel(const Segments segs, int n_sb, int per_slot, const int8_t* __restrict__ xq,
                           const float* __restrict__ xd, int n_in, int rows_pad, int rows) {
  constexpr int BM = 16 * MT * WM, BN = 8 * NT * WN, kThreads = WM * WN * kWarp;
  using S = Iq4xsStage<BM, BN>;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t smem_s = uint32_t(__cvta_generic_to_shared(smem));

  const int tid = int(threadIdx.x), lane = tid % kWarp, warp = tid / kWarp;
  const int g = lane / 4, c = lane % 4;
  const int wm0 = (warp / WN) * 16 * MT, wn0 = (warp % WN) * 8 * NT;  // the warp's sub-tile
  const BlockSegment bs = block_segment(segs, BM);
  const int r0 = int(blockIdx.x) * BN;

  // Copies of super-block sb into stage st; tiles past n_out and rows past `rows` come in as
  // zeros (a live tile's padding rows are stored; a dead copy's source is mapped).
  auto load_w = [&](int st, int sb) {
    const uint32_t dst = smem_s + st * S::kBytes + S::kW;
#pragma unroll 1
    for (int i = tid; i < (BM / kIq4xsTileRows) * kTileChunks; i += kThreads) {
      const int t = i / kTileChunks, chunk = i % kTileChunks;
      const bool live = bs.o0 + kIq4xsTileRows * t < bs.n_out;
      const int64_t tile = live ? bs.o0 / kIq4xsTileRows + t : 0;
      const uint8_t* src = bs.w + (size_t(tile) * size_t(n_sb) + size_t(sb)) * kIq4xsTileBytes + 16 * chunk;
      cp_async16(dst + t * kIq4xsTileBytes + 16 * chunk, src, live);
    }
  };
  auto load_x = [&](int st, int sb) {
    const uint32_t dst = smem_s + st * S::kBytes;
#pragma unroll 1
    for (int i = tid; i < BN * (kSb / 16); i += kThreads) {
      const int row = i / (kSb / 16), chunk = i % (kSb / 16);
      const bool live = r0 + row < rows;
      const int8_t* src = xq + size_t(live ? r0 + row : 0) * size_t(n_in) + size_t(sb) * kSb + 16 * chunk;
      cp_async16(dst + S::kX + row * kXRow + 16 * chunk, src, live);
    }
    // Scales 4 rows a copy: whole copies lie below rows_pad (a multiple of 8) or above it.
#pragma unroll 1
    for (int i = tid; i < BN / 4; i += kThreads) {
      const bool live = r0 + 4 * i < rows_pad;
      cp_async16(dst + S::kD + 16 * i, xd + size_t(sb) * rows_pad + (live ? r0 + 4 * i : 0), live);
    }
  };

  pipeline_prologue<kStages>(n_sb, load_w, load_x);

  // Per output: the running total, and for kMulti the current slot's sum (tot_s: the totals).
  float run[MT][NT][4];
  float4* const tot_s = reinterpret_cast<float4*>(smem + kStages * S::kBytes);
  zero_accumulators(run);
  bool first_slot = true;
  int left_in_slot = per_slot;

  for (int sb = 0; sb < n_sb; ++sb) {
    pipeline_advance<kStages>(sb, n_sb, load_w, load_x);
    const int st = sb % kStages;
    const uint8_t* const ws = smem + st * S::kBytes + S::kW;
    const uint8_t* const xs = smem + st * S::kBytes + S::kX;
    // Byte k of the header of weight row wm0 + 16 mt + g + 8 h.
    auto header = [&](int mt, int h, int k) { return ws + (wm0 / 16 + mt) * kIq4xsTileBytes + kIq4xsTileHeaders + 16 * g + 8 * h + k; };

    int isum[MT][NT][4];  // sum_j (ls_j - 32) dot_j, exact
    zero_accumulators(isum);
    // Not unrolled: it keeps the fragments of one pair within the registers.
#pragma unroll 1
    for (int i = 0; i < 4; ++i) {  // sub-block pair i: sub-blocks 2i and 2i + 1
      uint32_t b[NT][4];  // per n-tile: sub-block 2i's two B registers, then 2i + 1's
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {  // activations 8c .. 8c + 7 of each sub-block
        const uint8_t* xrow = xs + (wn0 + 8 * nt + g) * kXRow + 64 * i + 8 * c;
        const uint2 lo = *reinterpret_cast<const uint2*>(xrow), hi = *reinterpret_cast<const uint2*>(xrow + 32);
        b[nt][0] = lo.x, b[nt][1] = lo.y, b[nt][2] = hi.x, b[nt][3] = hi.y;
      }
      // The scale fields of sub-blocks 2i, 2i + 1: header word x (pairs 0, 1) or y (2, 3).
      const int word = 4 * (i >> 1);
      const uint32_t shift0 = iq4xs::scale_shift(2 * i), shift1 = iq4xs::scale_shift(2 * i + 1);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const uint4 v = *reinterpret_cast<const uint4*>(ws + (wm0 / 16 + mt) * kIq4xsTileBytes +
                                                        kIq4xsTileQuantStride * i + 16 * lane);
        const uint32_t hw0 = *reinterpret_cast<const uint32_t*>(header(mt, 0, word));
        const uint32_t hw1 = *reinterpret_cast<const uint32_t*>(header(mt, 1, word));
#pragma unroll
        for (int p = 0; p < 2; ++p) {
          uint32_t lo[4], hi[4];
          iq4xs::a_operands(p ? v.z : v.x, p ? v.w : v.y, lo, hi);
          const uint32_t shift = p ? shift1 : shift0;
          const int sc0 = iq4xs::scale_at(hw0, shift), sc1 = iq4xs::scale_at(hw1, shift);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            int dd[4];
            iq4xs_dot(dd, lo, hi, b[nt][2 * p], b[nt][2 * p + 1]);
#pragma unroll
            for (int j = 0; j < 4; ++j) isum[mt][nt][j] += (j < 2 ? sc0 : sc1) * dd[j];
          }
        }
      }
    }

    // Float part, once per super-block and (row, output).
    float d[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint2 hxy = *reinterpret_cast<const uint2*>(header(mt, h, 0));
        d[mt][h] = iq4xs_d(hxy.x, hxy.y);
      }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int col = wn0 + 8 * nt;
      const float2 dx = *reinterpret_cast<const float2*>(smem + st * S::kBytes + S::kD + 4 * (col + 2 * c));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float t = iq4xs_sb_term(j % 2 ? dx.y : dx.x, d[mt][j / 2], isum[mt][nt][j]);
          float& r = run[mt][nt][j];
          // kMulti: the slot's sum. Otherwise every super-block is a slot and the total is
          // (0 + t0) + (0 + t1) + ...; r + t gives the same bits from r = +0: r is never -0
          // (+0 + -0 = +0, and a sum is -0 only when both terms are), so r + (0 + t) = r + t.
          r = __fadd_rn(r, t);
        }
    }
    if constexpr (kMulti) end_of_super_block(run, tot_s, tid, kThreads, first_slot, left_in_slot, per_slot, sb, n_sb);
    else first_slot = false;
  }

  store_gemm_outputs<kMulti>(run, tot_s, tid, kThreads, bs.o0 + wm0, r0 + wn0, g, c, bs.n_out, rows, bs.y, bs.y_stride);
}

template <int MT, int NT, int WM, int WN, bool kMulti>
void iq4xs_gemm_launch(const Segments& segs, int n_sb, int per_slot, const int8_t* xq, const float* xd, int n_in,
                       int rows, int rows_pad, cudaStream_t s) {
  constexpr int BM = 16 * MT * WM, BN = 8 * NT * WN;
  constexpr auto kernel = imma_iq4xs_gemm_kernel<MT, NT, WM, WN, kMulti>;
  constexpr size_t smem =
      kStages * size_t(Iq4xsStage<BM, BN>::kBytes) + (kMulti ? size_t(BM) * BN * sizeof(float) : 0);
  // The blocks an SM its launch bounds promise, each with 1 KiB reserved, within the 228 KiB.
  static_assert((smem + 1024) * (WM * WN >= 8 ? 1 : 8 / (WM * WN)) <= 228 * 1024, "shared memory for the blocks an SM");
  // Above the default 48 KiB of dynamic shared memory; all of the unified L1 as shared memory.
  // A refusal shows as the launch error, which the caller checks.
  (void)raise_smem_limit<kernel>(int(smem), /*carveout_max=*/true);
  const Segments t = segments_in_blocks_of(segs, BM);
  launch(kernel, dim3(ceil_div(rows, BN), unsigned(t.first_block[t.n])), dim3(WM * WN * kWarp), smem, s, t, n_sb,
         per_slot, xq, xd, n_in, rows_pad, rows);
}

template <int MT, int NT, int WM, int WN>
void iq4xs_gemm_launch(const Segments& segs, int n_sb, const Slots& slots, const int8_t* xq, const float* xd,
                       int n_in, int rows, int rows_pad, cudaStream_t s) {
  if (slots.per_slot > 1) iq4xs_gemm_launch<MT, NT, WM, WN, true>(segs, n_sb, slots.per_slot, xq, xd, n_in, rows, rows_pad, s);
  else iq4xs_gemm_launch<MT, NT, WM, WN, false>(segs, n_sb, slots.per_slot, xq, xd, n_in, rows, rows_pad, s);
}

}  // namespace

// The block shapes of imma_gemm.cu (warps of 64 x 32 outputs in 128 x 128 blocks of 8 warps
// where the grid fills 3 waves, else 128 x 64 blocks of 4; 128 x 128 with 16 warps of 32 x 32
// for the bench), chosen by the same rule.
void imma_iq4xs_gemm(const Segments& segs, int64_t n_in, const int8_t* xq, const float* xd, int rows, int rows_pad,
                     cudaStream_t s, ImmaGemmShape shape) {
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
      return iq4xs_gemm_launch<2, 4, 4, 4>(segs, n_sb, slots, xq, xd, int(n_in), rows, rows_pad, s);
    case ImmaGemmShape::k128x128Warps8:
      return iq4xs_gemm_launch<4, 4, 2, 4>(segs, n_sb, slots, xq, xd, int(n_in), rows, rows_pad, s);
    default:
      return iq4xs_gemm_launch<4, 4, 2, 2>(segs, n_sb, slots, xq, xd, int(n_in), rows, rows_pad, s);
  }
}

}  // namespace df::cuda
