// The integer tensor-core matmul for Q6_K weights, designed like the Q4_K one (imma_matmul.cu:
// its header comment gives the why, the Q8_K activations, slots and batch invariance, all of
// which hold here unchanged). Calls of more than kImmaGemmMinRows rows go to the tiled prefill
// kernel (imma_q6k_gemm.cu) after the quantizer below, which gives each row the same bits.
//
// Q6_K. A 210-byte block holds 256 weights q - 32 (q = 0..63: four bits in ql, two in qh) in 16
// groups of 16 with a signed 8-bit scale each and one f16 d: w = d * sc_j * (q - 32). Group j =
// 8h + 2k + m (half h, 32-element chunk k, 16-element part m) takes the low (k < 2) or high
// nibbles of ql bytes 64h + 32(k % 2) + 16m .. + 15 and bits 2k, 2k + 1 of qh bytes 32h + 16m ..
// + 15 (quant/dequant_kquants.cpp). As the CPU's dot product does, the kernel sums q (unsigned)
// times the Q8_K ints, exactly, and takes 32 * sum_j sc_j * bsum_j (bsum_j: the activation
// group's sum) off once per super-block: isum = sum_j sc_j * dot_j - 32 * sum_j sc_j * bsum_j,
// then acc += (d_x * d) * isum in float.
//
// Mapping. One mma.m16n8k16 (u8 x s8 -> s32) per group, so each group's integer dot comes out
// on its own and takes its sc_j with one IMAD per output (m16n8k32 would sum two groups under
// one scale). Lane (g, c) supplies weight rows g and g + 8 of a 16-row tile, four consecutive
// bytes of each group's 16: one aligned 4-byte word of ql (feeding a low- and a high-nibble
// group) and one of qh (feeding four groups); a shift and two LOP3 make four u8 values 0..63.
// The activation operand holds the same four elements of its row: the quantizer writes each
// super-block's 256 values in this slot order, lane c's 64 bytes contiguous (16-byte loads). The
// offset sum_j sc_j * bsum_j is one more pair of mma per super-block: A = the rows' sixteen
// scales (one word per lane, s8), B = the per-16 activation sums as high (s8) and low (u8)
// byte planes.
//
// Alignment. Rows start 4-byte aligned (n_in % 512 == 0), so odd super-blocks start at 2 mod 4
// and a lane's aligned word holds group bytes 4c-2..4c+1 (lane 0: 14 and 15 from the next word
// via PRMT, 0 and 1 from its own). The activation layout follows the same rotation
// (q6k_elem below), so that PRMT is all an odd super-block costs.
//
// Loads and registers. Every weight word of a super-block (13 per row: ql, qh and the lane's
// scale word; 5 more shared by the row's four lanes: the scales and d) is issued before the first
// use, as in the Q4_K kernel, which is bound by memory latency; the warp's first super-block's
// even before waiting for the quantizer (pdl_wait: weights are immutable; the kernel calls
// pdl_trigger first, as every matmul does, see common.cuh). Activations come half a super-block
// (eight groups) at a time, the float part's inputs when used: with the 36 weight words in flight
// that fits one n-tile in 80 registers (24 warps an SM) without spilling.
//
// Tiles (kTiles; quant/q6k_tiles.h, the layout CudaBackend::upload_matrix makes): a 16-row tile's
// super-block is 3360 consecutive bytes holding each lane's words already in slot order, so a
// warp reads it with six coalesced 16-byte loads a lane (ql and qh words of rows g, g + 8), two
// 16-byte loads of its rows' scales (its own word of the offset mma picked from them by
// selects) and one 4-byte load of the d's: 9 loads a super-block instead of 36, and no PRMT
// realigns odd super-blocks (their scales' slots stay rotated, an index known at compile time).
// The quant words group what each (half, part) step uses, so a word's registers free together:
// grouped by span, as first written, the 16-byte loads' aligned register quads stayed live
// longer and ptxas spilled 40 bytes a thread in the one-row variant (16 now, 4 on GGUF rows).
// The same values reach the same mma in the same order: the same bits as on GGUF rows.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/imma_common.cuh"
#include "backend/cuda/imma_q6k.cuh"
#include "backend/cuda/kernels.h"
#include "quant/q6k_tiles.h"

