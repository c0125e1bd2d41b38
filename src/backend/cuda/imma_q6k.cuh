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
// offset) from the super-block's integer dot. kEvenOnly: only off[0] and off[2] are used (one
// activation row), so off[1] and off[3] skip their shifts and come out wrong.
template <bool kEvenOnly = false>
__device__ __forceinline__ void q6k_group_sums(int (&off)[4], uint32_t asc0, uint32_t asc1, uint2 bsum) {
  off[0] = off[1] = off[2] = off[3] = 0;
  imma_16816<false, false>(off, asc0, asc1, bsum.y);
#pragma unroll
  for (int i = 0; i < 4; ++i)
    if (!kEvenOnly || i % 2 == 0) off[i] *= 256;
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

// Q8_K in Q6_K's format (above) for one (super-block b, row r), all 32 lanes of a warp with
// their q8k_quantize_values results. Shared by imma_q6k.cu's quantizer and the norm kernels
// that quantize their output (norm_rope.cu), so both write the same bytes.
__device__ __forceinline__ void q8k_store_q6k(const int (&q)[8], float d, int b, int r, int lane, const Q6kActs& a) {
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
  int8_t* out = a.q + (int64_t(b) * a.rows_pad + r) * kSb + 4 * j;
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
  if (lane < 4) a.s[(size_t(b) * a.rows_pad + r) * 4 + lane] = sum_byte_planes(t);
  if (lane == 0) a.d[size_t(b) * a.rows_pad + r] = d;
}

// The four u8 values (0..63) of chunk k in one ql word (low nibbles for k < 2, high for k >= 2)
// and the matching qh word (bits 2k, 2k + 1 of each byte).
__device__ __forceinline__ uint32_t q6_values(uint32_t ql, uint32_t qh, int k) {
  const uint32_t lo = (k < 2 ? ql : ql >> 4) & 0x0F0F0F0Fu;
  const uint32_t hi = k == 0 ? qh << 4 : k == 1 ? qh << 2 : k == 2 ? qh : qh >> 2;
  return lo | (hi & 0x30303030u);
}

__device__ __forceinline__ int signed_byte(uint32_t w, int k) { return int(int8_t(uint8_t(w >> (8 * k)))); }

// imma_q6k_gemm.cu: y = x W^T for the segments' Q6_K weights (GGUF rows, or tiles where
// segs.q6k_tiles) from the activations `a` (written by imma_q6k.cu's quantizer), for calls of
// more than kImmaGemmMinRows rows.
void imma_q6k_gemm(const Segments& segs, int64_t n_in, const Q6kActs& a, int rows, cudaStream_t s);

// imma_q6k.cu: imma_gemm_quantized's Q6_K case, the GEMM alone (its block shape by the weight's,
// as imma_q6k_gemm picks it) from x quantized into scratch by imma_quantize_q6k.
void imma_q6k_gemm_quantized(const Weight& w, float* y, int rows, const void* scratch, cudaStream_t s);

}  // namespace df::cuda
