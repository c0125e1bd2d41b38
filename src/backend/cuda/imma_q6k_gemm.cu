// The tiled prefill product for Q6_K weights: imma_q6k.cu's integer tensor-core math for calls of
// more than kImmaGemmMinRows rows, each output bit-identical to what that kernel computes for the
// row alone. It is to imma_q6k.cu what imma_gemm.cu is to imma_matmul.cu (read that header too).
//
// Why, in numbers (27B shapes, one 512-row prefill product; H200: 132 SMs at ~1.98 GHz).
//   ffn_down, n_in 17408 -> n_out 5120: weights 5120 x 68 x 210 B = 73.1 MB; activations 8.9 MB of
//     int8 plus 1.3 MB of scales and per-16 sums; 45.6 G integer multiply-adds = 22.3 M
//     mma.m16n8k16 (2,048 each) + 2.8 M for the -32 offsets; 2.85 G scale multiply-adds (IMAD,
//     one per output, row and 16-element group: 64 a clock per SM, 171 us at best, the floor).
//   attn_v, n_in 5120 -> n_out 1024: weights 4.3 MB, activations 2.6 MB, 2.7 G multiply-adds,
//     168 M scale IMADs (10 us at best; 128 blocks of 64 x 64, see Tiles).
//   The decode kernel streams every weight once per 32 activation rows (16 times: 1.17 GB through
//   L2 for ffn_down) and re-unpacks it each time; the 48 ms that Q6_K products take in a 512-row
//   prefill of the 27B-shaped mix (32 ffn_down, 8 attn_v) put it at ~60 TOPS, ~1.5 ms per ffn_down.
//   Here a weight is read once per 64-row tile (585 MB from L2 for ffn_down, plus 408 MB of
//   activations, once per 128 outputs), each unpacked fragment serves 4 n-tiles. The first
//   version (warps of 32 x 32, see Tiles) took 950 us a call (96 TOPS); the scale IMADs bound it
//   at 171 us, shared memory at ~150 us, the L2 (~1 GB) at ~200 us.
//
// Bit identity. Per (row, output) and super-block both kernels form the same exact integers:
// isum = sum_j sc_j dot_j (mma sums are exact; the same lane order as the decode kernel, as this
// uses its activation layout) and off = sum_j sc_j bsum_j (the same two mma on the same byte
// planes), then the same float operations: acc = fma(dx * d, float(isum - 32 off), acc), acc
// starting at 0.0f in each slot (slots_of), the slots' sums added in slot order, the first as it
// is. A running slot sum beside the total gives that order in one pass over the super-blocks;
// with one super-block a slot (n_in <= 8192) the slot sum is fma(..., 0.0f) and only the total
// is kept.
//
// Shared memory. Weights: per tile row the 53 aligned words [block - rot, block - rot + 212)
// (q6k_rot: odd super-blocks start at 2 mod 4), copied with 4-byte cp.async so that word i sits
// where the decode kernel's i-th load reads it, and its lanes' realignment (one PRMT with the
// next span's word) carries over unchanged. Rows 240 bytes apart (60 words, -4 mod 32 banks): the
// 8 rows x 4 consecutive words a warp's load touches fall in distinct banks. (16-byte copies of
// the enclosing aligned range would take 14 copies a row instead of 53, but leave each row's data
// at its own offset mod 16: 2-way conflicts on fragment loads.) Activations: 256 bytes a
// row, its 16-byte chunk (c, t) (lane c's quarter t) stored at chunk (4t + c) ^ (4 (row & 1)),
// so that each quarter-warp of a 16-byte load (two rows, four lanes each) meets eight distinct
// bank groups; per-16 sums 32 bytes a row, scales 4.
//
// Tiles. Warps of 16 x 32 outputs (MT = 1, NT = 4: each unpacked weight fragment serves 4
// n-tiles; 113-117 registers, no spills), so that 16 warps fit an SM at 128 registers a thread.
// The first version's warps of 32 x 32 (186 registers: eight warps, one 128 x 64 block an SM)
// reached 96 TOPS on ffn_down at 512 rows, ~4.5 times the time of its scale IMADs per
// super-block: the latency of the shared-memory loads, the mma and the cp.async stages showed
// through two warps a scheduler. Blocks by the weights' shape (imma_q6k_gemm): 128 x 64, 16
// warps, three stages (177 KiB with the slot totals: one block an SM) where a 512-row call of
// them fills two waves or more (ffn_down: 320 blocks); else 64 x 64, 8 warps, two stages (83
// KiB: two blocks an SM; attn_v: 128 blocks, where 128 x 64 ones took 64 SMs). The cost: each
// activation fragment now serves one m-tile, so a 128 x 64 tile reads ~180 KB of shared memory
// a super-block (~1.4 k cycles at 128 B a cycle, plus ~0.4 k of cp.async writes) against ~2 k
// cycles of scale IMADs (64 a cycle), up from ~120 KB. Warps of 64 x 32 (128 x 128 blocks, half
// the weight copies per output) spill with the fragments of two quarters held (255 registers).
// Measured (H200, session 6): ffn_down at 512 rows 950 -> 854 us a call (106 TOPS), 131 TOPS at
// 4096 rows; the Q4_K GEMM reaches 192 / 238 TOPS on gate/up, so Q6_K's unpack and scale work
// per mma is still the gap.
//
// Tiles (kTiles; quant/q6k_tiles.h): a tile's super-block is copied as it lies (210 coalesced
// 16-byte copies, 3360 bytes a 16-row m-tile instead of 16 x 240), and a lane reads, per half
// super-block and m-tile, its ql and qh words as three 16-byte loads (16 bytes a lane apart: no
// bank conflicts) already in slot order, so no realigning PRMT; scale words as on rows (slot
// j + rot of group j), the offset mma's A operand as one 8-byte load, the d's as one word. The
// same integers and float operations as on GGUF rows: the same bits.
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/imma_common.cuh"
#include "backend/cuda/imma_q6k.cuh"
#include "backend/cuda/imma_tiles.cuh"

