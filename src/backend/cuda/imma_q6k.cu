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
// Loads and registers. Every weight word of a super-block (12 per row: ql and qh; 5 more shared by
// the row's four lanes: the scales and d) is issued before the first use, as in the Q4_K kernel,
// which is bound by memory latency; the first super-block's even before waiting for the quantizer
// (pdl_wait: weights are immutable; the kernel calls pdl_trigger first, as every matmul does, see
// common.cuh). Activations come a quarter (four groups) at a time, the float part's inputs when
// used: with the 34 weight words in flight that is what fits one n-tile in 80 registers (24 warps
// an SM) without spilling.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/imma_common.cuh"
#include "backend/cuda/imma_q6k.cuh"
#include "backend/cuda/kernels.h"

namespace df::cuda {

namespace {

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

// Q8_K (q8k_quantize_lane: the CPU's values) in Q6_K's format, one warp per (super-block b, row r).
__global__ void __launch_bounds__(kWarp)
    quantize_q8k_q6k_k(const float* __restrict__ x, int rows, int rows_pad, int n_in, int8_t* __restrict__ xq,
                       float* __restrict__ xd, uint2* __restrict__ xs) {
  pdl_wait();
  pdl_trigger();
  const int b = blockIdx.x, r = blockIdx.y, lane = threadIdx.x;
  int q[8];
  const float d = q8k_quantize_lane(x, rows, n_in, b, r, lane, q);
  const uint2 packed = q8k_pack(q);
  int s = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) s += q[j];
  // Lanes 2j and 2j + 1 hold group j (16 elements) as words G0 G1 | G2 G3. Output word c of
  // the group (slots 4c..4c+3) is G_c, or in odd super-blocks bytes 2, 3 of G_{c-1} and 0, 1
  // of G_c (q6k_elem); lane 2j writes words 0, 1, lane 2j + 1 words 2, 3, at 64 c + 4 j.
  const uint32_t ox = __shfl_xor_sync(0xffffffffu, packed.x, 1), oy = __shfl_xor_sync(0xffffffffu, packed.y, 1);
  const bool second = lane & 1;
  const uint32_t G[4] = {second ? ox : packed.x, second ? oy : packed.y, second ? packed.x : ox,
                         second ? packed.y : oy};
  const int j = lane / 2;
  int8_t* out = xq + (int64_t(b) * rows_pad + r) * kSb + 4 * j;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int c = 2 * int(second) + k;
    const uint32_t word = q6k_rot(b) == 0 ? G[c] : __byte_perm(G[(c + 3) % 4], G[c], 0x5432);
    *reinterpret_cast<uint32_t*>(out + 64 * c) = word;
  }
  // Per-16 sums; lane c < 4 writes the low and high byte planes of slots 4c..4c+3.
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  int t[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) t[i] = __shfl_sync(0xffffffffu, s, 2 * q6k_elem(b, 4 * (lane % 4) + i));
  if (lane < 4) xs[(size_t(b) * rows_pad + r) * 4 + lane] = sum_byte_planes(t);
  if (lane == 0) xd[size_t(b) * rows_pad + r] = d;
}

// w[c] for this lane's c, without indexing registers at run time.
__device__ __forceinline__ uint32_t lane_word(const uint32_t (&w)[5], int c) {
  const uint32_t lo = c & 1 ? w[1] : w[0], hi = c & 1 ? w[3] : w[2];
  return c & 2 ? hi : lo;
}

