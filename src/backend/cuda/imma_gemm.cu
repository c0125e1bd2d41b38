// The tiled prefill product for Q4_K weights (and Q5_K ones in their tile layout): imma_matmul.cu's
// integer tensor-core math for calls of many rows (imma_matmul_group sends it those above
// kImmaGemmMinRows), each output bit-identical to what that kernel computes for the row alone.
//
// Why. The decode kernel takes 32 activation rows per block group, so a 512-row prompt streams
// and unpacks every weight 16 times from L2, and each unpacked weight fragment serves 4 n-tiles.
// Here a block owns a BM x BN tile of outputs (weight rows x activation rows) and walks the
// super-blocks once, in order: per super-block the tile's Q4_K blocks and Q8_K rows are staged
// in shared memory (cp.async, two stages, so the next super-block loads while this one
// computes), and each warp multiplies a 16 MT x 8 NT sub-tile: every weight fragment serves NT
// n-tiles and every activation fragment MT m-tiles.
//
// Bit identity. Per (row, output) and super-block both kernels form the same exact integers:
// isum = 16 sum_j sc_j dot_j (an mma's sum is exact, so the k order inside a sub-block does not
// matter: here the plain mma layout, there a permutation of it) and msum = sum_j min_j xsum_j;
// then the same float term (q4k_sb_term). The floats are added in the decode kernel's order:
// within a slot (slots_of) in super-block order starting from 0.0f, then the slot sums in slot
// order, the first as it is. A running total beside the slot accumulator gives exactly that
// order in one pass over the super-blocks.
//
// Shared memory and fragments. A tile row is stored as it is in memory: Q4_K blocks 144 bytes
// apart, Q8_K rows 272 (256 + 16 padding) apart. Both strides are 16 mod 128, so the eight
// 16-byte rows each ldmatrix phase reads fall in distinct bank groups: no conflicts, no swizzle.
// One ldmatrix.x4 gives a warp the A fragments of a 16-row m-tile for a pair of sub-blocks (32
// bytes of nibbles: the low nibbles are sub-block 2i, the high ones 2i + 1, apart with one LOP3
// each; the high ones enter as 16 q, as in the decode kernel); one gives the B fragments of an
// 8-row n-tile for the same pair.
//
// msum is a second, small product: a weight row's 8 mins times an activation row's 8 sub-block
// sums, which the quantizer stores as low bytes (unsigned) and high bytes (signed). Two
// m16n8k16 mmas (k 0..7 used) give lo and hi, msum = 256 hi + lo, where dp4a would take four
// instructions per output on the integer pipe that the scale multiplies already keep busy. The
// lo mma starts from the bits of 1.5 * 2^23, so lo + 256 hi is the bit pattern of the float
// 1.5 * 2^23 + msum and one subtraction gives float(msum), exactly (|msum| < 2^22).
#include <algorithm>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/imma_common.cuh"
#include "backend/cuda/imma_gemm.cuh"
#include "backend/cuda/imma_iq4xs.cuh"
#include "backend/cuda/imma_q6k.cuh"
#include "backend/cuda/imma_q80.cuh"
#include "backend/cuda/imma_tiles.cuh"