namespace df::cuda {

namespace {

constexpr int kWWords = 53;   // aligned words covering a block: [block - rot, block - rot + 212)
constexpr int kWRow = 240;    // bytes per weight row in shared memory
constexpr int kXRow = kSb;    // bytes per activation row in shared memory
constexpr int kSRow = 32;     // bytes of per-16 sums per activation row (4 x uint2)
constexpr int kSmWarps = 16;  // warps an SM: blocks of 16 warps alone, of 8 two to an SM

// One pipeline stage for a BM x BN tile: weights, activations, activation scales, per-16 sums.
// Tiles: BM / 16 tile super-blocks of kQ6kTileBytes, as they lie.
template <int BM, int BN, bool kTiles = false>
struct Q6kStage {
  static constexpr int kW = 0;
  static constexpr int kX = kW + (kTiles ? BM / kQ6kTileRows * kQ6kTileBytes : BM * kWRow);
  static constexpr int kD = kX + BN * kXRow;
  static constexpr int kS = kD + BN * 4;
  static constexpr int kBytes = (kS + BN * kSRow + 127) / 128 * 128;
};

// Where chunk (c, t) of an activation row sits in its shared-memory row (see the header).
__device__ __forceinline__ int x_chunk(int row, int c, int t) { return (4 * t + c) ^ (4 * (row & 1)); }

// Tiles: half hh's quant words are 3 hh + t (t < 3), read with hh a variable (the half loop is
// not unrolled), so the kernel spells out q6k_tile_word / q6k_tile_pair for that loop.
constexpr bool tile_words_agree() {
  for (int hh = 0; hh < 2; ++hh) {
    for (int jj = 0; jj < 4; ++jj)  // ql span 4 hh + jj: word 2 (jj / 2) + h of quant word 3 hh + jj % 2
      if (q6k_tile_word(4 * hh + jj) != 3 * hh + jj % 2 || q6k_tile_pair(4 * hh + jj) != jj / 2) return false;
    for (int m = 0; m < 2; ++m)  // qh span 8 + 2 hh + m: word 2m + h of quant word 3 hh + 2
      if (q6k_tile_word(8 + 2 * hh + m) != 3 * hh + 2 || q6k_tile_pair(8 + 2 * hh + m) != m) return false;
  }
  return true;
}
static_assert(tile_words_agree(), "the GEMM's reading of quant/q6k_tiles.h");

// One mma.m16n8k16 (u8 weights x s8 activations) from zero: a group's exact integer dot.
__device__ __forceinline__ void dot_16816(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b) {
  asm("mma.sync.aligned.m16n8k16.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(b), "r"(0));
}

// kStages: super-blocks in flight (kStages - 1 load while one computes). kTiles: the weights in
// the tile layout (see the header).
template <int MT, int NT, int WM, int WN, int kStages, bool kMulti, bool kTiles = false>
__global__ void __launch_bounds__(WM* WN* kWarp, kSmWarps / (WM * WN))
    imma_q6k_gemm_kernel(const Segments segs, int n_sb, int per_slot, const int8_t* __restrict__ xq,
                         const float* __restrict__ xd, const uint2* __restrict__ xs, int rows_pad, int rows) {
  constexpr int BM = 16 * MT * WM, BN = 8 * NT * WN, kWarps = WM * WN, kThreads = kWarps * kWarp;
  using S = Q6kStage<BM, BN, kTiles>;
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t smem_s = uint32_t(__cvta_generic_to_shared(smem));

  const int tid = int(threadIdx.x), lane = tid % kWarp, warp = tid / kWarp;
  const int g = lane / 4, c = lane % 4;
  const int wm0 = (warp / WN) * 16 * MT, wn0 = (warp % WN) * 8 * NT;  // the warp's sub-tile
  const BlockSegment bs = block_segment(segs, BM);
  const int r0 = int(blockIdx.x) * BN;

  // Copies of super-block sb into stage st; rows past n_out or rows_pad come in as zeros (their
  // sources: row 0's, mapped). A warp copies a row's 53 words per pass. Tiles: the tiles' super-
  // blocks as they lie, 16 bytes a copy; tiles past n_out as zeros (sources: tile 0's); a live
  // tile's rows past n_out hold its last row.
  auto load_w = [&](int st, int sb) {
    const uint32_t dst = smem_s + st * S::kBytes + S::kW;
    if constexpr (kTiles) {
      constexpr int kChunks = kQ6kTileBytes / 16;
#pragma unroll 1
      for (int i = tid; i < (BM / kQ6kTileRows) * kChunks; i += kThreads) {
        const int t = i / kChunks, chunk = i % kChunks;
        const bool live = bs.o0 + kQ6kTileRows * t < bs.n_out;
        const int64_t tile = live ? bs.o0 / kQ6kTileRows + t : 0;
        const uint8_t* src = bs.w + (size_t(tile) * size_t(n_sb) + size_t(sb)) * kQ6kTileBytes + 16 * chunk;
        cp_async16(dst + t * kQ6kTileBytes + 16 * chunk, src, live);
      }
    } else {
      const size_t from = size_t(sb) * kQ6kBytes - q6k_rot(sb);
#pragma unroll 1
      for (int row = warp; row < BM; row += kWarps) {
        const bool live = bs.o0 + row < bs.n_out;
        const uint8_t* src = bs.w + (live ? size_t(bs.o0 + row) * bs.row_bytes + from : 0);
        cp_async4(dst + row * kWRow + 4 * lane, src + 4 * lane, live);
        if (lane < kWWords - kWarp) cp_async4(dst + row * kWRow + 4 * (kWarp + lane), src + 4 * (kWarp + lane), live);
      }
    }
  };
  auto load_x = [&](int st, int sb) {
    const uint32_t dst = smem_s + st * S::kBytes;
    const size_t base = size_t(sb) * rows_pad;  // row 0 of super-block sb
#pragma unroll 1
    for (int i = tid; i < BN * (kSb / 16); i += kThreads) {
      const int row = i / (kSb / 16), chunk = i % (kSb / 16);  // chunk = 4c + t
      const bool live = r0 + row < rows_pad;
      const int8_t* src = xq + (base + (live ? r0 + row : 0)) * kSb + 16 * chunk;
      cp_async16(dst + S::kX + row * kXRow + 16 * x_chunk(row, chunk / 4, chunk % 4), src, live);
    }
    // Scales 4 rows a copy, per-16 sums half a row a copy (rows_pad is a multiple of 8).
#pragma unroll 1
    for (int i = tid; i < BN / 4 + 2 * BN; i += kThreads) {
      if (i < BN / 4) {
        const bool live = r0 + 4 * i < rows_pad;
        cp_async16(dst + S::kD + 16 * i, xd + base + (live ? r0 + 4 * i : 0), live);
      } else {
        const int row = (i - BN / 4) / 2, half = (i - BN / 4) % 2;
        const bool live = r0 + row < rows_pad;
        cp_async16(dst + S::kS + row * kSRow + 16 * half, xs + (base + (live ? r0 + row : 0)) * 4 + 2 * half, live);
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
  const uint32_t realign = c == 0 ? 0x3254u : 0x3210u;  // odd super-blocks (imma_q6k.cu's header)

  // One super-block from stage st; kRot = q6k_rot(sb), the same for every row of the tile.
  auto step = [&](auto rot_tag, int st) {
    constexpr int kRot = decltype(rot_tag)::value;
    const uint8_t* const wst = smem + st * S::kBytes + S::kW;
    const uint8_t* const xst = smem + st * S::kBytes + S::kX;
    // Word i of the window of weight row wm0 + 16 mt + g + 8 h.
    auto wword = [&](int mt, int h, int i) {
      return *reinterpret_cast<const uint32_t*>(wst + (wm0 + 16 * mt + g + 8 * h) * kWRow + 4 * i);
    };
    // Tiles: m-tile mt's tile super-block; word i (< 4) of a 16-byte value.
    auto tile_of = [&](int mt) { return wst + (wm0 / kQ6kTileRows + mt) * kQ6kTileBytes; };
    auto word = [](const uint4& x, int i) { return i == 0 ? x.x : i == 1 ? x.y : i == 2 ? x.z : x.w; };
    // In odd super-blocks lane 0 realigns its word of 16-byte span s with bytes 0, 1 of span
    // s + 1's first word (the decode kernel's PRMT): the raw word of the lane's next span where
    // that is loaded anyway, else one more load.
    auto realigned = [&](uint32_t v, uint32_t next) { return kRot == 0 ? v : __byte_perm(v, next, realign); };

    int isum[MT][NT][4];  // sum_j sc_j * dot_j, exact
    zero_accumulators(isum);

    // Half hh: groups 8 hh .. 8 hh + 7, quarters t = 2 hh (low nibbles) and 2 hh + 1 (high), which
    // take the same ql and qh words. Not unrolled: it keeps the fragments within the registers.
#pragma unroll 1
    for (int hh = 0; hh < 2; ++hh) {
      uint4 b[2][NT];  // per quarter and n-tile: this lane's 16 activation bytes (four groups)
#pragma unroll
      for (int q = 0; q < 2; ++q)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
          b[q][nt] = *reinterpret_cast<const uint4*>(xst + (wn0 + 8 * nt + g) * kXRow + 16 * x_chunk(g, c, 2 * hh + q));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        // Rows g, g + 8: this lane's ql words (spans 4 hh + jj) and qh words (spans 8 + 2 hh + m),
        // and the window words holding the scales of groups 8 hh .. 8 hh + 7 (bytes 192 + kRot + j).
        uint32_t ql[2][4], qh[2][2], scw[2][3];
        if constexpr (kTiles) {
          // Quant words 3 hh + t (q6k_tiles.h): t < 2, ql spans 4 hh + t (words h) and 4 hh + t + 2
          // (words 2 + h); t = 2, qh spans 8 + 2 hh (words h) and 9 + 2 hh (words 2 + h), of row
          // g + 8h. The scale words of slots 4i'..4i'+3, i' = (2 hh + i) % 4, at 128 (i' / 2) +
          // 16 g + 8 (i' % 2) + 4 h.
          const uint8_t* const tp = tile_of(mt);
          uint4 v[3];
#pragma unroll
          for (int t = 0; t < 3; ++t)
            v[t] = *reinterpret_cast<const uint4*>(tp + kQ6kTileQuantStride * (3 * hh + t) + 16 * lane);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) ql[h][jj] = word(v[jj % 2], 2 * (jj / 2) + h);
#pragma unroll
            for (int m = 0; m < 2; ++m) qh[h][m] = word(v[2], 2 * m + h);
#pragma unroll
            for (int i = 0; i < 3; ++i) {
              const int cs = (2 * hh + i) % 4;  // i' above
              const uint8_t* const at = tp + kQ6kTileScales + 128 * (cs / 2) + 16 * g + 8 * (cs % 2) + 4 * h;
              scw[h][i] = i < 2 || kRot != 0 ? *reinterpret_cast<const uint32_t*>(at) : 0u;
            }
          }
        } else {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            uint32_t raw_l[4], raw_h[2];
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) raw_l[jj] = wword(mt, h, 4 * (4 * hh + jj) + c);
#pragma unroll
            for (int m = 0; m < 2; ++m) raw_h[m] = wword(mt, h, 4 * (8 + 2 * hh + m) + c);
            const uint32_t next_l = kRot == 0 ? 0u : wword(mt, h, 4 * (4 * hh + 4));
            const uint32_t next_h = kRot == 0 ? 0u : wword(mt, h, 4 * (10 + 2 * hh));
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) ql[h][jj] = realigned(raw_l[jj], jj < 3 ? raw_l[jj + 1] : next_l);
            qh[h][0] = realigned(raw_h[0], raw_h[1]);
            qh[h][1] = realigned(raw_h[1], next_h);
#pragma unroll
            for (int i = 0; i < 3; ++i) scw[h][i] = i < 2 || kRot != 0 ? wword(mt, h, 48 + 2 * hh + i) : 0u;
          }
        }
#pragma unroll
        for (int q = 0; q < 2; ++q)
#pragma unroll
          for (int jj = 0; jj < 4; ++jj) {  // group j = 8 hh + 4 q + jj: chunk k = 2q + jj / 2, part m = jj % 2
            const int k = 2 * q + jj / 2, m = jj % 2, i = 4 * q + jj;
            const uint32_t a0 = q6_values(ql[0][jj], qh[0][m], k);
            const uint32_t a1 = q6_values(ql[1][jj], qh[1][m], k);
            const int byte = kRot + i;  // of the scale words
            const int sc0 = signed_byte(scw[0][byte / 4], byte % 4), sc1 = signed_byte(scw[1][byte / 4], byte % 4);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
              const uint4& x = b[q][nt];
              const uint32_t bw = jj == 0 ? x.x : jj == 1 ? x.y : jj == 2 ? x.z : x.w;
              int d[4];
              dot_16816(d, a0, a1, bw);
              isum[mt][nt][0] += sc0 * d[0];
              isum[mt][nt][1] += sc0 * d[1];
              isum[mt][nt][2] += sc1 * d[2];
              isum[mt][nt][3] += sc1 * d[3];
            }
          }
      }
    }

