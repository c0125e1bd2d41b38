// The integer tensor-core matmul for Q4_K weights: y[r][o] = sum_k W[o][k] x[r][k], every row
// count, with the activations in the CPU's Q8_K format (8-bit, one scale per 256). Calls of
// more than kImmaGemmMinRows rows go to the tiled prefill kernel (imma_gemm.cu), which gives each
// row the same bits as this one. imma_matmul_group sends Q6_K weights to imma_q6k.cu, IQ4_XS
// ones to imma_iq4xs.cu and Q8_0 ones to imma_q80.cu. Q5_K weights in their tile layout take the
// same kernels as Q4_K (the kQ5k variants; see the kernel).
//
// Why. A decode step is bound by how fast the weights stream in, and the f16 tensor-core kernel
// (mma_matmul.cu) spends ~3 instructions per weight element turning nibbles into f16, so it
// issues instructions most of the time and reads only ~1.1 TB/s. Here a nibble becomes an mma
// operand with one LOP3 per four (u8 values, or 16 x value for the high nibbles, which u8 still
// holds) and mma.sync m16n8k32 (u8 x s8 -> s32) sums 32 products of one Q4_K sub-block exactly;
// the sub-block scales and mins are applied to those exact integer sums, then the float part
// runs once per 256-element super-block, as the CPU's dot product does.
//
// Activations. quantize_q8k_k writes each activation row's Q8_K blocks exactly as
// quant/activation_quant.cpp does (same max element, same fused multiply-add rounding), so the
// integer sums equal the CPU's and the two backends differ only in float summation order. Layout
// in the scratch (q8k_layout): the int8 values row-major; per super-block and row the scale d;
// per half super-block (4 sub-blocks) and row the four sub-block sums packed as low bytes and
// high bytes, the B operands of the two small mmas that form sum_j min_j * sum_j (msum_float).
//
// Fragments. Lane (g, c) = (lane / 4, lane % 4) holds weight rows g and g + 8 of an m-tile and
// bytes 8c..8c+7 of each 32-byte pair of sub-blocks (low nibbles: sub-block 2i, high: 2i+1).
// Those 8 elements fill the lane's k slots 4c..4c+3 and 16+4c..16+4c+3; the activation operand
// takes the same 8 elements of its row (one 8-byte load), so the mma's k order is a
// permutation of the sub-block's shared by both operands and the sum is unchanged.
//
// Split and batch invariance. A row's super-blocks fall into at most 32 slots of consecutive
// ones (slots_of: a function of n_in alone). A warp sums a slot's super-blocks in order; the
// block then sums the slots in slot order. Integer sums are exact, so a row's result never
// depends on the other rows of the call or on how many warps shared the slots
// (tests/test_cuda_ops.cpp RowsAreBatchInvariant), which speculation relies on.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/imma_common.cuh"
#include "backend/cuda/imma_gemm.cuh"
#include "backend/cuda/imma_iq4xs.cuh"
#include "backend/cuda/imma_q80.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mv_units.cuh"

