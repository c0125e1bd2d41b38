// The integer tensor-core matmul for IQ4_XS weights stored as tiles (quant/iq4xs_tiles.h), for
// calls of up to kImmaGemmMinRows rows (decode, verify); more rows go to imma_iq4xs_gemm.cu,
// which gives each row the same bits. Designed like the Q4_K kernel (imma_matmul.cu: its header
// comment gives the why, the slots and the batch invariance, all of which hold here unchanged).
//
// IQ4_XS. A 136-byte super-block holds 256 weights d * (ls_j - 32) * T[n] in 8 sub-blocks of 32
// (T: the 16 signed code-book values, n a 4-bit index, ls_j a 6-bit scale). As the CPU's dot
// product does (vec_dot_scalar.cpp dot_iq4_xs, with Q8_K activations), the kernel sums T[n]
// times the Q8_K ints per sub-block exactly (one m16n8k32 s8 x s8 pair, iq4xs_operands.cuh),
// scales each sub-block's integer sum by ls_j - 32 (one IMAD per output), and applies the float
// part once per super-block: acc += (d_x * d) * float(isum).
//
// Fragments and activations. Lane (g, c) holds weight rows g and g + 8 of the block's 16-row
// tile and elements 8c .. 8c + 7 of each sub-block (the tiles' nibble order): the activation
// operand of a sub-block is the 8 bytes of its row at element 8c, the Q4_K kernel's load. So
// the activations are the Q4_K kernels' Q8_K layout (quantize_q8k_k, or the fused copy a norm
// or swiglu wrote), and a group of IQ4_XS products shares one quantization.
//
// Loads. Per super-block a lane loads its 64 quant bytes (four coalesced 16-byte words) and its
// rows' headers (one 16-byte word), all before the first use (the kernel is bound by memory
// latency, as the Q4_K one); for up to two n-tiles the whole super-block's activations too.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/imma_common.cuh"
#include "backend/cuda/imma_iq4xs.cuh"
#include "backend/cuda/kernels.h"