    // Float part, once per super-block and (row, output), as the decode kernel's: the offset
    // sum_j sc_j * bsum_j from two mma (A: scale slots 4c..4c+3 of rows g, g + 8; B: the high,
    // then the low byte planes of the per-16 sums), then acc = fma(dx * d, isum - 32 off, acc).
    const uint8_t* const dsm = smem + st * S::kBytes + S::kD;
    const uint8_t* const sst = smem + st * S::kBytes + S::kS;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      uint32_t asc[2];
      float dw[2];
      if constexpr (kTiles) {  // (the lane's scale words, then the d's of rows g, g + 8 in one word)
        const uint8_t* const tp = tile_of(mt);
        const uint2 own = *reinterpret_cast<const uint2*>(tp + kQ6kTileScales + 128 * (c / 2) + 16 * g + 8 * (c % 2));
        const uint32_t dd = *reinterpret_cast<const uint32_t*>(tp + kQ6kTileD + 4 * g);
        asc[0] = own.x, asc[1] = own.y;
        dw[0] = __half2float(__ushort_as_half(static_cast<unsigned short>(dd & 0xFFFF)));
        dw[1] = __half2float(__ushort_as_half(static_cast<unsigned short>(dd >> 16)));
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t w48 = wword(mt, h, 48), w52 = wword(mt, h, 52);
          asc[h] = kRot != 0 && c == 0 ? __byte_perm(w48, w52, 0x3254) : wword(mt, h, 48 + c);
          dw[h] = __half2float(__ushort_as_half(static_cast<unsigned short>(kRot == 0 ? w52 & 0xFFFF : w52 >> 16)));
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int col = wn0 + 8 * nt;
        const uint2 bsum = *reinterpret_cast<const uint2*>(sst + (col + g) * kSRow + 8 * c);
        const float2 dx = *reinterpret_cast<const float2*>(dsm + 4 * (col + 2 * c));
        int off[4];
        q6k_group_sums(off, asc[0], asc[1], bsum);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float scale = __fmul_rn(i % 2 ? dx.y : dx.x, dw[i / 2]);
          const float v = __int2float_rn(isum[mt][nt][i] - 32 * off[i]);
          float& r = run[mt][nt][i];
          if constexpr (kMulti) {
            r = __fmaf_rn(scale, v, r);
          } else {  // every super-block is a slot: its sum is fma(scale, v, 0.0f)
            const float sum = __fmaf_rn(scale, v, 0.0f);
            r = first_slot ? sum : __fadd_rn(r, sum);
          }
        }
      }
    }
  };

  for (int sb = 0; sb < n_sb; ++sb) {
    pipeline_advance<kStages>(sb, n_sb, load_w, load_x);
    if (q6k_rot(sb) == 0) step(std::integral_constant<int, 0>{}, sb % kStages);
    else step(std::integral_constant<int, 2>{}, sb % kStages);

    if constexpr (kMulti) end_of_super_block(run, tot_s, tid, kThreads, first_slot, left_in_slot, per_slot, sb, n_sb);
    else first_slot = false;
  }

  store_gemm_outputs<kMulti>(run, tot_s, tid, kThreads, bs.o0 + wm0, r0 + wn0, g, c, bs.n_out, rows, bs.y, bs.y_stride);
}