namespace df::cuda {

namespace {

constexpr int kMaxNt = 4;         // n-tiles per launch group: 32 activation rows
constexpr int kRowsPerGroup = 8 * kMaxNt;

// Blocks per SM the register budget must allow: 3 for one n-tile (24 warps to hide latency), 2 above.
constexpr int blocks_per_sm(int nt) { return nt == 1 ? 3 : 2; }

// The super-block loop is written for few instructions: loop-invariant bases with one wide
// multiply-add per address, scale bytes picked where they are used, msum on the tensor cores (as
// imma_gemm.cu), and no selects for padding rows. (Halving them did not speed the kernel up on
// the H200; the GGUF rows' access pattern caps its reads at ~80% of the bandwidth, the tile
// layout below does not.) kOneRow (NT = 1, a call of one row, plain decode): of the lane's
// columns 2c, 2c + 1 only even ones can be live, so the odd ones' scale multiplies and float
// part are left out (a column's bits do not depend on the others').
// kTiles: the weight in the tile layout (q4k_tiles.h: a 16-row tile's super-block as 2304
// consecutive bytes, each lane's quants in four 16-byte words), read with 6 coalesced loads a
// super-block instead of 2 header and 8 quant loads spread over 16 rows; same values, same bits.
// kQ5k (with kTiles): a Q5_K weight in its tile layout (q5k_tiles.h: 2816 bytes a tile's
// super-block, Q4_K's plus four 128-byte words of the high values' low bits): the low operand is
// the 5-bit value (one AND), the high one 8 x the value (q5k_high_operand), so the low scales
// are taken 8 times, not 16, and the float part divides by 8.
// kG: m-tile groups a block computes (of 16 * MT outputs each: the launch's blocks of
// for_each_launch, kG to a CUDA block). Warp w takes group w % kG and that group's slots
// w / kG, w / kG + n_warps / kG, ...: the kG warps of a slot read the same activations at about
// the same time, so the L1 cache serves all but the first, and the activations cross from L2
// once per kG groups instead of once per group (at 16 rows they are 16 x n_in bytes a group:
// as many bytes as the weights' elements, more than the weights themselves). Each output's
// slots and their order are those of kG = 1: the same bits.
// kMinBlocks: the blocks an SM must hold (the register budget; blocks_per_sm by default).
template <int MT, int NT, int kMaxWarps, bool kOneRow, bool kTiles = false, bool kQ5k = false, int kG = 1,
          int kMinBlocks = blocks_per_sm(NT)>
__global__ void __launch_bounds__(kMaxWarps* kWarp, kMinBlocks)
    imma_q4k_kernel(const Segments segs, int n_sb, Slots slots, const int8_t* __restrict__ xq,
                    const float* __restrict__ xd, const uint2* __restrict__ xm, int n_in, int rows_pad, int rows) {
  static_assert(!kQ5k || kTiles, "Q5_K is read as tiles only");
  pdl_trigger();  // first: the next kernel may be scheduled while this one waits (see common.cuh)
  constexpr int kRegs = MT * NT * 4;
  constexpr int kLoMul = kQ5k ? 8 : 16;  // the high operand's multiple of the value it stands for
  constexpr uint32_t kTileBytes = kQ5k ? kQ5kTileBytes : kQ4kTileBytes;
  extern __shared__ float part_smem[];  // [group][slot][kRegs][kWarp]
  auto part = [&](int grp, int slot, int reg, int l) -> float& {
    return part_smem[((grp * slots.count + slot) * kRegs + reg) * kWarp + l];
  };

  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, n_warps = blockDim.x / kWarp;
  const int g = lane / 4, c = lane % 4;
  const int grp = warp % kG, n_groups = segs.first_block[segs.n];
  const int group = int(blockIdx.y) * kG + grp;  // this warp's group (past the last: idle)
  const BlockSegment bs = block_segment(segs, 16 * MT, min(group, n_groups - 1));
  const uint8_t* const w = bs.w;
  const size_t row_bytes = bs.row_bytes;
  const int64_t n_out = bs.n_out;
  const int64_t o0 = bs.o0;
  const int r0 = int(blockIdx.x) * kRowsPerGroup;
  // n-tiles with rows (uniform). imma_matmul_group sends one n-tile calls of 1-8 rows and two
  // n-tile calls of 9-16, so below three n-tiles all are live and the loops have no branch.
  const int nt_live = NT <= 2 ? NT : min(NT, (rows_pad - r0) / 8);

  // Super-block 0 of weight rows g, g + 8 of each m-tile: the header, and this lane's 8 bytes of
  // the first sub-block pair; super-block sb is sb * kQ4kBytes further.
  // Tile layout: wh[mt][h] the header of row g + 8h in super-block 0 of m-tile mt's tile,
  // wq[mt][0] the lane's first quant word (the tile's rows are padded: no clamp); Q5_K: wf[mt]
  // the lane's first word of high bits.
  const uint8_t* wh[MT][2];
  const uint8_t* wq[MT][2];
  const uint8_t* wf[MT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // tails: computed from the last row, not stored
      if constexpr (kTiles) {
        const uint8_t* const tile = w + size_t(o0 / 16 + mt) * size_t(n_sb) * kTileBytes;
        wh[mt][h] = opaque(tile + kQ4kTileHeaders + 16 * (g + 8 * h));
        wq[mt][h] = opaque(tile + 16 * lane);
        if constexpr (kQ5k) {
          if (h == 0) wf[mt] = opaque(tile + kQ5kTileHighBits + 4 * lane);
        }
      } else {
        const uint8_t* const row = w + size_t(min(o0 + mt * 16 + g + 8 * h, n_out - 1)) * row_bytes;
        wh[mt][h] = opaque(row);
        wq[mt][h] = opaque(row + 16 + 8 * c);
      }
    }
  constexpr uint32_t kSbBytes = kTiles ? kTileBytes : kQ4kBytes;  // one super-block further
  pdl_wait();
  // Lanes of padding rows read row r0's activations (the same sectors as a live lane: no extra
  // traffic). That puts another row's sums into their mma columns, which no stored output reads
  // (an mma's columns are independent), so no select zeroes them.
  const int8_t* xr[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int r = r0 + nt * 8 + g;
    xr[nt] = opaque(xq + size_t(r < rows ? r : r0) * size_t(n_in) + 8 * c);
  }
  // The float part's inputs of super-block 0: the Q8_K scales of this lane's columns 2c, 2c + 1,
  // and the msum B operand, the packed sums of half c & 1 of row r0 + g (a padding row's are
  // zeros; lanes c >= 2 feed the unused k 8..15). n-tile nt is 8 rows further, super-block sb
  // sb * d_step / m_step bytes.
  const uint8_t* const dr = opaque(reinterpret_cast<const uint8_t*>(xd + r0 + 2 * c));
  const uint8_t* const mr = opaque(reinterpret_cast<const uint8_t*>(xm + size_t(c & 1) * rows_pad + r0 + g));
  const uint32_t d_step = opaque(uint32_t(rows_pad) * 4u), m_step = opaque(uint32_t(rows_pad) * 16u);
  // The msum A operand is the mins of sub-blocks 4c..4c+3 for lanes c < 2, zeros above. As
  // quant/blocks.h k4_scale_min: mins 0..3 are header word z's bytes & 0x3F, mins 4..7 word w's
  // high nibbles with bits 6, 7 of z's bytes on top; these lane constants pick one or none.
  const uint32_t mn_low_mask = opaque(c < 2 ? 0x0F0F0F0Fu : 0u), mn_top_mask = opaque(c < 2 ? 0x30303030u : 0u);
  const uint32_t mn_top_shift = opaque(2u * uint32_t(c)), mn_from_w = opaque(c == 1 ? 1u : 0u);

  const int first_slot = group < n_groups ? warp / kG : slots.count;  // (uniform in the warp)
  for (int slot = first_slot; slot < slots.count; slot += n_warps / kG) {
  float acc[MT][NT][4] = {};

  const int sb_end = min(n_sb, (slot + 1) * slots.per_slot);
  for (int sb = slot * slots.per_slot; sb < sb_end; ++sb) {
    // This super-block's addresses: one wide multiply-add each from a loop-invariant base.
    const uint32_t sbu = uint32_t(sb);
    const uint8_t* hp[MT][2];
    const uint8_t* qp[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        hp[mt][h] = wide_madd(wh[mt][h], sbu, kSbBytes), qp[mt][h] = wide_madd(wq[mt][h], sbu, kSbBytes);
    const uint8_t* fp[MT];
    if constexpr (kQ5k) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) fp[mt] = wide_madd(wf[mt], sbu, kSbBytes);
    }
    const int8_t* xp[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) xp[nt] = wide_madd(xr[nt], sbu, kSb);
    const uint8_t* const dp = wide_madd(dr, sbu, d_step);
    const uint8_t* const mp = wide_madd(mr, sbu, m_step);

    // Every weight load of the super-block is issued before the first use (and, for up to two
    // n-tiles, every activation load): the kernel is bound by memory latency, so what counts is
    // how many bytes each warp has in flight.
    uint4 hw[MT][2];  // headers: d, dmin | scales 0..3 | mins 0..3 | high bits, scales and mins 4..7
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) hw[mt][h] = __ldg(reinterpret_cast<const uint4*>(hp[mt][h]));
    uint2 qw[4][MT][2];
    uint32_t fw[4][MT];  // Q5_K: the pair's high bits
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (kTiles) {  // rows g and g + 8 in one word
          const uint4 v = __ldg(reinterpret_cast<const uint4*>(qp[mt][0] + kQ4kTileQuantStride * i));
          qw[i][mt][0] = make_uint2(v.x, v.y), qw[i][mt][1] = make_uint2(v.z, v.w);
          if constexpr (kQ5k)
            fw[i][mt] = __ldg(reinterpret_cast<const uint32_t*>(fp[mt] + 128 * i));
        } else {
#pragma unroll
          for (int h = 0; h < 2; ++h) qw[i][mt][h] = __ldg(reinterpret_cast<const uint2*>(qp[mt][h] + 32 * i));
        }
      }
    constexpr int kXAhead = NT <= 2 ? 4 : 1;  // sub-block pairs of activations loaded up front
    uint2 xv[kXAhead][2][NT];
    auto load_x = [&](int i, uint2 (&v)[2][NT]) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        if (nt >= nt_live) continue;  // uniform
#pragma unroll
        for (int half = 0; half < 2; ++half)
          v[half][nt] = __ldg(reinterpret_cast<const uint2*>(xp[nt] + 64 * i + 32 * half));
      }
    };
    if constexpr (kXAhead == 4) {
#pragma unroll
      for (int i = 0; i < 4; ++i) load_x(i, xv[i]);
    }
    // Loaded up front for one n-tile; wider calls load them when used (registers).
    float2 dx[NT];
    uint2 xs[NT];
    auto load_float_part = [&](int nt) {
      dx[nt] = __ldg(reinterpret_cast<const float2*>(dp) + 4 * nt);
      xs[nt] = __ldg(reinterpret_cast<const uint2*>(mp) + 8 * nt);
    };
    if constexpr (NT == 1) load_float_part(0);

    // isum = kLoMul * sum_j sc_j * dot_j over the super-block's sub-blocks (exact; the high
    // values enter as kLoMul q: Q4_K's nibbles in place, 16 q; Q5_K's 8 q). For one n-tile the
    // low sub-blocks' products are summed apart (s_lo) and taken kLoMul times at the end, a
    // shift per output instead of one per scale; wider calls lack the registers and scale the low
    // scales instead (s_lo stays zero).
    constexpr bool kSplit = NT == 1;
    int s_lo[MT][NT][4] = {}, s_hi[MT][NT][4] = {};
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // sub-block pair i: sub-blocks 2i (low nibbles) and 2i + 1 (high)
      uint2(&xi)[2][NT] = xv[kXAhead == 4 ? i : 0];
      if constexpr (kXAhead != 4) load_x(i, xi);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const uint2(&q)[2] = qw[i][mt];
        uint32_t a_lo[4], a_hi[4];
        if constexpr (kQ5k) {  // word w of the lane's 16 bytes: q[w / 2] .x / .y
          const uint32_t f = fw[i][mt];
          a_lo[0] = q5k_low_operand(q[0].x), a_lo[1] = q5k_low_operand(q[1].x);
          a_lo[2] = q5k_low_operand(q[0].y), a_lo[3] = q5k_low_operand(q[1].y);
          a_hi[0] = q5k_high_operand<0>(q[0].x, f), a_hi[1] = q5k_high_operand<2>(q[1].x, f);
          a_hi[2] = q5k_high_operand<1>(q[0].y, f), a_hi[3] = q5k_high_operand<3>(q[1].y, f);
        } else {
          a_lo[0] = q[0].x & 0x0F0F0F0Fu, a_lo[1] = q[1].x & 0x0F0F0F0Fu, a_lo[2] = q[0].y & 0x0F0F0F0Fu,
          a_lo[3] = q[1].y & 0x0F0F0F0Fu;
          a_hi[0] = q[0].x & 0xF0F0F0F0u, a_hi[1] = q[1].x & 0xF0F0F0F0u, a_hi[2] = q[0].y & 0xF0F0F0F0u,
          a_hi[3] = q[1].y & 0xF0F0F0F0u;
        }
        int sc_lo[2], sc_hi[2];  // rows g, g + 8: the scales of sub-blocks 2i, 2i + 1 (k4_scale_min)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint4& hh = hw[mt][h];
          const uint32_t sc = i < 2 ? hh.y & 0x3F3F3F3Fu : (hh.w & 0x0F0F0F0Fu) | ((hh.y >> 2) & 0x30303030u);
          sc_lo[h] = int(__byte_perm(sc, 0u, 0x4440u | uint32_t((2 * i) % 4))) * (kSplit ? 1 : kLoMul);  // PRMT
          sc_hi[h] = int(__byte_perm(sc, 0u, 0x4440u | uint32_t((2 * i + 1) % 4)));
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          if (nt >= nt_live) continue;
          int dl[4], dh[4];
          imma_16832(dl, a_lo, xi[0][nt].x, xi[0][nt].y);
          imma_16832(dh, a_hi, xi[1][nt].x, xi[1][nt].y);