namespace df::cuda {

namespace {

// Bytes per activation row in shared memory: 16 mod 128 for the ldmatrix reads of GGUF-order
// weights; 32 mod 128 for the tile layout's 8-byte reads (a half-warp's rows g = 0..3 then
// fall in distinct banks).
template <bool kTiles>
constexpr int kXRow = kSb + (kTiles ? 32 : 16);
constexpr int kWChunks = kQ4kBytes / 16;    // 16-byte copies per Q4_K block
constexpr int kStages = 2;                  // one super-block computes while the next loads

// One pipeline stage for a BM x BN tile: weights, activations, activation scales, packed sums.
// The weights take BM * 144 bytes either way (BM / 16 tiles of 2304); Q5_K tiles BM * 176.
template <int BM, int BN, bool kTiles, bool kQ5k = false>
struct Stage {
  static constexpr int kW = 0;
  static constexpr int kX = kW + BM * (kQ5k ? kQ5kTileBytes / kQ4kTileRows : kQ4kBytes);
  static constexpr int kD = kX + BN * kXRow<kTiles>;
  static constexpr int kM = kD + BN * 4;
  // The two halves of the packed sums, 64 bytes apart in banks: lanes reading both halves of
  // eight rows (one LDS.64 each) meet no conflict.
  static constexpr int kMHalf = BN * 8 + 64;
  static constexpr int kBytes = (kM + 2 * kMHalf + 127) / 128 * 128;
};

// Four 8x8 b16 matrices: lane l gives the address of row l % 8 of matrix l / 8 and receives, of
// each matrix, the 4 bytes at 4 (l % 4) of row l / 4.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// A block of WM x WN warps, each multiplying MT m-tiles by NT n-tiles; eight warps per SM (the
// register budget: ~220 per thread for MT = NT = 4). kMulti: slots of several super-blocks
// (n_in > 32 * 256); the slot sums then stay in registers and the running totals move to
// shared memory (touched once per slot), so both variants hold two values per output.
// kTiles: the weights in the tile layout (quant/q4k_tiles.h), copied as they lie (a tile's
// super-block is 2304 consecutive bytes: 144 coalesced 16-byte copies); a lane then reads its
// m-tile's quants for a sub-block pair in one conflict-free 16-byte load (rows g and g + 8,
// quant bytes 8c .. 8c + 7), which is a permutation of the mma's k order, so its activations
// are read in the same permutation (two 8-byte loads per n-tile, as the decode kernel does).
// Copying the tiles back into GGUF order cost a fifth of the prefill speed (H200, session 9).
// kQ5k (with kTiles): Q5_K tiles (quant/q5k_tiles.h), copied the same way (176 16-byte copies a
// tile's super-block); a lane also reads its m-tile's high-bit word of the pair (4 bytes, the
// warp's 128 in distinct banks) and makes the operands as imma_matmul.cu's kQ5k variant does.
template <int MT, int NT, int WM, int WN, bool kMulti, bool kTiles, bool kQ5k = false>
__global__ void __launch_bounds__(WM* WN* kWarp, WM* WN >= 8 ? 1 : 8 / (WM * WN))
    imma_gemm_kernel(const Segments segs, int n_sb, int per_slot, const int8_t* __restrict__ xq,
                     const float* __restrict__ xd, const uint2* __restrict__ xm, int n_in, int rows_pad, int rows) {
  static_assert(!kQ5k || kTiles, "Q5_K is read as tiles only");
  constexpr int BM = 16 * MT * WM, BN = 8 * NT * WN, kThreads = WM * WN * kWarp;
  constexpr int kTileBytes = kQ5k ? kQ5kTileBytes : kQ4kTileBytes;
  constexpr int kLoMul = kQ5k ? 8 : 16;  // the high operand's multiple of the value it stands for
  using S = Stage<BM, BN, kTiles, kQ5k>;
  constexpr int kXRowB = kXRow<kTiles>;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t smem_s = uint32_t(__cvta_generic_to_shared(smem));

  const int tid = int(threadIdx.x), lane = tid % kWarp, warp = tid / kWarp;
  const int g = lane / 4, c = lane % 4;
  const int wm0 = (warp / WN) * 16 * MT, wn0 = (warp % WN) * 8 * NT;  // the warp's sub-tile
  int seg = 0;
#pragma unroll
  for (int i = 1; i < kMaxSegments; ++i)
    if (i < segs.n && int(blockIdx.y) >= segs.first_block[i]) seg = i;
  const uint8_t* const w = segs.w[seg];
  const size_t row_bytes = segs.row_bytes[seg];
  const int64_t n_out = segs.n_out[seg];
  const int64_t o0 = int64_t(int(blockIdx.y) - segs.first_block[seg]) * BM;
  const int r0 = int(blockIdx.x) * BN;

  // Copies of super-block sb into stage st; rows past n_out or rows come in as zeros.
  auto load_w = [&](int st, int sb) {
    const uint32_t dst = smem_s + st * S::kBytes + S::kW;
    if constexpr (kTiles) {
      constexpr int kTileChunks = kTileBytes / 16;
#pragma unroll 1
      for (int i = tid; i < (BM / kQ4kTileRows) * kTileChunks; i += kThreads) {
        const int t = i / kTileChunks, chunk = i % kTileChunks;
        const bool live = o0 + kQ4kTileRows * t < n_out;  // a live tile's padding rows are stored
        const int64_t tile = live ? o0 / kQ4kTileRows + t : 0;
        const uint8_t* src = w + (size_t(tile) * size_t(n_sb) + size_t(sb)) * kTileBytes + 16 * chunk;
        cp_async16(dst + t * kTileBytes + 16 * chunk, src, live);
      }
    } else {
#pragma unroll 1
      for (int i = tid; i < BM * kWChunks; i += kThreads) {
        const int row = i / kWChunks, chunk = i % kWChunks;
        const bool live = o0 + row < n_out;
        const uint8_t* src = w + size_t(live ? o0 + row : 0) * row_bytes + size_t(sb) * kQ4kBytes + 16 * chunk;
        cp_async16(dst + row * kQ4kBytes + 16 * chunk, src, live);
      }
    }
  };
  auto load_x = [&](int st, int sb) {
    const uint32_t dst = smem_s + st * S::kBytes;
#pragma unroll 1
    for (int i = tid; i < BN * (kSb / 16); i += kThreads) {
      const int row = i / (kSb / 16), chunk = i % (kSb / 16);
      const bool live = r0 + row < rows;
      const int8_t* src = xq + size_t(live ? r0 + row : 0) * size_t(n_in) + size_t(sb) * kSb + 16 * chunk;
      cp_async16(dst + S::kX + row * kXRowB + 16 * chunk, src, live);
    }
    // Scales 4 rows a copy, packed sums 2 rows a copy per half: whole copies lie below rows_pad
    // (a multiple of 8) or above it.
#pragma unroll 1
    for (int i = tid; i < BN / 4 + BN; i += kThreads) {
      if (i < BN / 4) {
        const bool live = r0 + 4 * i < rows_pad;
        cp_async16(dst + S::kD + 16 * i, xd + size_t(sb) * rows_pad + (live ? r0 + 4 * i : 0), live);
      } else {
        const int k = i - BN / 4, half = k / (BN / 2), row = 2 * (k % (BN / 2));
        const bool live = r0 + row < rows_pad;
        const uint2* src = xm + (size_t(sb) * 2 + half) * rows_pad + (live ? r0 + row : 0);
        cp_async16(dst + S::kM + half * S::kMHalf + 8 * row, src, live);
      }
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
    const uint32_t ws_s = smem_s + st * S::kBytes + S::kW, xs_s = smem_s + st * S::kBytes + S::kX;

    // Header words of this thread's weight rows wm0 + 16 mt + g + 8 h (d and dmin, then the 12
    // scale bytes), read where used: held for the whole super-block they cost ~24 registers.
    auto header = [&](int mt, int h) {
      if constexpr (kTiles)
        return reinterpret_cast<const uint32_t*>(ws + (wm0 / 16 + mt) * kTileBytes + kQ4kTileHeaders +
                                                 16 * (g + 8 * h));
      else
        return reinterpret_cast<const uint32_t*>(ws + (wm0 + 16 * mt + g + 8 * h) * kQ4kBytes);
    };

    // isum = 16 * sum_j sc_j * dot_j, exact (as in the decode kernel).
    int isum[MT][NT][4];
    zero_accumulators(isum);
    // The pair loop is not unrolled, and the scale word's choice below is a branch: each keeps
    // the compiler from hoisting more fragments than fit the registers (with either, it spills).
#pragma unroll 1
    for (int i = 0; i < 4; ++i) {  // sub-block pair i: sub-blocks 2i (low nibbles) and 2i + 1 (high)
      uint32_t b[NT][4];  // per n-tile: sub-block 2i's two B registers, then 2i + 1's
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        if constexpr (kTiles) {  // activations 8c .. 8c + 7 of each sub-block (the tiles' k order)
          const uint8_t* xrow = smem + st * S::kBytes + S::kX + (wn0 + 8 * nt + g) * kXRowB + 64 * i + 8 * c;
          const uint2 lo = *reinterpret_cast<const uint2*>(xrow), hi = *reinterpret_cast<const uint2*>(xrow + 32);
          b[nt][0] = lo.x, b[nt][1] = lo.y, b[nt][2] = hi.x, b[nt][3] = hi.y;
        } else {
          ldsm_x4(b[nt], xs_s + (wn0 + 8 * nt + (lane & 7)) * kXRowB + 64 * i + 16 * (lane >> 3));
        }
      }
      // A fragments: rows g / g + 8, bytes 4c.. / 16 + 4c.. of the pair's 32 bytes (tiles: bytes
      // 8c.. / 8c + 4..). The next m-tile's is loaded before this one's mmas, so its latency
      // hides behind them. Q5_K: f, the lane's high bits of the pair.
      auto load_a = [&](int mt, uint32_t(&q)[4], uint32_t& f) {
        if constexpr (kTiles) {  // one 16-byte word: row g's 8 bytes, then row g + 8's
          const uint8_t* const tile = ws + (wm0 / 16 + mt) * kTileBytes;
          const uint4 v = *reinterpret_cast<const uint4*>(tile + kQ4kTileQuantStride * i + 16 * lane);
          q[0] = v.x, q[1] = v.z, q[2] = v.y, q[3] = v.w;
          if constexpr (kQ5k) f = *reinterpret_cast<const uint32_t*>(tile + kQ5kTileHighBits + 128 * i + 4 * lane);
        } else {
          ldsm_x4(q, ws_s + (wm0 + 16 * mt + (lane & 15)) * kQ4kBytes + 16 + 32 * i + 16 * (lane >> 4));
        }
      };
      uint32_t q[4], q_next[4], f = 0, f_next = 0;
      load_a(0, q, f);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if (mt + 1 < MT) load_a(mt + 1, q_next, f_next);
        uint32_t a_lo[4], a_hi[4];
        if constexpr (kQ5k) {  // q[0..3] = words 0, 2, 1, 3 of the lane's 16 bytes (q5k_tiles.h)
#pragma unroll
          for (int k = 0; k < 4; ++k) a_lo[k] = q5k_low_operand(q[k]);
          a_hi[0] = q5k_high_operand<0>(q[0], f), a_hi[1] = q5k_high_operand<2>(q[1], f);
          a_hi[2] = q5k_high_operand<1>(q[2], f), a_hi[3] = q5k_high_operand<3>(q[3], f);
        } else {
#pragma unroll
          for (int k = 0; k < 4; ++k) a_lo[k] = q[k] & 0x0F0F0F0Fu, a_hi[k] = q[k] & 0xF0F0F0F0u;
        }
        int sc_lo[2], sc_hi[2];  // rows g, g + 8: the scales of sub-blocks 2i, 2i + 1 (k4_scale_min)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t* hw = header(mt, h);
          const uint32_t sc = i < 2 ? hw[1] & 0x3F3F3F3Fu : (hw[3] & 0x0F0F0F0Fu) | ((hw[1] >> 2) & 0x30303030u);
          sc_lo[h] = kLoMul * byte_of(sc, (2 * i) % 4);
          sc_hi[h] = byte_of(sc, (2 * i + 1) % 4);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          int dl[4], dh[4];
          imma_16832(dl, a_lo, b[nt][0], b[nt][1]);
          imma_16832(dh, a_hi, b[nt][2], b[nt][3]);
#pragma unroll
          for (int j = 0; j < 4; ++j) {  // two multiply-adds (the sum is exact in any order)
            isum[mt][nt][j] += sc_lo[j / 2] * dl[j];
            isum[mt][nt][j] += sc_hi[j / 2] * dh[j];
          }
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) q[k] = q_next[k];
        f = f_next;
      }
    }