namespace df::cuda {

namespace {

constexpr int kMaxNt = 4;  // n-tiles per launch group: 32 activation rows
constexpr int kRowsPerGroup = 8 * kMaxNt;
constexpr int kMaxWarps = 8;  // warps a block, each taking slots w, w + 8, ...

// Blocks per SM the register budget must allow: 3 for one n-tile (24 warps to hide latency), 2
// above (as imma_matmul.cu). kOneRow (a call of one row, plain decode): of the lane's columns
// 2c, 2c + 1 only even ones can be live, so the odd ones' scale multiplies and float part are
// left out (a column's bits do not depend on the others').
// kG: m-tile groups of 16 outputs a CUDA block, as in imma_matmul.cu (warp w takes group w % kG
// and that group's slots; the groups' warps share their activation reads; same bits).
template <int NT, bool kOneRow, int kG = 1>
__global__ void __launch_bounds__(kMaxWarps* kWarp, NT == 1 ? 3 : 2)
    imma_iq4xs_kernel(const Segments segs, int n_sb, Slots slots, const int8_t* __restrict__ xq,
                      const float* __restrict__ xd, int n_in, int rows_pad, int rows) {
  static_assert(!kOneRow || NT == 1, "one row is one n-tile");
  pdl_trigger();  // first: the next kernel may be scheduled while this one waits (see common.cuh)
  constexpr int kRegs = NT * 4;
  extern __shared__ float part_smem[];  // [group][slot][kRegs][kWarp]
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, n_warps = blockDim.x / kWarp;
  const int g = lane / 4, c = lane % 4;
  const int grp = warp % kG, n_groups = segs.first_block[segs.n];
  const int group = int(blockIdx.y) * kG + grp;  // this warp's group (past the last: idle)
  float* const grp_part = part_smem + size_t(grp) * size_t(slots.count) * kRegs * kWarp;
  auto part = [&](int slot, int reg, int l) -> float& { return grp_part[(slot * kRegs + reg) * kWarp + l]; };
  const int r0 = int(blockIdx.x) * kRowsPerGroup;
  // n-tiles with rows (uniform). imma_iq4xs_group sends calls of 1-8 rows to one n-tile, 9-16
  // to two, so below three n-tiles all are live and the loops have no branch.
  const int nt_live = NT <= 2 ? NT : min(NT, (rows_pad - r0) / 8);

  // Super-block 0 of the block's tile (its rows are padded: no clamp): the lane's first quant
  // word and its rows' headers; super-block sb is sb * kIq4xsTileBytes further.
  const uint8_t *wq, *wh;
  {
    const BlockSegment bs = block_segment(segs, 16, min(group, n_groups - 1));
    const uint8_t* const tile = bs.w + size_t(bs.o0 / kIq4xsTileRows) * size_t(n_sb) * kIq4xsTileBytes;
    wq = opaque(tile + 16 * lane);
    wh = opaque(tile + kIq4xsTileHeaders + 16 * g);
  }
  pdl_wait();
  // Lanes of padding rows read row r0's activations (the same sectors as a live lane: no extra
  // traffic); their mma columns are never stored, so no select zeroes them.
  const int8_t* xr[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int r = r0 + nt * 8 + g;
    xr[nt] = opaque(xq + size_t(r < rows ? r : r0) * size_t(n_in) + 8 * c);
  }
  // The Q8_K scales of this lane's columns 2c, 2c + 1 in super-block 0 (n-tile nt 8 rows further).
  const uint8_t* const dr = opaque(reinterpret_cast<const uint8_t*>(xd + r0 + 2 * c));
  const uint32_t d_step = opaque(uint32_t(rows_pad) * 4u);

  const int first_slot = group < n_groups ? warp / kG : slots.count;  // (uniform in the warp)
  for (int slot = first_slot; slot < slots.count; slot += n_warps / kG) {
    float acc[NT][4] = {};
    const int sb_end = min(n_sb, (slot + 1) * slots.per_slot);
    for (int sb = slot * slots.per_slot; sb < sb_end; ++sb) {
      const uint32_t sbu = uint32_t(sb);
      const uint8_t* const qp = wide_madd(wq, sbu, uint32_t(kIq4xsTileBytes));
      const uint8_t* const hp = wide_madd(wh, sbu, uint32_t(kIq4xsTileBytes));
      const uint4 hw = __ldg(reinterpret_cast<const uint4*>(hp));  // rows g (x, y) and g + 8 (z, w)
      uint4 qw[4];  // pair i: sub-block 2i rows g, g + 8 (x, y), 2i + 1 rows g, g + 8 (z, w)
#pragma unroll
      for (int i = 0; i < 4; ++i) qw[i] = __ldg(reinterpret_cast<const uint4*>(qp + kIq4xsTileQuantStride * i));
      const int8_t* xp[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) xp[nt] = wide_madd(xr[nt], sbu, uint32_t(kSb));
      const uint8_t* const dp = wide_madd(dr, sbu, d_step);

      constexpr int kXAhead = NT <= 2 ? 4 : 1;  // sub-block pairs of activations loaded up front
      uint2 xv[kXAhead][2][NT];
      auto load_x = [&](int i, uint2 (&v)[2][NT]) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          if (nt >= nt_live) continue;  // uniform
#pragma unroll
          for (int p = 0; p < 2; ++p) v[p][nt] = __ldg(reinterpret_cast<const uint2*>(xp[nt] + 64 * i + 32 * p));
        }
      };
      if constexpr (kXAhead == 4) {
#pragma unroll
        for (int i = 0; i < 4; ++i) load_x(i, xv[i]);
      }
      float2 dx[NT];
      auto load_dx = [&](int nt) { dx[nt] = __ldg(reinterpret_cast<const float2*>(dp) + 4 * nt); };
      if constexpr (NT == 1) load_dx(0);

      int isum[NT][4] = {};  // sum_j (ls_j - 32) dot_j, exact
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        uint2(&xi)[2][NT] = xv[kXAhead == 4 ? i : 0];
        if constexpr (kXAhead != 4) load_x(i, xi);
#pragma unroll
        for (int p = 0; p < 2; ++p) {  // sub-block j = 2i + p
          const int j = 2 * i + p;
          uint32_t lo[4], hi[4];
          iq4xs::a_operands(p ? qw[i].z : qw[i].x, p ? qw[i].w : qw[i].y, lo, hi);
          const int sc0 = iq4xs::scale_of(hw.x, hw.y, j), sc1 = iq4xs::scale_of(hw.z, hw.w, j);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            if (nt >= nt_live) continue;
            int dd[4];
            iq4xs_dot(dd, lo, hi, xi[p][nt].x, xi[p][nt].y);
#pragma unroll
            for (int k = 0; k < 4; ++k) {  // outputs k: row g (k < 2) or g + 8, column 2c + k % 2
              if (kOneRow && k % 2 == 1) continue;
              isum[nt][k] += (k < 2 ? sc0 : sc1) * dd[k];
            }
          }
        }
      }