#pragma unroll
          for (int j = 0; j < 4; ++j) {  // two multiply-adds (the sum is exact in any order)
            if (kOneRow && j % 2 == 1) continue;
            (kSplit ? s_lo : s_hi)[mt][nt][j] += sc_lo[j / 2] * dl[j];
            s_hi[mt][nt][j] += sc_hi[j / 2] * dh[j];
          }
        }
      }
    }

    // Float part, once per super-block and (row, column), as the CPU's k4_block:
    // (dx * d) * isum - (dx * dmin) * sum_j min_j * xsum_j.
    float d[MT][2], dmin[MT][2];
    uint32_t mn[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint4& hh = hw[mt][h];
        q4k_d_dmin(hh.x, d[mt][h], dmin[mt][h]);
        mn[mt][h] = ((mn_from_w ? hh.w >> 4 : hh.z) & mn_low_mask) | ((hh.z >> mn_top_shift) & mn_top_mask);
      }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      if (nt >= nt_live) continue;
      if constexpr (NT != 1) load_float_part(nt);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        int lo[4], hi[4];
        imma_16816_uu(lo, mn[mt][0], mn[mt][1], xs[nt].x, kMsumMagic);
        imma_16816_us(hi, mn[mt][0], mn[mt][1], xs[nt].y, 0);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (kOneRow && j % 2 == 1) continue;
          const int isum = kLoMul * s_lo[mt][nt][j] + s_hi[mt][nt][j];
          const float t = q4k_sb_term<kLoMul>(j % 2 ? dx[nt].y : dx[nt].x, d[mt][j / 2], dmin[mt][j / 2], isum,
                                              msum_float(lo[j], hi[j]));
          acc[mt][nt][j] = __fadd_rn(acc[mt][nt][j], t);
        }
      }
    }
  }