template <int MT, int NT, int WM, int WN, int kStages, bool kMulti, bool kTiles>
void q6k_gemm_launch(const Segments& segs, int n_sb, int per_slot, const Q6kActs& a, int rows, cudaStream_t s) {
  constexpr int BM = 16 * MT * WM, BN = 8 * NT * WN;
  constexpr auto kernel = imma_q6k_gemm_kernel<MT, NT, WM, WN, kStages, kMulti, kTiles>;
  constexpr size_t smem =
      kStages * size_t(Q6kStage<BM, BN, kTiles>::kBytes) + (kMulti ? size_t(BM) * BN * sizeof(float) : 0);
  // kSmWarps / (WM WN) blocks an SM, each with 1 KiB reserved, within the 228 KiB.
  static_assert((smem + 1024) * (kSmWarps / (WM * WN)) <= 228 * 1024, "shared memory for the blocks an SM");
  // Above the default 48 KiB of dynamic shared memory; all of the unified L1 as shared memory.
  // A refusal shows as the launch error, which the caller checks.
  (void)raise_smem_limit<kernel>(int(smem), /*carveout_max=*/true);
  const Segments t = segments_in_blocks_of(segs, BM);
  launch(kernel, dim3(ceil_div(rows, BN), unsigned(t.first_block[t.n])), dim3(WM * WN * kWarp), smem, s, t, n_sb,
         per_slot, static_cast<const int8_t*>(a.q), static_cast<const float*>(a.d), static_cast<const uint2*>(a.s),
         a.rows_pad, rows);
}

