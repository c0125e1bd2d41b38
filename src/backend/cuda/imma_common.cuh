// What the integer tensor-core kernels share: for Q4_K and Q5_K (the latter as tiles only),
// imma_matmul.cu (every row count, the decode path) and imma_gemm.cu (the tiled prefill path for
// many rows); for Q6_K, imma_q6k.cu and imma_q6k_gemm.cu (imma_q6k.cuh).
// All read the CPU's Q8_K activations (q8k_quantize_lane; Q4_K: quantize_q8k_k, q8k_layout),
// plan launches the same way (Segments, for_each_launch) and split each row's super-blocks into
// the same slots (slots_of), so a row's result is the same bits whichever kernel computes it
// (see imma_matmul.cu's header comment).
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "quant/iq4xs_tiles.h"
#include "quant/q4k_tiles.h"
#include "quant/q5k_tiles.h"
#include "quant/q6k_tiles.h"
#include "quant/q80_tiles.h"

namespace df::cuda {

constexpr int kSb = 256;          // elements per super-block (Q4_K, Q6_K and Q8_K)
constexpr int kQ4kBytes = 144;    // bytes per Q4_K super-block: d, dmin, 12 scale bytes, 128 quant bytes
constexpr int kMaxSlots = 32;     // partial sums per output kept for the in-order final sum

struct Slots {
  int count, per_slot;
};

// Up to kMaxSegments weights with the same input in one launch (the projections a layer
// applies to one activation: q/k/v, qkv/z/alpha/beta, gate/up): blocks first_block[i] ..
// first_block[i + 1] - 1 compute segment i. Each output row is computed as it would be alone.
constexpr int kMaxSegments = 4;
struct Segments {
  const uint8_t* w[kMaxSegments];
  size_t row_bytes[kMaxSegments];
  int64_t n_out[kMaxSegments];  // outputs of the segment (a slice of its weight's rows)
  float* y[kMaxSegments];       // output of the segment's first row, for activation row 0
  int64_t y_stride[kMaxSegments];
  int first_block[kMaxSegments + 1];
  int n;
  bool q4k_tiles;  // the weights are in the tile layout (quant/q4k_tiles.h): w[k] is a tile
  bool q5k_tiles;  // Q5_K weights in theirs (quant/q5k_tiles.h): w[k] is a tile
  bool q6k_tiles;  // Q6_K weights in theirs (quant/q6k_tiles.h): w[k] is a tile
                   // (IQ4_XS and Q8_0 weights are always tiles: their kernels read no other layout)
};

// What block blockIdx.y of a launch computes: its segment's weight and output, and the first
// output of the block (blocks of out_per_block outputs, first_block[i] <= y < first_block[i+1]).
struct BlockSegment {
  const uint8_t* w;
  size_t row_bytes;
  int64_t n_out;
  float* y;
  int64_t y_stride;
  int64_t o0;
};
// block: the block's index among first_block's (blockIdx.y, or a share of a block that
// computes several, as the decode kernels' m-tile groups do).
__device__ __forceinline__ BlockSegment block_segment(const Segments& segs, int out_per_block, int block) {
  int seg = 0;
#pragma unroll
  for (int i = 1; i < kMaxSegments; ++i)
    if (i < segs.n && block >= segs.first_block[i]) seg = i;
  return {segs.w[seg], segs.row_bytes[seg], segs.n_out[seg], segs.y[seg], segs.y_stride[seg],
          int64_t(block - segs.first_block[seg]) * out_per_block};
}
__device__ __forceinline__ BlockSegment block_segment(const Segments& segs, int out_per_block) {
  return block_segment(segs, out_per_block, int(blockIdx.y));
}

// Where the quantized activations live inside the scratch buffer. q, d and m are Q4_K's format
// (imma_matmul.cu's header comment); Q6_K's (imma_q6k.cu) uses q and d, with its values in
// another order, and s for its per-16 sums. Room for both, so the scratch size does not depend
// on the weight type.
struct Q8kLayout {
  size_t q, d, m, s, bytes;  // byte offsets of the int8 values, the scales, the packed sums, the per-16 sums; total
};

inline Q8kLayout q8k_layout(int64_t n_in, int rows_pad) {
  const size_t n_sb = size_t(n_in / kSb);
  auto align = [](size_t v) { return (v + 255) / 256 * 256; };
  Q8kLayout l{};
  l.q = 0;
  l.d = align(size_t(rows_pad) * size_t(n_in));
  l.m = align(l.d + n_sb * size_t(rows_pad) * sizeof(float));
  l.s = align(l.m + 2 * n_sb * size_t(rows_pad) * sizeof(uint2));
  l.bytes = align(l.s + 4 * n_sb * size_t(rows_pad) * sizeof(uint2));
  return l;
}

// The activations a producer kernel quantizes besides its float output (q8k_fused.cuh), for
// imma_matmul_group's `quantized`: Q4_K's layout, then Q6_K's at this offset, each q8k_layout.
inline size_t q8k_fused_q6k_offset(int64_t n_in, int rows_pad) { return q8k_layout(n_in, rows_pad).bytes; }

// One warp per (super-block b, row r) quantizes x[r][256b .. 256b + 255] to Q8_K as the CPU
// does (quantize_q8_k): the first element of largest magnitude sets iscale = -127 / max; q =
// round-to-even(fma(x, iscale, 1.5 * 2^23)) capped at 127; d = 1 / iscale. Rows past `rows`
// (padding up to rows_pad) and all-zero blocks are zeros with d = 0. This lane's eight values
// v (elements 8 lane .. 8 lane + 7 of the block) go to q; returns d. Each format's store
// (q8k_store_q4k below, imma_q6k.cuh's q8k_store_q6k) writes them its own way.
__device__ __forceinline__ float q8k_quantize_values(const float (&v)[8], int (&q)[8]) {
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(v[j]));
  amax = warp_max(amax);
#pragma unroll
  for (int j = 0; j < 8; ++j) q[j] = 0;
  float d = 0.0f;
  if (amax > 0.0f) {
    // The signed value of the first element (in row order) whose magnitude is amax.
    float mine = 0.0f;
    bool found = false;
#pragma unroll
    for (int j = 0; j < 8; ++j)
      if (!found && fabsf(v[j]) == amax) mine = v[j], found = true;
    const int src = __ffs(__ballot_sync(0xffffffffu, found)) - 1;
    const float max = __shfl_sync(0xffffffffu, mine, src);
    const float iscale = -127.f / max;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int bits = __float_as_int(__fmaf_rn(v[j], iscale, 12582912.f));
      q[j] = min((bits & 0x007fffff) - 0x00400000, 127);
    }
    d = 1.0f / iscale;
  }
  return d;
}