#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int j = 0; j < 4; ++j) part(grp, slot, (mt * NT + nt) * 4 + j, lane) = acc[mt][nt][j];
  }  // slot

  // Sum the slots in slot order; thread t of the block finishes elements t, t + blockDim.x, ...
  __syncthreads();
  for (int i = int(threadIdx.x); i < kG * kRegs * kWarp; i += blockDim.x) {
    const int gi = i / (kRegs * kWarp), reg = i / kWarp % kRegs, l = i % kWarp;
    const int grp_block = int(blockIdx.y) * kG + gi;
    if (grp_block >= n_groups) continue;
    const BlockSegment gs = kG == 1 ? bs : block_segment(segs, 16 * MT, grp_block);
    const int mt = reg / (NT * 4), nt = (reg / 4) % NT, j = reg % 4;
    const int64_t o = gs.o0 + mt * 16 + l / 4 + 8 * (j / 2);
    const int r = r0 + nt * 8 + 2 * (l % 4) + (j % 2);
    if (nt >= nt_live || o >= gs.n_out || r >= rows) continue;
    float sum = part(gi, 0, reg, l);
    for (int k = 1; k < slots.count; ++k) sum = __fadd_rn(sum, part(gi, k, reg, l));
    gs.y[int64_t(r) * gs.y_stride + o] = sum;
  }
}