template <int MT, int NT, int WM, int WN, int kStages>
void q6k_gemm_launch(const Segments& segs, int n_sb, const Slots& slots, const Q6kActs& a, int rows, cudaStream_t s) {
  auto go = [&](auto multi, auto tiles) {
    q6k_gemm_launch<MT, NT, WM, WN, kStages, decltype(multi)::value, decltype(tiles)::value>(segs, n_sb, slots.per_slot,
                                                                                           a, rows, s);
  };
  using T = std::true_type;
  using F = std::false_type;
  if (segs.q6k_tiles) slots.per_slot > 1 ? go(T{}, T{}) : go(F{}, T{});
  else slots.per_slot > 1 ? go(T{}, F{}) : go(F{}, F{});
}

}  // namespace

// Warps of 16 x 32 (see the header) in one of two block shapes, by the weights' shape alone (so
// a row's bits never depend on the call's row count): 128 x 64 (16 warps, one block an SM, three
// stages) where a 512-row call of those fills two waves of the SMs, else 64 x 64 (8 warps, two
// blocks an SM), which puts twice the blocks on the SMs of a small n_out.
void imma_q6k_gemm(const Segments& segs, int64_t n_in, const Q6kActs& a, int rows, cudaStream_t s) {
  const int n_sb = int(n_in / kSb);
  const Slots slots = slots_of(n_sb);
  int64_t m_tiles = 0;
  for (int k = 0; k < segs.n; ++k) m_tiles += (segs.n_out[k] + 127) / 128;
  if (m_tiles * (512 / 64) >= 2 * int64_t(sm_count())) q6k_gemm_launch<1, 4, 8, 2, 3>(segs, n_sb, slots, a, rows, s);
  else q6k_gemm_launch<1, 4, 4, 2, 2>(segs, n_sb, slots, a, rows, s);
}

}  // namespace df::cuda
