// The integer tensor-core matmul for Q8_0 weights, designed like the Q4_K one (imma_matmul.cu:
// its header comment gives the why, slots and batch invariance, all of which hold here
// unchanged). Calls of more than kImmaGemmMinRows rows go to the tiled prefill kernel
// (imma_q80_gemm.cu) after the quantizer below, which gives each row the same bits.
//
// Q8_0. A 34-byte block holds 32 weights q (int8) and an f16 scale d: w = d q. The CPU
// (quant/vec_dot_*) multiplies them with Q8_0 activations (the same format, from
// quantize_q8_0) and sums float(dot) * (d_w * d_x) over the blocks; here one mma.m16n8k32
// (s8 x s8 -> s32) forms the dot of a block for a 16 x 8 tile of (output, activation row)
// exactly, and the float part (q80_block_fma) runs once per block and pair.
//
// Activations. quantize_q80_k writes each activation row's Q8_0 blocks exactly as the CPU's
// quantize_q8_0 (d = amax / 127, id = 1 / d, q = trunc(x id + copysign(0.49999997, x id)), d
// rounded to f16, with explicitly rounded intrinsics as kv_store's q8_0 path in attention.cu),
// so the integer dots equal the CPU's and the backends differ only in float summation order.
// The products of a step do not share the norms' fused Q8_K bytes (another format): a group
// of Q8_0 products sharing an input quantizes it once (imma_matmul_group).
//
// Weights. Only the tile layout (quant/q80_tiles.h; CudaBackend::upload_matrix makes it): GGUF
// blocks are 2-byte aligned, the tiles give each lane its 16 bytes of a block (rows g and g + 8,
// quants 8c .. 8c + 7) as one coalesced word and its eight scale pairs as two. Those 8
// quants fill the lane's k slots 4c..4c+3 and 16+4c..16+4c+3 of the fragment; the activation
// operand takes the same 8 elements of its row (one 8-byte load), so the mma's k order is a
// permutation of the block's shared by both operands and the dot is unchanged.
//
// Split and batch invariance. A row's 256-element super-blocks (8 blocks; n_in a multiple of
// 256) fall into the slots of slots_of, as for Q4_K: a warp sums a slot's blocks in order into
// one float, the block then sums the slots in slot order; the GEMM keeps that order.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/imma_common.cuh"
#include "backend/cuda/imma_q80.cuh"
#include "backend/cuda/kernels.h"

namespace df::cuda {

namespace {

constexpr int kMaxNt = 4;         // n-tiles per launch group: 32 activation rows
constexpr int kRowsPerGroup = 8 * kMaxNt;
constexpr int kMaxWarps = 8;      // warps a block (q80_launch)

// One warp per (super-block b, row r): lane l quantizes elements 8l .. 8l + 7 (block l / 4, the
// block's amax over its four lanes). Rows past `rows` (padding up to rows_pad) are zeros, d = 0.
__global__ void __launch_bounds__(kWarp)
    quantize_q80_k(const float* __restrict__ x, int rows, int n_in, Q80Acts a) {
  pdl_wait();
  pdl_trigger();
  const int b = blockIdx.x, r = blockIdx.y, lane = threadIdx.x;
  const int64_t e = int64_t(b) * kSb + 8 * lane;
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = 0.0f;
  if (r < rows) {
    const float4 p = *reinterpret_cast<const float4*>(x + int64_t(r) * n_in + e);
    const float4 q = *reinterpret_cast<const float4*>(x + int64_t(r) * n_in + e + 4);
    v[0] = p.x, v[1] = p.y, v[2] = p.z, v[3] = p.w, v[4] = q.x, v[5] = q.y, v[6] = q.z, v[7] = q.w;
  }
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(v[j]));
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));  // the max is exact in any order
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
  const float d = __fdiv_rn(amax, 127.0f);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  int q[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float p = __fmul_rn(v[j], id);
    q[j] = __float2int_rz(__fadd_rn(p, copysignf(0.49999997f, p)));
  }
  *reinterpret_cast<uint2*>(a.q + int64_t(r) * n_in + e) = q8k_pack(q);
  if (lane % 4 == 0) a.d[(size_t(b) * a.rows_pad + r) * kQ80SbBlocks + lane / 4] = __half2float(__float2half_rn(d));
}