// Eight warps a block, each taking slots w, w + 8, ... (with kG groups: w / kG, w / kG + 8 / kG,
// ... of group w % kG): on the H200 this streamed the decode product faster (1.33 TB/s) than a
// warp per slot (1.20 TB/s, all blocks in one wave waiting on memory together, then computing
// together).
template <int NT, bool kOneRow = false, bool kTiles = false, bool kQ5k = false, int kG = 1,
          int kMinBlocks = blocks_per_sm(NT)>
void imma_launch(const Segments& segs, int64_t n_in, const int8_t* xq, const float* xd, const uint2* xm, int rows,
                 int rows_pad, cudaStream_t s) {
  constexpr int MT = 1;
  constexpr int kMaxWarps = 8;
  static_assert(kMaxWarps % kG == 0, "a block's warps split evenly over its m-tile groups");
  const int n_sb = int(n_in / kSb);
  const Slots slots = slots_of(n_sb);
  const int warps = kG * std::min(slots.count, kMaxWarps / kG);
  const size_t smem = size_t(kG) * size_t(slots.count) * MT * NT * 4 * kWarp * sizeof(float);
  // Up to kG x 64 KiB of dynamic shared memory (kMaxSlots x 16 x 32 floats a group); a refusal
  // shows as the launch error, which the caller checks.
  constexpr auto kernel = imma_q4k_kernel<MT, NT, kMaxWarps, kOneRow, kTiles, kQ5k, kG, kMinBlocks>;
  (void)raise_smem_limit<kernel>(kG * kMaxSlots * MT * NT * 4 * kWarp * int(sizeof(float)));
  const unsigned groups = ceil_div(rows, kRowsPerGroup);
  launch(kernel, dim3(groups, ceil_div(unsigned(segs.first_block[segs.n]), unsigned(kG))), warps * kWarp, smem, s,
      segs, n_sb, slots, xq, xd, xm, int(n_in), rows_pad, rows);
}

}  // namespace