    // Float part, once per super-block and (row, output). mn: the msum A operand, the mins of
    // sub-blocks 4c..4c+3 of rows g, g + 8 for c < 2 (quant/blocks.h k4_scale_min), zeros for the
    // unused k 8..15.
    float d[MT][2], dmin[MT][2];
    uint32_t mn[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t* hw = header(mt, h);
        q4k_d_dmin(hw[0], d[mt][h], dmin[mt][h]);
        const uint32_t mn0 = hw[2] & 0x3F3F3F3Fu, mn1 = ((hw[3] >> 4) & 0x0F0F0F0Fu) | ((hw[2] >> 2) & 0x30303030u);
        mn[mt][h] = c == 0 ? mn0 : c == 1 ? mn1 : 0u;
      }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int col = wn0 + 8 * nt;
      const float2 dx = *reinterpret_cast<const float2*>(smem + st * S::kBytes + S::kD + 4 * (col + 2 * c));
      const uint2 xsum =
          *reinterpret_cast<const uint2*>(smem + st * S::kBytes + S::kM + (c & 1) * S::kMHalf + 8 * (col + g));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        int lo[4], hi[4];
        imma_16816_uu(lo, mn[mt][0], mn[mt][1], xsum.x, kMsumMagic);
        imma_16816_us(hi, mn[mt][0], mn[mt][1], xsum.y, 0);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float msum = msum_float(lo[j], hi[j]);
          const float t =
              q4k_sb_term<kLoMul>(j % 2 ? dx.y : dx.x, d[mt][j / 2], dmin[mt][j / 2], isum[mt][nt][j], msum);
          float& r = run[mt][nt][j];
          // kMulti: the slot's sum. Otherwise every super-block is a slot and the total is
          // (0 + t0) + (0 + t1) + ...; r + t gives the same bits from r = +0: r is never -0
          // (+0 + -0 = +0, and a sum is -0 only when both terms are), so r + (0 + t) = r + t.
          r = __fadd_rn(r, t);
        }
      }
    }
    if constexpr (kMulti) end_of_super_block(run, tot_s, tid, kThreads, first_slot, left_in_slot, per_slot, sb, n_sb);
    else first_slot = false;
  }

  float* const y = segs.y[seg];
  const int64_t y_stride = segs.y_stride[seg];
  store_gemm_outputs<kMulti>(run, tot_s, tid, kThreads, o0 + wm0, r0 + wn0, g, c, n_out, rows, y, y_stride);
}