      // Float part, once per super-block and (row, column).
      const float d0 = iq4xs_d(hw.x, hw.y), d1 = iq4xs_d(hw.z, hw.w);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        if (nt >= nt_live) continue;
        if constexpr (NT != 1) load_dx(nt);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          if (kOneRow && k % 2 == 1) continue;
          const float t = iq4xs_sb_term(k % 2 ? dx[nt].y : dx[nt].x, k < 2 ? d0 : d1, isum[nt][k]);
          acc[nt][k] = __fadd_rn(acc[nt][k], t);
        }
      }
    }

#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int k = 0; k < 4; ++k) part(slot, nt * 4 + k, lane) = acc[nt][k];
  }  // slot

  // Sum the slots in slot order; thread t of the block finishes elements t, t + blockDim.x, ...
  // (The groups' segments are looked up again here: kept over the loop they take registers.)
  __syncthreads();
#pragma unroll
  for (int gi = 0; gi < kG; ++gi) {
    const int block = int(blockIdx.y) * kG + gi;
    if (block >= n_groups) break;  // (uniform in the block)
    const BlockSegment bs = block_segment(segs, 16, block);
    store_slot_sums<kRegs>(part_smem + size_t(gi) * size_t(slots.count) * kRegs * kWarp, slots.count, bs.o0,
                           bs.n_out, bs.y, bs.y_stride, r0, nt_live, rows);
  }
}

// As imma_matmul.cu's imma_launch: one block per 16 outputs of a segment (grid.y) and
// kRowsPerGroup activation rows (grid.x), min(slots, 8) warps; shared memory holds each slot's
// NT * 4 partial sums per lane.
template <int NT, bool kOneRow = false, int kG = 1>
void launch_iq4xs(const Segments& segs, int64_t n_in, const int8_t* xq, const float* xd, int rows, int rows_pad,
                  cudaStream_t s) {
  static_assert(kMaxWarps % kG == 0, "a block's warps split evenly over its m-tile groups");
  const int n_sb = int(n_in / kSb);
  const Slots slots = slots_of(n_sb);
  const int warps = kG * std::min(slots.count, kMaxWarps / kG);
  const size_t smem = size_t(kG) * size_t(slots.count) * NT * 4 * kWarp * sizeof(float);
  // Up to kG x 64 KiB of dynamic shared memory (kMaxSlots x 16 x 32 floats a group); a refusal
  // shows as the launch error, which the caller checks.
  constexpr auto kernel = imma_iq4xs_kernel<NT, kOneRow, kG>;
  (void)raise_smem_limit<kernel>(kG * kMaxSlots * NT * 4 * kWarp * int(sizeof(float)));
  const dim3 grid(ceil_div(rows, kRowsPerGroup), ceil_div(unsigned(segs.first_block[segs.n]), unsigned(kG)));
  launch(kernel, grid, dim3(warps * kWarp), smem, s, segs, n_sb, slots, xq, xd, int(n_in), rows_pad, rows);
}

}  // namespace

void imma_iq4xs_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                      cudaStream_t s, const void* quantized) {
  if (n <= 0) return;
  const int64_t n_in = ws[0]->n_in;
  const int rows_pad = (rows + 7) / 8 * 8;
  const Q8kLayout l = q8k_layout(n_in, rows_pad);
  // The activations: quantized here, or by the producer of x (its Q4_K layout is first).
  const auto* acts = static_cast<const uint8_t*>(quantized != nullptr ? quantized : scratch);
  const auto* xq = reinterpret_cast<const int8_t*>(acts + l.q);
  const auto* xd = reinterpret_cast<const float*>(acts + l.d);
  if (quantized == nullptr) imma_quantize(x, n_in, rows, scratch, s);
  for_each_launch(ws, ys, n, [&](const Segments& segs) {
    if (takes_gemm(segs, rows)) imma_iq4xs_gemm(segs, n_in, xq, xd, rows, rows_pad, s);
    else if (rows == 1) launch_iq4xs<1, true>(segs, n_in, xq, xd, rows, rows_pad, s);
    else if (rows <= 8) launch_iq4xs<1>(segs, n_in, xq, xd, rows, rows_pad, s);
    // 2 groups for 9-16 rows: mix-iq4_xs's 16-row forward 12.82 -> 12.43 ms (H100, session 15).
    else if (rows <= 16) launch_iq4xs<2, false, 2>(segs, n_in, xq, xd, rows, rows_pad, s);
    else launch_iq4xs<4>(segs, n_in, xq, xd, rows, rows_pad, s);
  });
}

}  // namespace df::cuda