// Q5_K, IQ4_XS and Q8_0 only as tiles (CudaBackend::upload_matrix makes them; as GGUF rows they
// stay on the f16 kernel, mma_matmul.cu).
bool imma_supports(const Weight& w) {
  if (w.type == GgmlType::Q8_0) return w.tiles && imma_q80_takes(w.n_in);
  return mv::int8_tensor_core_supports(w.type, w.n_in, w.row_bytes, w.data) &&
         ((w.type != GgmlType::Q5_K && w.type != GgmlType::IQ4_XS) || w.tiles);
}

size_t imma_scratch_bytes(const Weight& w, int rows) {
  if (w.type == GgmlType::Q8_0) return imma_q80_scratch_bytes(w.n_in, rows);
  return q8k_layout(w.n_in, (rows + 7) / 8 * 8).bytes;
}

size_t q8k_fused_bytes(int64_t n_in, int rows) { return 2 * q8k_fused_q6k_offset(n_in, (rows + 7) / 8 * 8); }

namespace {
// The decode kernel for rows <= kImmaGemmMinRows in the given shape (ImmaDecodeShape; zeros: the
// routed choice, decode_groups_per_block and blocks_per_sm).
// Measured on an H100 (docs/performance.md, session 14): 2 groups made the 16-row forward of the
// 27B-shaped mix-q4_k_m 3% faster and the 2-8-row ones ~2% slower, 32 rows the same.
int decode_groups_per_block(int rows) { return rows > 8 && rows <= 16 ? 2 : 1; }

void imma_decode(const Segments& segs, int64_t n_in, const int8_t* xq, const float* xd, const uint2* xm, int rows,
                 int rows_pad, cudaStream_t s, ImmaDecodeShape shape) {
  const int groups_per_block = shape.groups_per_block != 0 ? shape.groups_per_block : decode_groups_per_block(rows);
  // 9-16 rows (two n-tiles) with three blocks an SM: 80 registers, as one n-tile (a variant for
  // bench/matmul_kernels, not routed: ptxas spills 20-28 bytes, and routed for Q4_K with one
  // group it moved mix-q4_k_m's 16-row forward by under 1%, H100, session 15).
  const bool three_blocks = shape.blocks_per_sm == 3 && rows > 8 && rows <= 16;
  auto decode = [&](auto tiles, auto q5k, auto g) {
    constexpr bool kTiles = decltype(tiles)::value, kQ5k = decltype(q5k)::value;
    constexpr int kG = decltype(g)::value;
    if constexpr (kTiles) {
      if (three_blocks) return imma_launch<2, false, kTiles, kQ5k, kG, 3>(segs, n_in, xq, xd, xm, rows, rows_pad, s);
    }
    if (rows == 1) imma_launch<1, true, kTiles, kQ5k, kG>(segs, n_in, xq, xd, xm, rows, rows_pad, s);
    else if (rows <= 8) imma_launch<1, false, kTiles, kQ5k, kG>(segs, n_in, xq, xd, xm, rows, rows_pad, s);
    else if (rows <= 16) imma_launch<2, false, kTiles, kQ5k, kG>(segs, n_in, xq, xd, xm, rows, rows_pad, s);
    else imma_launch<4, false, kTiles, kQ5k, std::min(kG, 2)>(segs, n_in, xq, xd, xm, rows, rows_pad, s);
  };
  using T = std::true_type;
  using F = std::false_type;
  using G1 = std::integral_constant<int, 1>;
  using G2 = std::integral_constant<int, 2>;
  using G4 = std::integral_constant<int, 4>;
  if (!segs.q4k_tiles && !segs.q5k_tiles) return decode(F{}, F{}, G1{});  // GGUF rows: one group a block
  auto tiles = [&](auto q5k) {
    // (4 groups at 17-32 rows would want 256 KiB of shared memory for their slots: 2 there.)
    if (groups_per_block == 4 && rows <= 16) decode(T{}, q5k, G4{});
    else if (groups_per_block == 2) decode(T{}, q5k, G2{});
    else decode(T{}, q5k, G1{});
  };
  segs.q5k_tiles ? tiles(T{}) : tiles(F{});
}
}  // namespace