// q8k_quantize_values of row r of x (rows of n_in floats; zeros for r >= rows).
__device__ __forceinline__ float q8k_quantize_lane(const float* __restrict__ x, int rows, int n_in, int b, int r,
                                                   int lane, int (&q)[8]) {
  const int64_t e = int64_t(b) * kSb + 8 * lane;
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = 0.0f;
  if (r < rows) {
    const float4 a = *reinterpret_cast<const float4*>(x + int64_t(r) * n_in + e);
    const float4 c = *reinterpret_cast<const float4*>(x + int64_t(r) * n_in + e + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = c.x, v[5] = c.y, v[6] = c.z, v[7] = c.w;
  }
  return q8k_quantize_values(v, q);
}

// The eight values of q8k_quantize_lane as two words, element order = byte order.
__device__ __forceinline__ uint2 q8k_pack(const int (&q)[8]) {
  uint2 packed;
  packed.x = uint32_t(q[0] & 0xFF) | uint32_t(q[1] & 0xFF) << 8 | uint32_t(q[2] & 0xFF) << 16 | uint32_t(q[3]) << 24;
  packed.y = uint32_t(q[4] & 0xFF) | uint32_t(q[5] & 0xFF) << 8 | uint32_t(q[6] & 0xFF) << 16 | uint32_t(q[7]) << 24;
  return packed;
}

// Four small integer sums (|sum| < 2^15) as two dp4a operands: byte i of .x is the unsigned low
// byte of sums[i], byte i of .y its signed high byte, so sum = 256 * high + low.
__device__ __forceinline__ uint2 sum_byte_planes(const int (&sums)[4]) {
  uint32_t lo = 0, hi = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    lo |= uint32_t(sums[i] & 0xFF) << (8 * i);
    hi |= uint32_t((sums[i] >> 8) & 0xFF) << (8 * i);
  }
  return make_uint2(lo, hi);
}