namespace df::cuda {

namespace {

// The tiles store each lane's bytes in the activations' slot order.
constexpr bool slot_orders_agree() {
  for (int sb = 0; sb < 2; ++sb)
    for (int p = 0; p < 16; ++p)
      if (q6k_slot_elem(sb, p) != q6k_elem(sb, p)) return false;
  return true;
}
static_assert(slot_orders_agree(), "quant/q6k_tiles.h and the activations disagree on the slot order");

constexpr int kMaxNt = 4;         // n-tiles per launch group: 32 activation rows
constexpr int kRowsPerGroup = 8 * kMaxNt;
constexpr int kMaxWarps = 8;      // warps a block (launch_q6k)

Q6kActs q6k_acts(void* scratch, int64_t n_in, int rows) {
  const int rows_pad = (rows + 7) / 8 * 8;
  const Q8kLayout l = q8k_layout(n_in, rows_pad);
  auto* base = static_cast<uint8_t*>(scratch);
  return Q6kActs{reinterpret_cast<int8_t*>(base + l.q), reinterpret_cast<float*>(base + l.d),
                 reinterpret_cast<uint2*>(base + l.s), rows_pad};
}

// Q8_K (q8k_quantize_lane: the CPU's values) in Q6_K's format (q8k_store_q6k), one warp per
// (super-block b, row r).
__global__ void __launch_bounds__(kWarp)
    quantize_q8k_q6k_k(const float* __restrict__ x, int rows, int n_in, Q6kActs a) {
  pdl_wait();
  pdl_trigger();
  const int b = blockIdx.x, r = blockIdx.y, lane = threadIdx.x;
  int q[8];
  const float d = q8k_quantize_lane(x, rows, n_in, b, r, lane, q);
  q8k_store_q6k(q, d, b, r, lane, a);
}

// Byte k of w as a signed int, one PRMT (selector bit 3 replicates the byte's sign).
// (__byte_perm ignores that bit.) k is a constant once unrolled, so the selector is an immediate.
__device__ __forceinline__ int signed_byte_prmt(uint32_t w, int k) {
  uint32_t r;
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(r) : "r"(w), "r"(uint32_t(k | (8 | k) * 0x1110)));
  return int(r);
}

// q6_values(ql_lo, qh, 0), (ql_hi, qh, 1), (ql_lo, qh, 2), (ql_hi, qh, 3), bit for bit, in
// fewer instructions: qh's bit pairs of each chunk go to bits 4, 5 of each byte with bits 6, 7
// clear, so one LOP3 select (low nibble from the ql side, high from the qh side) makes each
// value, and the two masks of qh serve all four (11 instructions instead of 13).
__device__ __forceinline__ void q6_values4(uint32_t (&v)[4], uint32_t ql_lo, uint32_t ql_hi, uint32_t qh) {
  const uint32_t even = qh & 0x33333333u;  // chunk 0 at bits 0, 1, chunk 2 at 4, 5
  const uint32_t odd = qh & 0xCCCCCCCCu;   // chunk 1 at bits 2, 3, chunk 3 at 6, 7
  auto pick = [](uint32_t lo, uint32_t hi) { return (lo & 0x0F0F0F0Fu) | (hi & 0xF0F0F0F0u); };
  v[0] = pick(ql_lo, even << 4);
  v[1] = pick(ql_hi, odd << 2);
  v[2] = pick(ql_lo >> 4, even);
  v[3] = pick(ql_hi >> 4, odd >> 2);
}

// Blocks per SM the register budget must allow: 3 for one n-tile (24 warps to hide latency), 2 above.
// The kernel issues instructions most of its time (as the Q4_K one, measured on the H200), so the
// super-block loop is written for few of them (as imma_matmul.cu's): loop-invariant bases with
// one wide multiply-add per address, the values of four groups from shared qh masks
// (q6_values4), scales sign-extended by one PRMT each, the warp's first super-block peeled (it
// alone waits for the quantizer) and no n-tile branches below four n-tiles. kOneRow (NT = 1, a
// call of one row, plain decode): of the lane's columns 2c, 2c + 1 only even ones can be live,
// so the odd ones' scale multiplies and float part are left out (a column's bits do not depend
// on the others'). kTiles: the weights in the tile layout (see the header).
template <int NT, bool kOneRow, bool kTiles = false>
__global__ void __launch_bounds__(kMaxWarps* kWarp, NT == 1 ? 3 : 2)
    imma_q6k_kernel(const Segments segs, int n_sb, Slots slots, const int8_t* __restrict__ xq,
                    const float* __restrict__ xd, const uint2* __restrict__ xs, int rows_pad, int rows) {
  static_assert(!kOneRow || NT == 1, "one row is one n-tile");
  pdl_trigger();  // first: the next kernel may be scheduled while this one waits (see common.cuh)
  constexpr int kRegs = NT * 4;
  extern __shared__ float part_smem[];  // [slot][kRegs][kWarp]
  auto part = [&](int slot, int reg, int l) -> float& { return part_smem[(slot * kRegs + reg) * kWarp + l]; };

  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, n_warps = blockDim.x / kWarp;
  const int g = lane / 4, c = lane % 4;
  const int r0 = int(blockIdx.x) * kRowsPerGroup;
  // n-tiles with rows (uniform). imma_q6k_group sends calls of 1-8 rows to one n-tile, 9-16 to
  // two and 17-32 to four (one row group, r0 = 0), so only a fourth n-tile can lack rows.
  const int nt_live = min(NT, (rows_pad - r0) / 8);
  auto live = [&](int nt) { return nt < 3 || nt < nt_live; };

  // Weight rows g, g + 8 (tails: the last row, computed, not stored). Super-block sb starts
  // sb * kQ6kBytes further; less q6k_rot(sb), this lane's word of each 16-byte span is 4c
  // further (spans 0..11: ql and qh; 12: the scales, the mma A operand of the offset).
  const uint8_t* wrow[2];
  // Tiles: this lane's first quant word in super-block 0 of the block's tile (super-block sb is
  // sb * kQ6kTileBytes further), and from there its rows' scales (the first of two 16-byte words)
  // and d's. (Rows past n_out: the tile repeats the last.)
  const uint8_t* tq = nullptr;
  uint32_t ts_off = 0, td_off = 0;
  if constexpr (kTiles) {
    const BlockSegment bs = block_segment(segs, 16);
    tq = opaque(bs.w + size_t(bs.o0 / 16) * size_t(n_sb) * kQ6kTileBytes + 16 * lane);
    ts_off = opaque(uint32_t(kQ6kTileScales + 16 * g - 16 * lane));
    td_off = opaque(uint32_t(kQ6kTileD + 4 * g - 16 * lane));
  } else {
    const BlockSegment bs = block_segment(segs, 16);
#pragma unroll
    for (int h = 0; h < 2; ++h) wrow[h] = opaque(bs.w + size_t(min(bs.o0 + g + 8 * h, bs.n_out - 1)) * bs.row_bytes);
  }
  const uint32_t lane_off = opaque(4u * uint32_t(c));
  // This lane's activations (column g of n-tile 0; n-tile nt is 8 rows further) in super-block
  // 0: its 64 values, its word of the per-16 sums, and the Q8_K scales of columns 2c, 2c + 1.
  // Super-block sb is sb * rows_pad rows further. Decode (one n-tile): lanes of padding rows
  // read row r0's, the same sectors as a live lane's (no extra traffic); their mma columns are
  // never stored, so no select zeroes them.
  const int x_row0 = NT == 1 && r0 + g >= rows ? r0 : r0 + g;
  const int8_t* const xr = opaque(xq + size_t(x_row0) * kSb + 64 * c);
  const uint8_t* const sr = opaque(reinterpret_cast<const uint8_t*>(xs + size_t(x_row0) * 4 + c));
  const uint8_t* const dr = opaque(reinterpret_cast<const uint8_t*>(xd + r0 + 2 * c));
  // The steps: rows_pad rows. Calls of one or two n-tiles have exactly their 8 NT rows
  // (imma_q6k_group), so there the steps are immediates and take no registers.
  const uint32_t pad = NT <= 2 ? 8u * NT : opaque(uint32_t(rows_pad));
  const uint32_t x_step = pad * kSb, s_step = pad * 32u, d_step = pad * 4u;
  const uint32_t realign = c == 0 ? 0x3254u : 0x3210u;  // odd super-blocks (see the header)

  // Four n-tiles keep their float sums in the slot's shared memory (registers; the same
  // operations in the same order, so the results do not depend on where they are kept).
  constexpr bool kAccInSmem = NT == 4;
  for (int slot = warp; slot < slots.count; slot += n_warps) {
    float acc[NT][4] = {};
    if constexpr (kAccInSmem) {
#pragma unroll
      for (int i = 0; i < kRegs; ++i) part(slot, i, lane) = 0.0f;
    }

    // One super-block; kRot = q6k_rot(sb), the block's offset from 4-byte alignment; kFirst:
    // the warp's first, whose weight loads go out before waiting for the quantizer (pdl_wait:
    // weights are immutable).
    auto step = [&](auto rot_tag, auto first_tag, int sb) {
      constexpr int kRot = decltype(rot_tag)::value;
      constexpr bool kFirst = decltype(first_tag)::value;
      const uint32_t sbu = uint32_t(sb);
      uint32_t q[2][13], win[2][5];  // per row: spans 0..12; bytes 192-kRot.. (scales, d)
      [[maybe_unused]] uint32_t tsc[2][4], tdw;  // tiles: per row the scale slots 4i..4i+3; the rows' d's
      if constexpr (kTiles) {
        uint4 v[6], sc[2];
        const uint8_t* const pq = wide_madd(tq, sbu, kQ6kTileBytes);
#pragma unroll
        for (int k = 0; k < 6; ++k) v[k] = __ldg(reinterpret_cast<const uint4*>(pq + kQ6kTileQuantStride * k));
        const uint8_t* const ps = wide_madd(pq, ts_off, 1u);
#pragma unroll
        for (int u = 0; u < 2; ++u) sc[u] = __ldg(reinterpret_cast<const uint4*>(ps + 128 * u));
        tdw = __ldg(reinterpret_cast<const unsigned*>(wide_madd(pq, td_off, 1u)));
        // Span s of row g + 8h (q6k_tiles.h: ql spans 4 hh + t + 2p in quant word 3 hh + t, qh
        // spans 8 + 2 hh + p in 3 hh + 2); row g + 8h's scale slots 4i..4i+3 are word
        // 2 (i % 2) + h of sc[i / 2].
        auto word = [](const uint4& x, int i) { return i == 0 ? x.x : i == 1 ? x.y : i == 2 ? x.z : x.w; };
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int s = 0; s < 12; ++s) q[h][s] = word(v[q6k_tile_word(s)], 2 * q6k_tile_pair(s) + h);
#pragma unroll
          for (int i = 0; i < 4; ++i) tsc[h][i] = word(sc[i / 2], 2 * (i % 2) + h);
        }
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint8_t* const pb = wide_madd(wrow[h], sbu, kQ6kBytes) - kRot;
          const uint8_t* const pq = wide_madd(pb, lane_off, 1u);  // the lane's word of span 0
#pragma unroll
          for (int s = 0; s < 13; ++s) q[h][s] = __ldg(reinterpret_cast<const unsigned*>(pq + 16 * s));
#pragma unroll
          for (int i = 0; i < 5; ++i) win[h][i] = __ldg(reinterpret_cast<const unsigned*>(pb + 192 + 4 * i));
        }
      }
      if constexpr (kFirst) pdl_wait();  // the activations are the quantizer's output