void imma_decode_quantized(const Weight* const* ws, float* const* ys, int n, int rows, const void* scratch,
                           cudaStream_t s, ImmaDecodeShape shape) {
  const int64_t n_in = ws[0]->n_in;
  const int rows_pad = (rows + 7) / 8 * 8;
  const Q8kLayout l = q8k_layout(n_in, rows_pad);
  auto* base = static_cast<const uint8_t*>(scratch);
  for_each_launch(ws, ys, n, [&](const Segments& segs) {
    imma_decode(segs, n_in, reinterpret_cast<const int8_t*>(base + l.q), reinterpret_cast<const float*>(base + l.d),
                reinterpret_cast<const uint2*>(base + l.m), rows, rows_pad, s, shape);
  });
}

void imma_decode_quantized(const Weight& w, float* y, int rows, const void* scratch, cudaStream_t s,
                           ImmaDecodeShape shape) {
  const Weight* ws[1] = {&w};
  float* ys[1] = {y};
  imma_decode_quantized(ws, ys, 1, rows, scratch, s, shape);
}

void imma_matmul_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                       cudaStream_t s, const void* quantized) {
  if (n <= 0) return;
  if (ws[0]->type == GgmlType::Q6_K) return imma_q6k_group(ws, ys, n, x, rows, scratch, s, quantized);
  if (ws[0]->type == GgmlType::IQ4_XS) return imma_iq4xs_group(ws, ys, n, x, rows, scratch, s, quantized);
  if (ws[0]->type == GgmlType::Q8_0) return imma_q80_group(ws, ys, n, x, rows, scratch, s);
  const int64_t n_in = ws[0]->n_in;
  const int rows_pad = (rows + 7) / 8 * 8;
  const Q8kLayout l = q8k_layout(n_in, rows_pad);
  auto* base = static_cast<uint8_t*>(scratch);
  // The activations: quantized here, or by the producer of x (its Q4_K layout is first).
  auto* acts = quantized != nullptr ? static_cast<uint8_t*>(const_cast<void*>(quantized)) : base;
  auto* xq = reinterpret_cast<int8_t*>(acts + l.q);
  auto* xd = reinterpret_cast<float*>(acts + l.d);
  auto* xm = reinterpret_cast<uint2*>(acts + l.m);
  const int n_sb = int(n_in / kSb);
  if (quantized == nullptr)
    launch(quantize_q8k_k, dim3(unsigned(n_sb), unsigned(rows_pad)), kWarp, 0, s, x, rows, rows_pad, int(n_in), xq, xd,
           xm);
  for_each_launch(ws, ys, n, [&](const Segments& segs) {
    if (takes_gemm(segs, rows)) return imma_gemm(segs, n_in, xq, xd, xm, rows, rows_pad, s);
    imma_decode(segs, n_in, xq, xd, xm, rows, rows_pad, s, ImmaDecodeShape{});
  });
}

}  // namespace df::cuda
