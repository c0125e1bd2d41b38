// What the Q6_K integer tensor-core kernels share: imma_q6k.cu (the activation quantizer, and
// the kernel for calls of up to kImmaGemmMinRows rows) and imma_q6k_gemm.cu (the tiled prefill
// product for more rows, each output bit-identical to imma_q6k.cu's for the same row). The
// block format, the activations' layout and the weight unpacking are explained in imma_q6k.cu's
// header comment.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/imma_common.cuh"

namespace df::cuda {

constexpr int kQ6kBytes = 210;  // bytes per Q6_K super-block: 128 ql, 64 qh, 16 scales, d

// Q6_K blocks are 210 bytes, so in a row whose start is 4-byte aligned the odd super-blocks
// start at 2 mod 4. Lane c of an mma takes four consecutive bytes of a 16-element group as one
// aligned word: bytes 4c..4c+3 in even super-blocks, 4c-2..4c+1 (mod 16) in odd ones. Slot
// 4c + i of group j of super-block b therefore holds element 16 j + q6k_elem(b, 4c + i).
__host__ __device__ constexpr int q6k_rot(int64_t sb) { return 2 * int(sb & 1); }
__host__ __device__ constexpr int q6k_elem(int64_t sb, int slot) { return (slot - q6k_rot(sb) + 16) % 16; }

// sum_j sc_j * bsum_j of one super-block for the four outputs of an m16n8k16 tile a lane holds
// (weight rows g, g + 8 x activation rows 2c, 2c + 1): two mma of the rows' sixteen scales
// (asc0, asc1: signed bytes) by the activations' per-16 sums as byte planes (bsum.y the signed
// high bytes, bsum.x the unsigned low ones), exact. The kernels subtract 32 times it (the q - 32
// offset) from the super-block's integer dot.
__device__ __forceinline__ void q6k_group_sums(int (&off)[4], uint32_t asc0, uint32_t asc1, uint2 bsum) {
  off[0] = off[1] = off[2] = off[3] = 0;
  imma_16816<false, false>(off, asc0, asc1, bsum.y);
#pragma unroll
  for (int i = 0; i < 4; ++i) off[i] *= 256;
  imma_16816<false, true>(off, asc0, asc1, bsum.x);
}

// The quantized activations in Q6_K's format inside the scratch (q8k_layout; rows padded to
// rows_pad, a multiple of 8, padding rows zeros with d = 0): per super-block and row (in that
// order: n-tiles are a constant stride apart) the 256 int8 values in mma-operand order (lane
// c's words at 64c + 4j, slots q6k_elem) and the sixteen per-16 sums as low and high byte
// planes in the same slot order (4 x uint2), the B operands of the two mma that form
// sum_j scale_j * sum_j; the scales d as for Q4_K, [super-block][row].
struct Q6kActs {
  int8_t* q;  // [super-block][row][256]
  float* d;   // [super-block][row]
  uint2* s;   // [super-block][row][lane c]
  int rows_pad;
};

// The four u8 values (0..63) of chunk k in one ql word (low nibbles for k < 2, high for k >= 2)
// and the matching qh word (bits 2k, 2k + 1 of each byte).
__device__ __forceinline__ uint32_t q6_values(uint32_t ql, uint32_t qh, int k) {
  const uint32_t lo = (k < 2 ? ql : ql >> 4) & 0x0F0F0F0Fu;
  const uint32_t hi = k == 0 ? qh << 4 : k == 1 ? qh << 2 : k == 2 ? qh : qh >> 2;
  return lo | (hi & 0x30303030u);
}

__device__ __forceinline__ int signed_byte(uint32_t w, int k) { return int(int8_t(uint8_t(w >> (8 * k)))); }

// imma_q6k_gemm.cu: y = x W^T for the segments' Q6_K weights from the activations `a` (written
// by imma_q6k.cu's quantizer), for calls of more than kImmaGemmMinRows rows.
void imma_q6k_gemm(const Segments& segs, int64_t n_in, const Q6kActs& a, int rows, cudaStream_t s);

}  // namespace df::cuda