      if constexpr (!kTiles && kRot != 0) {  // lane 0's words take bytes 0, 1 of the next
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int s = 0; s < 12; ++s) q[h][s] = __byte_perm(q[h][s], s < 11 ? q[h][s + 1] : win[h][0], realign);
      }
      const int8_t* const xp = wide_madd(xr, sbu, x_step);
      const uint8_t* const sp = wide_madd(sr, sbu, s_step);
      const uint8_t* const dp = wide_madd(dr, sbu, d_step);

      int isum[NT][4] = {};  // sum_j sc_j * dot_j, exact
      // Groups j = 8 hh + 2 k + m take ql spans 4 hh + m (chunks k = 0, 2) and 4 hh + 2 + m
      // (k = 1, 3) and qh span 8 + 2 hh + m. Activation quarter t (16 bytes per n-tile) holds
      // groups 4t..4t+3: both quarters of a half are loaded at once, so that each (hh, m)'s four
      // values are made together, sharing the qh masks. (A quarter at a time, four n-tiles
      // spilled more.)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        uint4 xt[2][NT];  // quarters 2 hh, 2 hh + 1
#pragma unroll
        for (int tq = 0; tq < 2; ++tq)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            if (live(nt)) xt[tq][nt] = __ldg(reinterpret_cast<const uint4*>(xp + nt * 8 * kSb + 16 * (2 * hh + tq)));
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          uint32_t a[2][4];  // [row][k]: the A operands of groups 8 hh + 2 k + m
#pragma unroll
          for (int h = 0; h < 2; ++h) q6_values4(a[h], q[h][4 * hh + m], q[h][4 * hh + 2 + m], q[h][8 + 2 * hh + m]);
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const int j = 8 * hh + 2 * k + m, jj = j % 4;
            int sc0, sc1;
            if constexpr (kTiles) {  // slot (j + kRot) % 16
              const int p = (j + kRot) % 16;
              sc0 = signed_byte_prmt(tsc[0][p / 4], p % 4);
              sc1 = signed_byte_prmt(tsc[1][p / 4], p % 4);
            } else {
              sc0 = signed_byte_prmt(win[0][(j + kRot) / 4], (j + kRot) % 4);
              sc1 = signed_byte_prmt(win[1][(j + kRot) / 4], (j + kRot) % 4);
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
              if (!live(nt)) continue;  // uniform
              const uint4& x = xt[k / 2][nt];
              const uint32_t b = jj == 0 ? x.x : jj == 1 ? x.y : jj == 2 ? x.z : x.w;
              int d[4] = {0, 0, 0, 0};
              imma_16816<true, false>(d, a[0][k], a[1][k], b);
              isum[nt][0] += sc0 * d[0];
              if (!kOneRow) isum[nt][1] += sc0 * d[1];
              isum[nt][2] += sc1 * d[2];
              if (!kOneRow) isum[nt][3] += sc1 * d[3];
            }
          }
        }
      }

      // Float part, once per super-block and (row, column), as the CPU's finish_q6k:
      // acc += (d_x * d) * (isum - 32 * sum_j sc_j * bsum_j), d_x of this lane's columns 2c, 2c + 1.
      // The offset's A operand: this lane's scale slots 4c..4c+3 of rows g, g + 8, its word of
      // span 12, realigned as the others (lane 0's next word is d's). Tiles: the lane's word of
      // the scales as stored; the d's of rows g and g + 8 are the low and high halves of one word.
      uint32_t asc[2];
      float dw[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if constexpr (kTiles) {  // slots 4c..4c+3: word c of the row's scales (selects, not a load)
          asc[h] = c >= 2 ? (c == 3 ? tsc[h][3] : tsc[h][2]) : (c == 1 ? tsc[h][1] : tsc[h][0]);
          dw[h] = __half2float(__ushort_as_half(static_cast<unsigned short>(h == 0 ? tdw & 0xFFFF : tdw >> 16)));
        } else {
          asc[h] = kRot != 0 ? __byte_perm(q[h][12], win[h][4], realign) : q[h][12];
          dw[h] = __half2float(__ushort_as_half(static_cast<unsigned short>(kRot == 0 ? win[h][4] & 0xFFFF : win[h][4] >> 16)));
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        if (!live(nt)) continue;
        const uint2 bsum = __ldg(reinterpret_cast<const uint2*>(sp + nt * 8 * 32));
        const float2 dx = __ldg(reinterpret_cast<const float2*>(dp + nt * 8 * 4));
        int off[4];
        q6k_group_sums<kOneRow>(off, asc[0], asc[1], bsum);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if (kOneRow && i % 2 == 1) continue;
          const float scale = __fmul_rn(i % 2 ? dx.y : dx.x, dw[i / 2]);
          float& a = kAccInSmem ? part(slot, nt * 4 + i, lane) : acc[nt][i];
          a = __fmaf_rn(scale, __int2float_rn(isum[nt][i] - 32 * off[i]), a);
        }
      }
    };
    auto step_of = [&](auto first_tag, int sb) {
      if (q6k_rot(sb) == 0) step(std::integral_constant<int, 0>{}, first_tag, sb);
      else step(std::integral_constant<int, 2>{}, first_tag, sb);
    };

    // Every slot has a super-block and every warp a slot (warps <= slots.count), so each warp
    // waits once, in its first super-block.
    int sb = slot * slots.per_slot;
    const int sb_end = min(n_sb, sb + slots.per_slot);
    if (slot == warp) step_of(std::true_type{}, sb++);
    for (; sb < sb_end; ++sb) step_of(std::false_type{}, sb);

    if constexpr (!kAccInSmem) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int j = 0; j < 4; ++j) part(slot, nt * 4 + j, lane) = acc[nt][j];
    }
  }  // slot

  // Sum the slots in slot order; thread t of the block finishes elements t, t + blockDim.x, ...
  // (The block's segment is looked up again here: kept over the loop it took registers.)
  const BlockSegment bs = block_segment(segs, 16);
  __syncthreads();
  for (int i = int(threadIdx.x); i < kRegs * kWarp; i += blockDim.x) {
    const int reg = i / kWarp, l = i % kWarp;
    const int nt = reg / 4, j = reg % 4;
    const int64_t o = bs.o0 + l / 4 + 8 * (j / 2);
    const int r = r0 + nt * 8 + 2 * (l % 4) + (j % 2);
    if (nt >= nt_live || o >= bs.n_out || r >= rows) continue;
    float sum = part(0, reg, l);
    for (int k = 1; k < slots.count; ++k) sum += part(k, reg, l);
    bs.y[int64_t(r) * bs.y_stride + o] = sum;
  }
}