// One block of 8 warps per 16 outputs (a tile) and up to 32 activation rows (NT n-tiles of 8);
// warp w takes slots w, w + 8, ... Per super-block a lane issues its ten weight loads (eight
// 16-byte quant words, two scale words) before the first use, as the Q4_K kernel does: the
// kernel is bound by memory latency, so what counts is the bytes each warp has in flight. Per
// n-tile it then loads the activations (eight 8-byte words) and the scales of its columns 2c,
// 2c + 1 (two 16-byte words each) and runs the block loop. kOneRow (a call of one row, plain
// decode): of the lane's columns 2c, 2c + 1 only even ones can be live, so the odd ones' scales
// and float part are left out (a column's bits do not depend on the others').
template <int NT, bool kOneRow>
__global__ void __launch_bounds__(kMaxWarps* kWarp, NT == 1 ? 3 : 2)
    imma_q80_kernel(const Segments segs, int n_sb, Slots slots, const int8_t* __restrict__ xq,
                    const float* __restrict__ xd, int n_in, int rows_pad, int rows) {
  static_assert(!kOneRow || NT == 1, "one row is one n-tile");
  pdl_trigger();  // first: the next kernel may be scheduled while this one waits (see common.cuh)
  constexpr int kRegs = NT * 4;
  extern __shared__ float part_smem[];  // [slot][kRegs][kWarp]
  auto part = [&](int slot, int reg, int l) -> float& { return part_smem[(slot * kRegs + reg) * kWarp + l]; };

  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, n_warps = blockDim.x / kWarp;
  const int g = lane / 4, c = lane % 4;
  const BlockSegment bs = block_segment(segs, kQ80TileRows);
  const int r0 = int(blockIdx.x) * kRowsPerGroup;
  // n-tiles with rows (uniform). imma_q80_group sends calls of 1-8 rows to one n-tile, 9-16 to
  // two and 17-32 to four (one row group, r0 = 0), so only a fourth n-tile can lack rows.
  const int nt_live = NT <= 2 ? NT : min(NT, (rows_pad - r0) / 8);

  // Super-block 0 of the block's tile (its rows are padded: no clamp): the lane's first quant
  // word and its scale words; super-block sb is sb * kQ80TileBytes further.
  const uint8_t* const tile = bs.w + size_t(bs.o0 / kQ80TileRows) * size_t(n_sb) * kQ80TileBytes;
  const uint8_t* const wq = opaque(tile + 16 * lane);
  const uint8_t* const wsc = opaque(tile + kQ80TileScales + 32 * g);
  pdl_wait();
  // Lanes of padding rows read row r0's activations (the same sectors as a live lane: no extra
  // traffic); their mma columns are never stored (an mma's columns are independent).
  const int8_t* xr[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int r = r0 + nt * 8 + g;
    xr[nt] = opaque(xq + size_t(r < rows ? r : r0) * size_t(n_in) + 8 * c);
  }
  // The scales of column 2c of n-tile 0 in super-block 0 ([super-block][row][8] floats: column
  // 2c + 1 is 32 bytes further, n-tile nt 256 bytes, super-block sb sb * d_step; every column
  // read lies below rows_pad, whose padding rows the quantizer wrote as zeros).
  const uint8_t* const dr = opaque(reinterpret_cast<const uint8_t*>(xd + size_t(r0 + 2 * c) * kQ80SbBlocks));
  const uint32_t d_step = opaque(uint32_t(rows_pad) * uint32_t(kQ80SbBlocks * sizeof(float)));

  for (int slot = warp; slot < slots.count; slot += n_warps) {
    float acc[NT][4] = {};
    const int sb_end = min(n_sb, (slot + 1) * slots.per_slot);
    for (int sb = slot * slots.per_slot; sb < sb_end; ++sb) {
      const uint32_t sbu = uint32_t(sb);
      const uint8_t* const qp = wide_madd(wq, sbu, kQ80TileBytes);
      const uint8_t* const sp = wide_madd(wsc, sbu, kQ80TileBytes);
      uint4 qw[kQ80SbBlocks];
#pragma unroll
      for (int j = 0; j < kQ80SbBlocks; ++j) qw[j] = __ldg(reinterpret_cast<const uint4*>(qp + kQ80TileBlockStride * j));
      uint32_t sw[kQ80SbBlocks];  // the scale pairs of blocks 0..7
      if constexpr (kOneRow) {  // eight 4-byte loads: with two 16-byte ones ptxas spilled at 80 registers
#pragma unroll
        for (int j = 0; j < kQ80SbBlocks; ++j) sw[j] = __ldg(reinterpret_cast<const uint32_t*>(sp + 4 * j));
      } else {
        const uint4 s_lo = __ldg(reinterpret_cast<const uint4*>(sp)), s_hi = __ldg(reinterpret_cast<const uint4*>(sp + 16));
        sw[0] = s_lo.x, sw[1] = s_lo.y, sw[2] = s_lo.z, sw[3] = s_lo.w, sw[4] = s_hi.x, sw[5] = s_hi.y, sw[6] = s_hi.z, sw[7] = s_hi.w;
      }
      const uint8_t* const dp = wide_madd(dr, sbu, d_step);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        if (nt >= nt_live) continue;  // uniform
        const int8_t* const xp = wide_madd(xr[nt], sbu, kSb);
        float dx[2][kQ80SbBlocks];  // columns 2c, 2c + 1
#pragma unroll
        for (int col = 0; col < 2; ++col) {
          if (kOneRow && col == 1) continue;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float4 v = __ldg(reinterpret_cast<const float4*>(dp + 256 * nt + 32 * col + 16 * h));
            dx[col][4 * h] = v.x, dx[col][4 * h + 1] = v.y, dx[col][4 * h + 2] = v.z, dx[col][4 * h + 3] = v.w;
          }
        }
#pragma unroll
        for (int j = 0; j < kQ80SbBlocks; ++j) {
          // Rows g, g + 8: quants 8c .. 8c + 3, then 8c + 4 .. 8c + 7 (k slots 4c.., 16 + 4c..).
          const uint32_t a[4] = {qw[j].x, qw[j].z, qw[j].y, qw[j].w};
          const uint2 xv = __ldg(reinterpret_cast<const uint2*>(xp + 32 * j));
          int dot[4];
          imma_16832_ss(dot, a, xv.x, xv.y, kMsumMagic);
          const float2 dw = q80_scale_pair(sw[j]);
#pragma unroll
          for (int k = 0; k < 4; ++k) {  // (row g | g + 8) x (column 2c | 2c + 1)
            if (kOneRow && k % 2 == 1) continue;
            acc[nt][k] = q80_block_fma(acc[nt][k], dot[k], k < 2 ? dw.x : dw.y, dx[k % 2][j]);
          }
        }
      }
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int k = 0; k < 4; ++k) part(slot, nt * 4 + k, lane) = acc[nt][k];
  }  // slot

  // Sum the slots in slot order; thread t of the block finishes elements t, t + blockDim.x, ...
  __syncthreads();
  store_slot_sums<kRegs>(part_smem, slots.count, bs.o0, bs.n_out, bs.y, bs.y_stride, r0, nt_live, rows);
}