// Blocks per SM the register budget must allow: 3 for one n-tile (24 warps to hide latency), 2 above.
template <int NT>
__global__ void __launch_bounds__(kMaxWarps* kWarp, NT == 1 ? 3 : 2)
    imma_q6k_kernel(const Segments segs, int n_sb, Slots slots, const int8_t* __restrict__ xq,
                    const float* __restrict__ xd, const uint2* __restrict__ xs, int rows_pad, int rows) {
  pdl_trigger();  // first: the next kernel may be scheduled while this one waits (see common.cuh)
  constexpr int kRegs = NT * 4;
  extern __shared__ float part_smem[];  // [slot][kRegs][kWarp]
  auto part = [&](int slot, int reg, int l) -> float& { return part_smem[(slot * kRegs + reg) * kWarp + l]; };

  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, n_warps = blockDim.x / kWarp;
  const int g = lane / 4, c = lane % 4;
  const BlockSegment bs = block_segment(segs, 16);
  const uint8_t* const w = bs.w;
  const size_t row_bytes = bs.row_bytes;
  const int64_t n_out = bs.n_out;
  float* const y = bs.y;
  const int64_t y_stride = bs.y_stride;
  const int64_t o0 = bs.o0;
  const int r0 = int(blockIdx.x) * kRowsPerGroup;
  const int nt_live = min(NT, (rows_pad - r0) / 8);  // n-tiles with rows (uniform)

  const uint8_t* wrow[2];  // weight rows g and g + 8 (tails: the last row, computed, not stored)
#pragma unroll
  for (int h = 0; h < 2; ++h) wrow[h] = w + size_t(min(o0 + g + 8 * h, n_out - 1)) * row_bytes;
  // Activation row of column g of n-tile 0 (n-tile nt: 8 rows further). Decode (one n-tile):
  // lanes of padding rows read row r0's bytes, the same sectors as a live lane's (no extra
  // traffic); their columns of the products are never stored.
  const int x_row0 = NT == 1 && r0 + g >= rows ? r0 : r0 + g;
  const uint32_t realign = c == 0 ? 0x3254u : 0x3210u;  // odd super-blocks (see the header)
  bool waited = false;

  // Four n-tiles keep their float sums in the slot's shared memory (registers; the same
  // operations in the same order, so the results do not depend on where they are kept).
  constexpr bool kAccInSmem = NT == 4;
  for (int slot = warp; slot < slots.count; slot += n_warps) {
    float acc[NT][4] = {};
    if constexpr (kAccInSmem) {
#pragma unroll
      for (int i = 0; i < kRegs; ++i) part(slot, i, lane) = 0.0f;
    }

    // One super-block; kRot = q6k_rot(sb), the block's offset from 4-byte alignment.
    auto step = [&](auto rot_tag, int sb) {
      constexpr int kRot = decltype(rot_tag)::value;
      uint32_t q[2][12], win[2][5];  // per row: ql/qh words (16-byte spans 0..11); bytes 192-kRot.. (scales, d)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint8_t* al = wrow[h] + size_t(sb) * kQ6kBytes - kRot;
#pragma unroll
        for (int s = 0; s < 12; ++s) q[h][s] = __ldg(reinterpret_cast<const unsigned*>(al + 16 * s + 4 * c));
#pragma unroll
        for (int i = 0; i < 5; ++i) win[h][i] = __ldg(reinterpret_cast<const unsigned*>(al + 192 + 4 * i));
      }
      if (!waited) {  // the activations are the quantizer's output
        pdl_wait();
        waited = true;
      }

      if constexpr (kRot != 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int s = 0; s < 12; ++s) q[h][s] = __byte_perm(q[h][s], s < 11 ? q[h][s + 1] : win[h][0], realign);
      }
      // This lane's row of the activations (column g of n-tile 0); n-tile nt is 8 rows further.
      const size_t xi = size_t(sb) * rows_pad + x_row0;

      int isum[NT][4] = {};  // sum_j sc_j * dot_j, exact
#pragma unroll
      for (int t = 0; t < 4; ++t) {  // groups a quarter (four) at a time: 16 activation bytes per n-tile
        uint4 xt[NT];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
          if (nt < nt_live) xt[nt] = __ldg(reinterpret_cast<const uint4*>(xq + (xi + 8 * nt) * kSb + 64 * c + 16 * t));
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          const int j = 4 * t + jj, hh = j / 8, k = (j / 2) % 4, m = j % 2;
          const uint32_t a0 = q6_values(q[0][4 * hh + 2 * (k % 2) + m], q[0][8 + 2 * hh + m], k);
          const uint32_t a1 = q6_values(q[1][4 * hh + 2 * (k % 2) + m], q[1][8 + 2 * hh + m], k);
          const int sc0 = signed_byte(win[0][(j + kRot) / 4], (j + kRot) % 4);
          const int sc1 = signed_byte(win[1][(j + kRot) / 4], (j + kRot) % 4);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            if (nt >= nt_live) continue;  // uniform
            const uint32_t b = jj == 0 ? xt[nt].x : jj == 1 ? xt[nt].y : jj == 2 ? xt[nt].z : xt[nt].w;
            int d[4] = {0, 0, 0, 0};
            imma_16816<true, false>(d, a0, a1, b);
            isum[nt][0] += sc0 * d[0];
            isum[nt][1] += sc0 * d[1];
            isum[nt][2] += sc1 * d[2];
            isum[nt][3] += sc1 * d[3];
          }
        }
      }

      // Float part, once per super-block and (row, column), as the CPU's finish_q6k:
      // acc += (d_x * d) * (isum - 32 * sum_j sc_j * bsum_j), d_x of this lane's columns 2c, 2c + 1.
      // The offset is one mma on the high byte planes of the per-16 sums (s8), times 256, plus one
      // on the low planes (u8); A: this lane's scale slots 4c..4c+3 of rows g, g + 8.
      uint32_t asc[2];
      float dw[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        asc[h] = kRot != 0 && c == 0 ? __byte_perm(win[h][0], win[h][4], 0x3254) : lane_word(win[h], c);
        dw[h] = __half2float(__ushort_as_half(static_cast<unsigned short>(kRot == 0 ? win[h][4] & 0xFFFF : win[h][4] >> 16)));
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        if (nt >= nt_live) continue;
        const uint2 bsum = __ldg(xs + (xi + 8 * nt) * 4 + c);
        const float2 dx = *reinterpret_cast<const float2*>(xd + size_t(sb) * rows_pad + r0 + nt * 8 + 2 * c);
        int off[4];
        q6k_group_sums(off, asc[0], asc[1], bsum);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float scale = __fmul_rn(i % 2 ? dx.y : dx.x, dw[i / 2]);
          float& a = kAccInSmem ? part(slot, nt * 4 + i, lane) : acc[nt][i];
          a = __fmaf_rn(scale, __int2float_rn(isum[nt][i] - 32 * off[i]), a);
        }
      }
    };

    for (int sb = slot * slots.per_slot; sb < min(n_sb, (slot + 1) * slots.per_slot); ++sb) {
      if (q6k_rot(sb) == 0) step(std::integral_constant<int, 0>{}, sb);
      else step(std::integral_constant<int, 2>{}, sb);
    }

    if constexpr (!kAccInSmem) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int j = 0; j < 4; ++j) part(slot, nt * 4 + j, lane) = acc[nt][j];
    }
  }  // slot
  if (!waited) pdl_wait();  // before writing y (every warp has a slot; kept for the rule's sake)

  // Sum the slots in slot order; thread t of the block finishes elements t, t + blockDim.x, ...
  __syncthreads();
  for (int i = int(threadIdx.x); i < kRegs * kWarp; i += blockDim.x) {
    const int reg = i / kWarp, l = i % kWarp;
    const int nt = reg / 4, j = reg % 4;
    const int64_t o = o0 + l / 4 + 8 * (j / 2);
    const int r = r0 + nt * 8 + 2 * (l % 4) + (j % 2);
    if (nt >= nt_live || o >= n_out || r >= rows) continue;
    float sum = part(0, reg, l);
    for (int k = 1; k < slots.count; ++k) sum += part(k, reg, l);
    y[int64_t(r) * y_stride + o] = sum;
  }
}