// As imma_matmul.cu's imma_launch: one block per 16 outputs of a segment (grid.y) and
// kRowsPerGroup activation rows (grid.x), eight warps a block, each taking slots w, w + 8, ...;
// shared memory holds each slot's NT * 4 partial sums per lane.
template <int NT, bool kOneRow = false, bool kTiles = false>
void launch_q6k(const Segments& segs, int64_t n_in, const Q6kActs& a, int rows, cudaStream_t s) {
  const int n_sb = int(n_in / kSb);
  const Slots slots = slots_of(n_sb);
  const int warps = std::min(slots.count, kMaxWarps);
  const size_t smem = size_t(slots.count) * NT * 4 * kWarp * sizeof(float);
  // Up to 64 KiB of dynamic shared memory (kMaxSlots x 16 x 32 floats); a refusal shows as the
  // launch error, which the caller checks.
  constexpr auto kernel = imma_q6k_kernel<NT, kOneRow, kTiles>;
  (void)raise_smem_limit<kernel>(kMaxSlots * NT * 4 * kWarp * int(sizeof(float)));
  const dim3 grid(ceil_div(rows, kRowsPerGroup), unsigned(segs.first_block[segs.n]));
  launch(kernel, grid, dim3(warps * kWarp), smem, s, segs, n_sb, slots,
         static_cast<const int8_t*>(a.q), static_cast<const float*>(a.d), static_cast<const uint2*>(a.s), a.rows_pad,
         rows);
}

}  // namespace