// Q8_K in Q4_K's format for one (super-block b, row r), all 32 lanes of a warp with their
// q8k_quantize_values results: the values row-major, and each half super-block's four sub-block
// sums as byte planes. Shared by quantize_q8k_k and the norm kernels that quantize their output
// (norm_rope.cu), so both write the same bytes.
__device__ __forceinline__ void q8k_store_q4k(const int (&q)[8], float d, int b, int r, int rows_pad, int n_in,
                                              int lane, int8_t* __restrict__ xq, float* __restrict__ xd,
                                              uint2* __restrict__ xm) {
  const int64_t e = int64_t(b) * kSb + 8 * lane;
  const uint2 packed = q8k_pack(q);
  *reinterpret_cast<uint2*>(xq + int64_t(r) * n_in + e) = packed;
  // Sub-block sums (4 lanes a sub-block), then each half super-block's four as byte planes.
  int s = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) s += q[j];
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  s += __shfl_xor_sync(0xffffffffu, s, 2);
  const int base = lane & 16;
  int c[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) c[j] = __shfl_sync(0xffffffffu, s, base + 4 * j);
  if ((lane & 15) == 0) xm[(size_t(b) * 2 + lane / 16) * rows_pad + r] = sum_byte_planes(c);
  if (lane == 0) xd[size_t(b) * rows_pad + r] = d;
}

// Each file that includes this header gets its own copy (imma_matmul.cu and imma_gemm.cu launch it).
namespace {

// Q8_K in Q4_K's format (q8k_store_q4k), one warp per (super-block b, row r).
__global__ void __launch_bounds__(kWarp)
    quantize_q8k_k(const float* __restrict__ x, int rows, int rows_pad, int n_in, int8_t* __restrict__ xq,
                   float* __restrict__ xd, uint2* __restrict__ xm) {
  pdl_wait();
  pdl_trigger();
  const int b = blockIdx.x, r = blockIdx.y, lane = threadIdx.x;
  int q[8];
  const float d = q8k_quantize_lane(x, rows, n_in, b, r, lane, q);
  q8k_store_q4k(q, d, b, r, rows_pad, n_in, lane, xq, xd, xm);
}

}  // namespace

// Shared by the decode kernels (imma_matmul.cu, imma_q6k.cu): v, with its value hidden from the
// optimizer, which otherwise rebuilds addresses and lane
// constants from their parts inside the loop (64-bit multiplies and adds for every load) or
// folds offsets into other ones: an address made opaque is one register that loads add
// immediate offsets to.
template <class T>
__device__ __forceinline__ T* opaque(T* p) {
  asm("" : "+l"(p));
  return p;
}
__device__ __forceinline__ uint32_t opaque(uint32_t v) {
  asm("" : "+r"(v));
  return v;
}
// The address base + a * b bytes in one wide multiply-add (IMAD.WIDE.U32), opaque as above.
template <class T>
__device__ __forceinline__ T* wide_madd(T* base, uint32_t a, uint32_t b) {
  T* r;
  asm("mad.wide.u32 %0, %1, %2, %3;" : "=l"(r) : "r"(a), "r"(b), "l"(base));
  return r;
}

// d = a * b for one m16n8k32 tile: a holds unsigned bytes, b signed bytes, d starts at zero.
__device__ __forceinline__ void imma_16832(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  d[0] = d[1] = d[2] = d[3] = 0;
  asm(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d += a * b for one m16n8k16 tile of 8-bit operands (lane (g, c): a0, a1 = rows g, g + 8 and
// b = column g, each at k = 4c..4c+3), signed or unsigned as the flags say.
template <bool kAUnsigned, bool kBUnsigned>
__device__ __forceinline__ void imma_16816(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b) {
  if constexpr (kAUnsigned && !kBUnsigned) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(b));
  } else if constexpr (!kAUnsigned && kBUnsigned) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.u8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(b));
  } else {
    static_assert(!kAUnsigned && !kBUnsigned, "u8 x u8 is not used");
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(b));
  }
}