template <int NT, bool kOneRow = false>
void q80_launch(const Segments& segs, int64_t n_in, const Q80Acts& a, int rows, cudaStream_t s) {
  const int n_sb = int(n_in / kSb);
  const Slots slots = slots_of(n_sb);
  const int warps = std::min(slots.count, kMaxWarps);
  const size_t smem = size_t(slots.count) * NT * 4 * kWarp * sizeof(float);
  // Up to 64 KiB of dynamic shared memory (kMaxSlots x 16 x 32 floats); a refusal shows as the
  // launch error, which the caller checks.
  constexpr auto kernel = imma_q80_kernel<NT, kOneRow>;
  (void)raise_smem_limit<kernel>(kMaxSlots * NT * 4 * kWarp * int(sizeof(float)));
  launch(kernel, dim3(ceil_div(rows, kRowsPerGroup), unsigned(segs.first_block[segs.n])), warps * kWarp, smem, s,
         segs, n_sb, slots, a.q, a.d, int(n_in), a.rows_pad, rows);
}

void quantize(const float* x, int64_t n_in, int rows, const Q80Acts& a, cudaStream_t s) {
  launch(quantize_q80_k, dim3(unsigned(n_in / kSb), unsigned(a.rows_pad)), kWarp, 0, s, x, rows, int(n_in), a);
}

}  // namespace

bool imma_q80_takes(int64_t n_in) { return n_in > 0 && n_in % kSb == 0 && n_in <= (int64_t(1) << 24); }

size_t imma_q80_scratch_bytes(int64_t n_in, int rows) { return q80_layout(n_in, (rows + 7) / 8 * 8).bytes; }

size_t imma_q80_scales_offset(int64_t n_in, int rows) { return q80_layout(n_in, (rows + 7) / 8 * 8).d; }

void imma_quantize_q80(const float* x, int64_t n_in, int rows, void* scratch, cudaStream_t s) {
  quantize(x, n_in, rows, q80_acts(scratch, n_in, rows), s);
}

void imma_q80_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                    cudaStream_t s) {
  if (n <= 0) return;
  const int64_t n_in = ws[0]->n_in;
  const Q80Acts a = q80_acts(scratch, n_in, rows);
  quantize(x, n_in, rows, a, s);
  for_each_launch(ws, ys, n, [&](const Segments& segs) {
    if (takes_gemm(segs, rows)) return imma_q80_gemm(segs, n_in, a, rows, s);
    if (rows == 1) q80_launch<1, true>(segs, n_in, a, rows, s);
    else if (rows <= 8) q80_launch<1>(segs, n_in, a, rows, s);
    else if (rows <= 16) q80_launch<2>(segs, n_in, a, rows, s);
    else q80_launch<4>(segs, n_in, a, rows, s);
  });
}

void imma_q80_gemm_quantized(const Weight& w, float* y, int rows, const void* scratch, cudaStream_t s,
                             ImmaGemmShape shape) {
  const Q80Acts a = q80_acts(const_cast<void*>(scratch), w.n_in, rows);
  const Weight* ws[1] = {&w};
  float* ys[1] = {y};
  for_each_launch(ws, ys, 1, [&](const Segments& segs) { imma_q80_gemm(segs, w.n_in, a, rows, s, shape); });
}

}  // namespace df::cuda