void imma_quantize_q6k(const float* x, int64_t n_in, int rows, void* scratch, cudaStream_t s) {
  const Q6kActs a = q6k_acts(scratch, n_in, rows);
  launch(quantize_q8k_q6k_k, dim3(unsigned(n_in / kSb), unsigned(a.rows_pad)), dim3(kWarp), 0, s, x, rows, int(n_in),
         a);
}

void imma_q6k_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                    cudaStream_t s, const void* quantized) {
  if (n <= 0) return;
  const int64_t n_in = ws[0]->n_in;
  if (quantized != nullptr) {  // the producer of x wrote them (q8k_fused_q6k_offset)
    auto* fused = static_cast<uint8_t*>(const_cast<void*>(quantized));
    scratch = fused + q8k_fused_q6k_offset(n_in, (rows + 7) / 8 * 8);
  }
  const Q6kActs a = q6k_acts(scratch, n_in, rows);
  if (quantized == nullptr) imma_quantize_q6k(x, n_in, rows, scratch, s);
  for_each_launch(ws, ys, n, [&](const Segments& segs) {
    if (rows > kImmaGemmMinRows) return imma_q6k_gemm(segs, n_in, a, rows, s);  // (reads segs.q6k_tiles)
    auto decode = [&](auto tiles) {
      constexpr bool kTiles = decltype(tiles)::value;
      if (rows == 1) launch_q6k<1, true, kTiles>(segs, n_in, a, rows, s);
      else if (rows <= 8) launch_q6k<1, false, kTiles>(segs, n_in, a, rows, s);
      else if (rows <= 16) launch_q6k<2, false, kTiles>(segs, n_in, a, rows, s);
      else launch_q6k<4, false, kTiles>(segs, n_in, a, rows, s);
    };
    segs.q6k_tiles ? decode(std::true_type{}) : decode(std::false_type{});
  });
}

void imma_q6k_gemm_quantized(const Weight& w, float* y, int rows, const void* scratch, cudaStream_t s) {
  const Q6kActs a = q6k_acts(const_cast<void*>(scratch), w.n_in, rows);
  const Weight* ws[1] = {&w};
  float* ys[1] = {y};
  for_each_launch(ws, ys, 1, [&](const Segments& segs) { imma_q6k_gemm(segs, w.n_in, a, rows, s); });
}

}  // namespace df::cuda