// d = a * b + c for one m16n8k16 tile (k 0..15; a unsigned bytes, b unsigned / signed bytes).
__device__ __forceinline__ void imma_16816_uu(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b, int c) {
  asm("mma.sync.aligned.m16n8k16.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(b), "r"(c));
}
__device__ __forceinline__ void imma_16816_us(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b, int c) {
  asm("mma.sync.aligned.m16n8k16.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(b), "r"(c));
}

// Q4_K's msum (sum_j min_j xsum_j) as two m16n8k16 products of the mins and the low / high byte
// planes of the sub-block sums: the low one starts from kMsumMagic, the bits of 1.5 * 2^23, so
// lo + 256 hi is the bit pattern of the float 1.5 * 2^23 + msum and one subtraction gives
// float(msum) exactly (|msum| < 2^22), without the slower integer-to-float conversion.
constexpr int kMsumMagic = 0x4B400000;
__device__ __forceinline__ float msum_float(int lo, int hi) {
  return __fsub_rn(__int_as_float(lo + 256 * hi), 12582912.0f);
}

__device__ __forceinline__ int byte_of(uint32_t w, int k) { return int((w >> (8 * k)) & 0xFF); }

// A Q4_K super-block's scales from its first header word: d (low half) and dmin (high half).
__device__ __forceinline__ void q4k_d_dmin(uint32_t w0, float& d, float& dmin) {
  d = __half2float(__ushort_as_half(static_cast<unsigned short>(w0 & 0xFFFF)));
  dmin = __half2float(__ushort_as_half(static_cast<unsigned short>(w0 >> 16)));
}

// The float part of one super-block for one (activation row, output), as the CPU's k4_block:
// (dx * (d / kMul)) * isum - (dx * dmin) * msum, with isum = kMul sum_j sc_j dot_j (kMul: 16 for
// Q4_K, whose high nibbles enter as 16 q; 8 for Q5_K, whose high values enter as 8 q) and msum =
// sum_j min_j xsum_j (both exact integers; |msum| < 2^22, so float(msum) is exact). Explicit
// round-to-nearest intrinsics, so no kernel lets the compiler contract it differently: the
// decode (imma_matmul.cu) and prefill (imma_gemm.cu) kernels must agree bit for bit.
template <int kMul = 16>
__device__ __forceinline__ float q4k_sb_term(float dx, float d, float dmin, int isum, float msum) {
  const float a = __fmul_rn(__fmul_rn(dx, __fmul_rn(d, 1.0f / kMul)), __int2float_rn(isum));
  return __fmaf_rn(-__fmul_rn(dx, dmin), msum, a);
}

// The decode kernels' last step (one m-tile a block, NT n-tiles): the slots' partial sums,
// part_smem[(slot * kRegs + reg) * 32 + lane] (a lane's mma register reg = 4 nt + j: output
// o0 + lane / 4 + 8 (j / 2), activation row r0 + 8 nt + 2 (lane % 4) + j % 2), summed in slot
// order into y; thread t of the block finishes elements t, t + blockDim.x, ...
template <int kRegs>
__device__ __forceinline__ void store_slot_sums(const float* part_smem, int n_slots, int64_t o0, int64_t n_out,
                                                float* y, int64_t y_stride, int r0, int nt_live, int rows) {
  for (int i = int(threadIdx.x); i < kRegs * kWarp; i += blockDim.x) {
    const int reg = i / kWarp, l = i % kWarp;
    const int nt = reg / 4, k = reg % 4;
    const int64_t o = o0 + l / 4 + 8 * (k / 2);
    const int r = r0 + nt * 8 + 2 * (l % 4) + (k % 2);
    if (nt >= nt_live || o >= n_out || r >= rows) continue;
    float sum = part_smem[reg * kWarp + l];
    for (int s = 1; s < n_slots; ++s) sum = __fadd_rn(sum, part_smem[(s * kRegs + reg) * kWarp + l]);
    y[int64_t(r) * y_stride + o] = sum;
  }
}

// The super-blocks of a row in `count` slots of `per_slot` consecutive ones (the last may be
// short): a slot's are summed in order, then the slots in order. A function of n_in alone.
inline Slots slots_of(int n_sb) {
  const int per = (n_sb + kMaxSlots - 1) / kMaxSlots;
  return Slots{(n_sb + per - 1) / per, per};
}

// Calls launch(segments) for weights ws[0..n) (same n_in) into ys: one launch while the
// segments fit a grid's 65535 blocks of 16 outputs, else one per slice (for_output_slices).
// No allocation: this runs for every product of a step. The weights share one layout (GGUF
// rows, or Q4_K, Q5_K, Q6_K, IQ4_XS or Q8_0 tiles; callers group them so).
template <class F>
void for_each_launch(const Weight* const* ws, float* const* ys, int n, F&& launch) {
  Segments cur{};
  cur.q4k_tiles = n > 0 && ws[0]->tiles && ws[0]->type == GgmlType::Q4_K;
  cur.q5k_tiles = n > 0 && ws[0]->tiles && ws[0]->type == GgmlType::Q5_K;
  cur.q6k_tiles = n > 0 && ws[0]->tiles && ws[0]->type == GgmlType::Q6_K;
  for (int i = 0; i < n; ++i) {
    const Weight& w = *ws[i];
    if (w.tiles != ws[0]->tiles || (w.tiles && w.type != ws[0]->type))
      throw std::invalid_argument("imma products of weights in two layouts");
    static_assert(kQ4kTileRows == 16 && kQ6kTileRows == 16 && kQ80TileRows == 16, "slices start on a tile");
    const size_t tile_bytes = w.type == GgmlType::Q4_K   ? kQ4kTileBytes
                              : w.type == GgmlType::Q5_K ? kQ5kTileBytes
                              : w.type == GgmlType::Q6_K ? kQ6kTileBytes
                              : w.type == GgmlType::IQ4_XS ? kIq4xsTileBytes
                                                           : kQ80TileBytes;
    for_output_slices(w.n_out, 16, [&](int64_t o, int64_t cnt, unsigned blocks) {
      if (cur.n == kMaxSegments || int64_t(cur.first_block[cur.n]) + blocks > 65535) {
        launch(cur);
        const bool tiles = cur.q4k_tiles, q5k = cur.q5k_tiles, q6k = cur.q6k_tiles;
        cur = Segments{};
        cur.q4k_tiles = tiles;
        cur.q5k_tiles = q5k;
        cur.q6k_tiles = q6k;
      }
      const int k = cur.n++;
      // A slice starts at output o, a multiple of 16: tile o / 16 of a tiled weight.
      cur.w[k] = static_cast<const uint8_t*>(w.data) +
                 (w.tiles ? size_t(o / 16) * size_t(w.n_in / kSb) * tile_bytes : size_t(o) * w.row_bytes);
      cur.row_bytes[k] = w.row_bytes;
      cur.n_out[k] = cnt;
      cur.y[k] = ys[i] + o;
      cur.y_stride[k] = w.n_out;
      cur.first_block[k + 1] = cur.first_block[k] + int(blocks);
    });
  }
  if (cur.n > 0) launch(cur);
}

// Whether a launch of these segments for `rows` rows takes the GEMM (else the decode kernel; see
// kFewOutputBlocks in kernels.h).
inline bool takes_gemm(const Segments& segs, int rows) {
  return rows > kImmaGemmMinRows && segs.first_block[segs.n] > kFewOutputBlocks;
}

// imma_q6k.cu: imma_matmul_group for Q6_K weights (imma_matmul.cu dispatches to it), every row
// count (above kImmaGemmMinRows through imma_q6k_gemm.cu); a Q6_K row's result does not depend
// on the batch either (the same slots).
void imma_q6k_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                    cudaStream_t s, const void* quantized);

}  // namespace df::cuda