// As imma_matmul.cu's imma_launch: one block per 16 outputs of a segment (grid.y) and
// kRowsPerGroup activation rows (grid.x), eight warps a block, each taking slots w, w + 8, ...;
// shared memory holds each slot's NT * 4 partial sums per lane.
template <int NT>
void launch_q6k(const Segments& segs, int64_t n_in, const Q6kActs& a, int rows, cudaStream_t s) {
  const int n_sb = int(n_in / kSb);
  const Slots slots = slots_of(n_sb);
  const int warps = std::min(slots.count, kMaxWarps);
  const size_t smem = size_t(slots.count) * NT * 4 * kWarp * sizeof(float);
  // Up to 64 KiB of dynamic shared memory (kMaxSlots x 16 x 32 floats); a refusal shows as the
  // launch error, which the caller checks.
  (void)raise_smem_limit<imma_q6k_kernel<NT>>(kMaxSlots * NT * 4 * kWarp * int(sizeof(float)));
  const dim3 grid(ceil_div(rows, kRowsPerGroup), unsigned(segs.first_block[segs.n]));
  launch(imma_q6k_kernel<NT>, grid, dim3(warps * kWarp), smem, s, segs, n_sb, slots,
         static_cast<const int8_t*>(a.q), static_cast<const float*>(a.d), static_cast<const uint2*>(a.s), a.rows_pad,
         rows);
}

}  // namespace

void imma_q6k_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                    cudaStream_t s) {
  if (n <= 0) return;
  const int64_t n_in = ws[0]->n_in;
  const Q6kActs a = q6k_acts(scratch, n_in, rows);
  launch(quantize_q8k_q6k_k, dim3(unsigned(n_in / kSb), unsigned(a.rows_pad)), dim3(kWarp), 0, s, x, rows, a.rows_pad,
         int(n_in), a.q, a.d, a.s);
  for_each_launch(ws, ys, n, [&](const Segments& segs) {
    if (rows > kImmaGemmMinRows) imma_q6k_gemm(segs, n_in, a, rows, s);
    else if (rows <= 8) launch_q6k<1>(segs, n_in, a, rows, s);
    else if (rows <= 16) launch_q6k<2>(segs, n_in, a, rows, s);
    else launch_q6k<4>(segs, n_in, a, rows, s);
  });
}

}  // namespace df::cuda