template <int MT, int NT, int WM, int WN, bool kMulti, bool kTiles, bool kQ5k>
void gemm_launch(const Segments& segs, int n_sb, int per_slot, const int8_t* xq, const float* xd, const uint2* xm,
                 int n_in, int rows, int rows_pad, cudaStream_t s) {
  constexpr int BM = 16 * MT * WM, BN = 8 * NT * WN;
  constexpr auto kernel = imma_gemm_kernel<MT, NT, WM, WN, kMulti, kTiles, kQ5k>;
  constexpr size_t smem =
      kStages * size_t(Stage<BM, BN, kTiles, kQ5k>::kBytes) + (kMulti ? size_t(BM) * BN * sizeof(float) : 0);
  // Above the default 48 KiB of dynamic shared memory; all of the unified L1 as shared memory, so
  // that two 128 x 64 blocks fit an SM.
  // A refusal shows as the launch error, which the caller checks.
  (void)raise_smem_limit<kernel>(int(smem), /*carveout_max=*/true);
  const Segments t = segments_in_blocks_of(segs, BM);
  launch(kernel, dim3(ceil_div(rows, BN), unsigned(t.first_block[t.n])), dim3(WM * WN * kWarp), smem, s, t, n_sb,
         per_slot, xq, xd, xm, n_in, rows_pad, rows);
}

template <int MT, int NT, int WM, int WN>
void gemm_launch(const Segments& segs, int n_sb, const Slots& slots, const int8_t* xq, const float* xd,
                 const uint2* xm, int n_in, int rows, int rows_pad, cudaStream_t s) {
  auto go = [&](auto multi, auto tiles, auto q5k) {
    gemm_launch<MT, NT, WM, WN, decltype(multi)::value, decltype(tiles)::value, decltype(q5k)::value>(
        segs, n_sb, slots.per_slot, xq, xd, xm, n_in, rows, rows_pad, s);
  };
  using T = std::true_type;
  using F = std::false_type;
  if (segs.q5k_tiles) slots.per_slot > 1 ? go(T{}, T{}, T{}) : go(F{}, T{}, T{});
  else if (slots.per_slot > 1) segs.q4k_tiles ? go(T{}, T{}, F{}) : go(T{}, F{}, F{});
  else segs.q4k_tiles ? go(F{}, T{}, F{}) : go(F{}, F{}, F{});
}

}  // namespace

// Warps of 64 x 32 outputs (16 mma tiles: each A fragment serves 4 n-tiles, each B fragment 4
// m-tiles) in two block shapes. 128 x 128, eight warps, one block per SM: 0.013 bytes from L2
// per multiply-add. A grid of those that fills fewer than 3 waves loses up to a third of its
// time to the last partial wave; then 128 x 64 blocks of four warps, two per SM, halve that
// loss for a third more L2 traffic per multiply-add.
// The third shape, 128 x 128 with sixteen warps of 32 x 32 (each B fragment serves 2 m-tiles;
// 126 registers, so the 16 warps fill one SM's registers), is there for the bench: Nsight
// Compute found the two above latency-bound at 8 warps an SM (session 7), and this one has
// twice the warps to hide it, for a third more shared-memory reads per mma. Not yet measured.
void imma_gemm(const Segments& segs, int64_t n_in, const int8_t* xq, const float* xd, const uint2* xm, int rows,
               int rows_pad, cudaStream_t s, ImmaGemmShape shape) {
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
      return gemm_launch<2, 4, 4, 4>(segs, n_sb, slots, xq, xd, xm, int(n_in), rows, rows_pad, s);
    case ImmaGemmShape::k128x128Warps8:
      return gemm_launch<4, 4, 2, 4>(segs, n_sb, slots, xq, xd, xm, int(n_in), rows, rows_pad, s);
    default:
      return gemm_launch<4, 4, 2, 2>(segs, n_sb, slots, xq, xd, xm, int(n_in), rows, rows_pad, s);
  }
}

void imma_quantize(const float* x, int64_t n_in, int rows, void* scratch, cudaStream_t s) {
  const int rows_pad = (rows + 7) / 8 * 8;
  const Q8kLayout l = q8k_layout(n_in, rows_pad);
  auto* base = static_cast<uint8_t*>(scratch);
  launch(quantize_q8k_k, dim3(unsigned(n_in / kSb), unsigned(rows_pad)), kWarp, 0, s,
      x, rows, rows_pad, int(n_in), reinterpret_cast<int8_t*>(base + l.q), reinterpret_cast<float*>(base + l.d),
      reinterpret_cast<uint2*>(base + l.m));
}

void imma_gemm_quantized(const Weight& w, float* y, int rows, const void* scratch, cudaStream_t s, ImmaGemmShape shape) {
  if (w.type == GgmlType::Q8_0) return imma_q80_gemm_quantized(w, y, rows, scratch, s, shape);
  if (w.type == GgmlType::Q6_K) return imma_q6k_gemm_quantized(w, y, rows, scratch, s);
  const int rows_pad = (rows + 7) / 8 * 8;
  const Q8kLayout l = q8k_layout(w.n_in, rows_pad);
  const auto* base = static_cast<const uint8_t*>(scratch);
  const Weight* ws[1] = {&w};
  float* ys[1] = {y};
  if (w.type == GgmlType::IQ4_XS && !w.tiles) throw std::invalid_argument("imma_gemm_quantized: IQ4_XS rows");
  for_each_launch(ws, ys, 1, [&](const Segments& segs) {
    if (w.type == GgmlType::IQ4_XS)
      return imma_iq4xs_gemm(segs, w.n_in, reinterpret_cast<const int8_t*>(base + l.q),
                             reinterpret_cast<const float*>(base + l.d), rows, rows_pad, s, shape);
    imma_gemm(segs, w.n_in, reinterpret_cast<const int8_t*>(base + l.q), reinterpret_cast<const float*>(base + l.d),
                     reinterpret_cast<const uint2*>(base + l.m), rows, rows_pad, s, shape);
  });
}

}  // namespace df::cuda
