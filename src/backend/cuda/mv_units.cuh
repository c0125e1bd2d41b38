// The weight "units" of the fast matmul kernels (matvec.cu): for each weight type, which bytes of
// a row one lane loads per step (16-, 8- or 4-byte loads at aligned addresses), and how those
// words decode to floats. Host-compilable: tests/test_mv_units.cpp runs this same code on the CPU
// against quant/dequant (bit-exact) without a GPU.
//
// A row of n_in elements is split into units of kElems elements; lane l of a warp takes units l,
// l + 32, l + 64, ... so a warp's loads of one step are neighbouring bytes. A unit's elements are
// kRuns runs of kRun consecutive row elements (run_start), so the matching activations are
// float4 loads. decode(k, q) gives elements 4q..4q+3 of run k exactly as quant/dequant_*.cpp computes them
// (same roundings), so the products differ from the exact one only by the fp32 sum.
//
// Integer-to-float without the (quarter-rate) I2F instruction: a byte b placed under the bits of
// 2^23 (0x4B000000 | b, one PRMT) is the float 2^23 + b exactly; one FADD removes 2^23 (and any
// bias such as Q6_K's 32). For Q4_K/Q5_K the FADD folds into the scale: fma(d1, 2^23 + q,
// -d1 * 2^23) is d1 * q rounded once, which is what the CPU's d1 * float(q) gives.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "quant/types.h"
#include "util/half.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define DF_MV_HD __host__ __device__ __forceinline__
#else
#define DF_MV_HD inline
#endif
#if defined(__CUDA_ARCH__)
#define DF_MV_UNROLL _Pragma("unroll")
#else
#define DF_MV_UNROLL
#endif

namespace df::mv {

// --- portable primitives (device intrinsics; exact host equivalents) ---

DF_MV_HD uint32_t perm(uint32_t a, uint32_t b, uint32_t s) {  // selector nibbles must be < 8
#if defined(__CUDA_ARCH__)
  return __byte_perm(a, b, s);
#else
  const uint64_t v = uint64_t(a) | (uint64_t(b) << 32);
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) r |= uint32_t((v >> (8 * ((s >> (4 * n)) & 7))) & 0xFF) << (8 * n);
  return r;
#endif
}

DF_MV_HD float as_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// Single roundings that the compiler may not fuse (volatile on the host keeps GCC from
// contracting a * b + c into an FMA under -march=native).
DF_MV_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  volatile float r = a + b;
  return r;
#endif
}
DF_MV_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  volatile float r = a - b;
  return r;
#endif
}
DF_MV_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  volatile float r = a * b;
  return r;
#endif
}
DF_MV_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return __builtin_fmaf(a, b, c);
#endif
}

DF_MV_HD float half_bits(uint32_t h) {  // low 16 bits
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h & 0xFFFF)));
#else
  return f16_to_f32(uint16_t(h & 0xFFFF));
#endif
}
DF_MV_HD float bf16_bits(uint32_t h) { return as_float(h << 16); }  // low 16 bits

// Loads at aligned addresses; device: through the read-only data cache.
DF_MV_HD void ld16(const uint8_t* p, uint32_t* w) {
#if defined(__CUDA_ARCH__)
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
  w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
#else
  std::memcpy(w, p, 16);
#endif
}
DF_MV_HD void ld8(const uint8_t* p, uint32_t* w) {
#if defined(__CUDA_ARCH__)
  const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
  w[0] = v.x, w[1] = v.y;
#else
  std::memcpy(w, p, 8);
#endif
}
DF_MV_HD uint32_t ld4(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(reinterpret_cast<const unsigned int*>(p));
#else
  uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
#endif
}
DF_MV_HD uint32_t ld2(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(reinterpret_cast<const unsigned short*>(p));
#else
  uint16_t w;
  std::memcpy(&w, p, 2);
  return w;
#endif
}

constexpr uint32_t kMagicBits = 0x4B000000u;  // the float 2^23
constexpr float kMagic = 8388608.0f;

// Byte m (0..3) of a as the float 2^23 + byte, exactly.
DF_MV_HD float magic_byte(uint32_t a, int m) { return as_float(perm(a, kMagicBits, 0x7440u | uint32_t(m))); }
// A value 0..255 as a float, exactly (for 6-bit scales).
DF_MV_HD float small_uint(uint32_t v) { return sub_rn(as_float(kMagicBits | v), kMagic); }

// --- units ---

template <GgmlType T>
struct Unit;

// Q4_K: 144-byte blocks [d, dmin, scales[12], qs[128]]; unit p (0..7) of a block = qs bytes
// 16p..16p+15: low nibbles are elements 16(p%2).. of chunk 2(p/2), high nibbles the same of
// chunk 2(p/2)+1. Loads: the 16-byte header (shared by the block's 8 lanes: one L1 line) and
// the 16 quant bytes; 32 elements per 16 bytes of quants.
template <>
struct Unit<GgmlType::Q4_K> {
  static constexpr int kElems = 32, kRuns = 2, kRun = 16, kWords = 8;
  static bool supports(int64_t n_in, size_t row_bytes, uintptr_t base) {
    return n_in % 256 == 0 && row_bytes % 16 == 0 && base % 16 == 0;
  }
  DF_MV_HD static void load(const uint8_t* row, unsigned u, uint32_t* w) {
    const uint8_t* b = row + size_t(u / 8) * 144;
    ld16(b, w);
    ld16(b + 16 + 16 * (u % 8), w + 4);
  }
  DF_MV_HD static int64_t run_start(unsigned u, int k) {
    const unsigned p = u % 8;
    return int64_t(u / 8) * 256 + 64 * (p / 2) + 32 * k + 16 * (p % 2);
  }
  struct Pre {
    float d1[2], nd1m[2], m1[2];
  };
  // Scale and min of chunks 2i, 2i+1 (quant/blocks.h k4_scale_min), two at a time: bytes
  // 2(i%2), 2(i%2)+1 of the scale words a = scales[0..3], b = [4..7], c = [8..11].
  DF_MV_HD static void scales(const uint32_t* w, unsigned u, uint32_t& sc, uint32_t& mn) {
    const unsigned i = (u % 8) / 2;
    const unsigned sh = 16 * (i % 2);
    const uint32_t a = (w[1] >> sh) & 0xFFFF, b = (w[2] >> sh) & 0xFFFF, c = (w[3] >> sh) & 0xFFFF;
    if (i < 2) {
      sc = a & 0x3F3F;
      mn = b & 0x3F3F;
    } else {
      sc = (c & 0x0F0F) | ((a >> 2) & 0x3030);
      mn = ((c >> 4) & 0x0F0F) | ((b >> 2) & 0x3030);
    }
  }
  DF_MV_HD static void prepare(const uint32_t* w, unsigned u, Pre& pre) {
    const float d = half_bits(w[0]), dmin = half_bits(w[0] >> 16);
    uint32_t sc, mn;
    scales(w, u, sc, mn);
DF_MV_UNROLL
    for (int t = 0; t < 2; ++t) {
      pre.d1[t] = mul_rn(d, small_uint((sc >> (8 * t)) & 0xFF));
      pre.m1[t] = mul_rn(dmin, small_uint((mn >> (8 * t)) & 0xFF));
      pre.nd1m[t] = mul_rn(pre.d1[t], -kMagic);  // exact (a power of two)
    }
  }
  DF_MV_HD static void decode(const uint32_t* w, const Pre& pre, unsigned, int k, int q, float* v) {
    const uint32_t nib = k == 0 ? (w[4 + q] & 0x0F0F0F0Fu) : ((w[4 + q] >> 4) & 0x0F0F0F0Fu);
DF_MV_UNROLL
    for (int m = 0; m < 4; ++m) v[m] = sub_rn(fma_rn(pre.d1[k], magic_byte(nib, m), pre.nd1m[k]), pre.m1[k]);
  }
};

// Q5_K: 176-byte blocks [d, dmin, scales[12], qh[32], qs[128]]; units as Q4_K, plus the 16 qh
// bytes of the unit's half (bit j of qh[l] is the fifth bit of element l of chunk j).
template <>
struct Unit<GgmlType::Q5_K> {
  static constexpr int kElems = 32, kRuns = 2, kRun = 16, kWords = 12;
  static bool supports(int64_t n_in, size_t row_bytes, uintptr_t base) {
    return n_in % 256 == 0 && row_bytes % 16 == 0 && base % 16 == 0;
  }
  DF_MV_HD static void load(const uint8_t* row, unsigned u, uint32_t* w) {
    const uint8_t* b = row + size_t(u / 8) * 176;
    const unsigned p = u % 8;
    ld16(b, w);
    ld16(b + 16 + 16 * (p % 2), w + 4);
    ld16(b + 48 + 16 * p, w + 8);
  }
  DF_MV_HD static int64_t run_start(unsigned u, int k) { return Unit<GgmlType::Q4_K>::run_start(u, k); }
  using Pre = Unit<GgmlType::Q4_K>::Pre;
  DF_MV_HD static void prepare(const uint32_t* w, unsigned u, Pre& pre) { Unit<GgmlType::Q4_K>::prepare(w, u, pre); }
  DF_MV_HD static void decode(const uint32_t* w, const Pre& pre, unsigned u, int k, int q, float* v) {
    const unsigned j = 2 * ((u % 8) / 2) + unsigned(k);  // chunk
    uint32_t x = k == 0 ? (w[8 + q] & 0x0F0F0F0Fu) : ((w[8 + q] >> 4) & 0x0F0F0F0Fu);
    x |= ((w[4 + q] >> j) & 0x01010101u) << 4;
DF_MV_UNROLL
    for (int m = 0; m < 4; ++m) v[m] = sub_rn(fma_rn(pre.d1[k], magic_byte(x, m), pre.nd1m[k]), pre.m1[k]);
  }
};

// Q6_K: 210-byte blocks [ql[128], qh[64], scales[16] (int8), d]. Unit = 16 positions l of one
// 128-element half hh: elements l, l+32, l+64, l+96 of the half (runs k = 0..3) from ql bytes
// l and 32+l (low nibbles, then high), qh byte l (bits 2k, 2k+1) and scale 2k + l/16. Blocks are
// 2-byte aligned (rows 4-aligned, 210 = 2 mod 4): each field is loaded as aligned 4-byte words,
// one more when the block sits at 2 mod 4, and shifted back with PRMT (no divergence: the
// offset is a selector, not a branch).
template <>
struct Unit<GgmlType::Q6_K> {
  static constexpr int kElems = 64, kRuns = 4, kRun = 16, kWords = 15;
  static bool supports(int64_t n_in, size_t row_bytes, uintptr_t base) {
    return n_in % 512 == 0 && row_bytes % 4 == 0 && base % 4 == 0;
  }
  // n words of block bytes [off, off + 4n) from a block whose aligned base is al = blk - a.
  template <int N>
  DF_MV_HD static void field(const uint8_t* al, unsigned off, unsigned a, uint32_t* out) {
    uint32_t t[N + 1];
DF_MV_UNROLL
    for (int k = 0; k < N; ++k) t[k] = ld4(al + off + 4 * k);
    t[N] = a != 0 ? ld4(al + off + 4 * N) : 0u;  // only then inside the field's block
    const uint32_t sel = a != 0 ? 0x5432u : 0x3210u;
DF_MV_UNROLL
    for (int k = 0; k < N; ++k) out[k] = perm(t[k], t[k + 1], sel);
  }
  DF_MV_HD static void load(const uint8_t* row, unsigned u, uint32_t* w) {
    const uint8_t* blk = row + size_t(u / 4) * 210;
    const unsigned hh = (u % 4) / 2, m = u % 2;
    const unsigned a = unsigned(reinterpret_cast<uintptr_t>(blk) & 3);  // 0 or 2
    const uint8_t* al = blk - a;
    field<4>(al, 64 * hh + 16 * m, a, w);            // ql[l]
    field<4>(al, 64 * hh + 32 + 16 * m, a, w + 4);   // ql[32 + l]
    field<4>(al, 128 + 32 * hh + 16 * m, a, w + 8);  // qh[l]
    field<2>(al, 192 + 8 * hh, a, w + 12);           // scales[8hh .. 8hh+8)
    w[14] = ld2(blk + 208);                          // d
  }
  DF_MV_HD static int64_t run_start(unsigned u, int k) {
    return int64_t(u / 4) * 256 + 128 * ((u % 4) / 2) + 32 * k + 16 * (u % 2);
  }
  struct Pre {
    float dsc[4];
  };
  DF_MV_HD static void prepare(const uint32_t* w, unsigned u, Pre& pre) {
    const float d = half_bits(w[14]);
    const unsigned m = u % 2;
DF_MV_UNROLL
    for (int k = 0; k < 4; ++k) {  // scale byte m + 2k of the 8 loaded
      const int sc = int(int8_t((w[12 + k / 2] >> (16 * (k % 2) + 8 * m)) & 0xFF));
      pre.dsc[k] = mul_rn(d, float(sc));
    }
  }
  DF_MV_HD static void decode(const uint32_t* w, const Pre& pre, unsigned, int k, int q, float* v) {
    const uint32_t ql = w[(k % 2) * 4 + q], qh = w[8 + q];
    uint32_t x;
    if (k == 0) x = (ql & 0x0F0F0F0Fu) | ((qh << 4) & 0x30303030u);
    else if (k == 1) x = (ql & 0x0F0F0F0Fu) | ((qh << 2) & 0x30303030u);
    else if (k == 2) x = ((ql >> 4) & 0x0F0F0F0Fu) | (qh & 0x30303030u);
    else x = ((ql >> 4) & 0x0F0F0F0Fu) | ((qh >> 2) & 0x30303030u);
DF_MV_UNROLL
    for (int m = 0; m < 4; ++m) v[m] = mul_rn(pre.dsc[k], sub_rn(magic_byte(x, m), kMagic + 32.0f));
  }
};

// Q8_0: 34-byte blocks [d, qs[32] (int8)]; unit = 2 blocks = 68 bytes = 17 aligned words
// (rows 4-aligned). Block A's quants start 2 bytes into the words (PRMT realigns), block B's
// are aligned.
template <>
struct Unit<GgmlType::Q8_0> {
  static constexpr int kElems = 64, kRuns = 4, kRun = 16, kWords = 17;
  static bool supports(int64_t n_in, size_t row_bytes, uintptr_t base) {
    return n_in % 64 == 0 && row_bytes % 4 == 0 && base % 4 == 0;
  }
  DF_MV_HD static void load(const uint8_t* row, unsigned u, uint32_t* w) {
    const uint8_t* p = row + size_t(u) * 68;
DF_MV_UNROLL
    for (int k = 0; k < 17; ++k) w[k] = ld4(p + 4 * k);
  }
  DF_MV_HD static int64_t run_start(unsigned u, int k) { return int64_t(u) * 64 + 16 * k; }
  struct Pre {
    float d[2];
  };
  DF_MV_HD static void prepare(const uint32_t* w, unsigned, Pre& pre) {
    pre.d[0] = half_bits(w[0]);
    pre.d[1] = half_bits(w[8] >> 16);
  }
  DF_MV_HD static void decode(const uint32_t* w, const Pre& pre, unsigned, int k, int q, float* v) {
    const int i = 4 * (k % 2) + q;  // quant word of the block
    const uint32_t qs = k < 2 ? perm(w[i], w[i + 1], 0x5432u) : w[9 + i];
    const uint32_t biased = qs ^ 0x80808080u;  // int8 + 128
DF_MV_UNROLL
    for (int m = 0; m < 4; ++m) v[m] = mul_rn(sub_rn(magic_byte(biased, m), kMagic + 128.0f), pre.d[k / 2]);
  }
};

// Q4_0: 18-byte blocks [d, qs[16]]; unit = 2 blocks = 36 bytes = 9 aligned words; run k: block
// k/2, low (k even) or high nibbles.
template <>
struct Unit<GgmlType::Q4_0> {
  static constexpr int kElems = 64, kRuns = 4, kRun = 16, kWords = 9;
  static bool supports(int64_t n_in, size_t row_bytes, uintptr_t base) {
    return n_in % 64 == 0 && row_bytes % 4 == 0 && base % 4 == 0;
  }
  DF_MV_HD static void load(const uint8_t* row, unsigned u, uint32_t* w) {
    const uint8_t* p = row + size_t(u) * 36;
DF_MV_UNROLL
    for (int k = 0; k < 9; ++k) w[k] = ld4(p + 4 * k);
  }
  DF_MV_HD static int64_t run_start(unsigned u, int k) { return int64_t(u) * 64 + 16 * k; }
  struct Pre {
    float d[2];
  };
  DF_MV_HD static void prepare(const uint32_t* w, unsigned, Pre& pre) {
    pre.d[0] = half_bits(w[0]);
    pre.d[1] = half_bits(w[4] >> 16);
  }
  DF_MV_HD static void decode(const uint32_t* w, const Pre& pre, unsigned, int k, int q, float* v) {
    const uint32_t qs = k < 2 ? perm(w[q], w[q + 1], 0x5432u) : w[5 + q];
    const uint32_t nib = k % 2 == 0 ? (qs & 0x0F0F0F0Fu) : ((qs >> 4) & 0x0F0F0F0Fu);
DF_MV_UNROLL
    for (int m = 0; m < 4; ++m) v[m] = mul_rn(sub_rn(magic_byte(nib, m), kMagic + 8.0f), pre.d[k / 2]);
  }
};

// IQ4_XS: 136-byte blocks [d, scales_h, scales_l[4], qs[128]] (8-byte aligned in a row);
// unit = sub-block j (32 elements): 8 header bytes and the 16 quant bytes 16j.. (8-byte loads).
// The non-linear code book is looked up four entries at a time with PRMT from its 16 values
// (+128, so bytes) held in four words.
template <>
struct Unit<GgmlType::IQ4_XS> {
  static constexpr int kElems = 32, kRuns = 2, kRun = 16, kWords = 6;
  static bool supports(int64_t n_in, size_t row_bytes, uintptr_t base) {
    return n_in % 256 == 0 && row_bytes % 8 == 0 && base % 8 == 0;
  }
  // The code book {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
  // (quant/blocks.h kIQ4Values) + 128, four bytes a word (checked by tests/test_mv_units.cpp).
  static constexpr uint32_t kTable[4] = {0x3F2D1801u, 0x766A5D4Fu, 0xA6998D81u, 0xF1D9C5B5u};
  DF_MV_HD static void load(const uint8_t* row, unsigned u, uint32_t* w) {
    const uint8_t* b = row + size_t(u / 8) * 136;
    const unsigned j = u % 8;
    ld8(b, w);
    ld8(b + 8 + 16 * j, w + 2);
    ld8(b + 16 + 16 * j, w + 4);
  }
  DF_MV_HD static int64_t run_start(unsigned u, int k) { return int64_t(u / 8) * 256 + 32 * (u % 8) + 16 * k; }
  struct Pre {
    float dl;
  };
  DF_MV_HD static void prepare(const uint32_t* w, unsigned u, Pre& pre) {
    const unsigned j = u % 8;
    const float d = half_bits(w[0]);
    const uint32_t scales_h = w[0] >> 16;
    const uint32_t lo = (w[1] >> (8 * (j / 2) + 4 * (j % 2))) & 15;
    const int ls = int(lo | (((scales_h >> (2 * j)) & 3) << 4));
    pre.dl = mul_rn(d, float(ls - 32));
  }
  // Four code-book entries (+128) for the four index bytes (0..15) of idx.
  DF_MV_HD static uint32_t lookup4(uint32_t idx) {
    const uint32_t c = idx | (idx >> 4);  // byte 0: i0 | i1 << 4, byte 2: i2 | i3 << 4
    const uint32_t sel = perm(c, 0, 0x4420u);  // nibbles i0 i1 i2 i3
    const uint32_t lo3 = sel & 0x7777u;
    const uint32_t from_lo = perm(0x3F2D1801u, 0x766A5D4Fu, lo3), from_hi = perm(0xA6998D81u, 0xF1D9C5B5u, lo3);
    return perm(from_lo, from_hi, ((sel >> 1) & 0x4444u) | 0x3210u);  // byte n from hi when i_n >= 8
  }
  DF_MV_HD static void decode(const uint32_t* w, const Pre& pre, unsigned, int k, int q, float* v) {
    const uint32_t idx = k == 0 ? (w[2 + q] & 0x0F0F0F0Fu) : ((w[2 + q] >> 4) & 0x0F0F0F0Fu);
    const uint32_t vals = lookup4(idx);
DF_MV_UNROLL
    for (int m = 0; m < 4; ++m) v[m] = mul_rn(pre.dl, sub_rn(magic_byte(vals, m), kMagic + 128.0f));
  }
};

// Float formats: a unit is 4 words of 16 bytes spread over a 32-lane segment (word k of unit u
// is the segment's word 32k + u % 32), so each load instruction of a warp reads 512 contiguous
// bytes. F16/BF16: 8 elements a word (segment 1024 elements); F32: 4 (segment 512).
template <GgmlType T>
struct FloatUnit {
  static constexpr int kPerWord = T == GgmlType::F32 ? 4 : 8;
  static constexpr int kElems = 4 * kPerWord, kRuns = 4, kRun = kPerWord, kWords = 16;
  static bool supports(int64_t n_in, size_t row_bytes, uintptr_t base) {
    return n_in % (32 * kElems) == 0 && row_bytes % 16 == 0 && base % 16 == 0;
  }
  DF_MV_HD static int64_t word_index(unsigned u, int k) { return int64_t(u / 32) * 128 + 32 * k + u % 32; }
  DF_MV_HD static void load(const uint8_t* row, unsigned u, uint32_t* w) {
DF_MV_UNROLL
    for (int k = 0; k < 4; ++k) ld16(row + 16 * word_index(u, k), w + 4 * k);
  }
  DF_MV_HD static int64_t run_start(unsigned u, int k) { return word_index(u, k) * kPerWord; }
  struct Pre {};
  DF_MV_HD static void prepare(const uint32_t*, unsigned, Pre&) {}
  DF_MV_HD static void decode(const uint32_t* w, const Pre&, unsigned, int k, int q, float* v) {
    if constexpr (T == GgmlType::F32) {
DF_MV_UNROLL
      for (int i = 0; i < 4; ++i) v[i] = as_float(w[4 * k + i]);
    } else {
DF_MV_UNROLL
      for (int i = 0; i < 2; ++i) {
        const uint32_t x = w[4 * k + 2 * q + i];
        if constexpr (T == GgmlType::F16) {
          v[2 * i] = half_bits(x);
          v[2 * i + 1] = half_bits(x >> 16);
        } else {
          v[2 * i] = bf16_bits(x & 0xFFFF);
          v[2 * i + 1] = as_float(x & 0xFFFF0000u);
        }
      }
    }
  }
};
template <>
struct Unit<GgmlType::F32> : FloatUnit<GgmlType::F32> {};
template <>
struct Unit<GgmlType::F16> : FloatUnit<GgmlType::F16> {};
template <>
struct Unit<GgmlType::BF16> : FloatUnit<GgmlType::BF16> {};

// The types with a unit, as a compile-time dispatch (f(std::integral_constant<GgmlType, T>)).
template <class F>
bool dispatch_unit_type(GgmlType t, F&& f) {
  switch (t) {
    case GgmlType::Q4_K: f(std::integral_constant<GgmlType, GgmlType::Q4_K>{}); return true;
    case GgmlType::Q5_K: f(std::integral_constant<GgmlType, GgmlType::Q5_K>{}); return true;
    case GgmlType::Q6_K: f(std::integral_constant<GgmlType, GgmlType::Q6_K>{}); return true;
    case GgmlType::Q8_0: f(std::integral_constant<GgmlType, GgmlType::Q8_0>{}); return true;
    case GgmlType::Q4_0: f(std::integral_constant<GgmlType, GgmlType::Q4_0>{}); return true;
    case GgmlType::IQ4_XS: f(std::integral_constant<GgmlType, GgmlType::IQ4_XS>{}); return true;
    case GgmlType::F32: f(std::integral_constant<GgmlType, GgmlType::F32>{}); return true;
    case GgmlType::F16: f(std::integral_constant<GgmlType, GgmlType::F16>{}); return true;
    case GgmlType::BF16: f(std::integral_constant<GgmlType, GgmlType::BF16>{}); return true;
    default: return false;
  }
}

// Whether the fast kernels take this weight (type with a unit, shape and alignment).
inline bool unit_supports(GgmlType t, int64_t n_in, size_t row_bytes, const void* data) {
  bool ok = false;
  dispatch_unit_type(t, [&](auto tag) {
    ok = Unit<decltype(tag)::value>::supports(n_in, row_bytes, reinterpret_cast<uintptr_t>(data));
  });
  return ok && n_in > 0;
}

// The types the tensor-core matmul (mma_matmul.cu) takes; F32 and BF16 stay on the fp32 kernels.
inline bool tensor_core_type(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::IQ4_XS:
    case GgmlType::F16:
      return true;
    default:
      return false;
  }
}

// Whether the tensor-core matmul takes this weight: its type, 32-bit element offsets inside the
// kernel, n_in % 4 for the f16 activation rows, and the unit's shape/alignment conditions.
// (Host-compilable, so the tests mirror exactly the weights whose products round to f16.)
inline bool tensor_core_supports(GgmlType t, int64_t n_in, size_t row_bytes, const void* data) {
  return tensor_core_type(t) && n_in > 0 && n_in % 4 == 0 && n_in <= (int64_t(1) << 24) &&
         unit_supports(t, n_in, row_bytes, data);
}

// The types the integer tensor-core matmuls take, ahead of the f16 one: Q4_K and Q5_K
// (imma_matmul.cu), Q6_K (imma_q6k.cu) and IQ4_XS (imma_iq4xs.cu), multiplied with activations in
// the CPU's Q8_K format (whole 256-element super-blocks). Q5_K and IQ4_XS only in their tile
// layouts (quant/q5k_tiles.h, quant/iq4xs_tiles.h).
inline bool int8_tensor_core_type(GgmlType t) {
  return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K || t == GgmlType::IQ4_XS;
}

// Q4_K: 16-byte loads of 144-byte blocks. Q5_K: its tile layout only (quant/q5k_tiles.h, which
// CudaBackend::upload_matrix makes of 176-byte blocks; imma_supports checks the layout). Q6_K:
// 4-byte loads of 210-byte blocks, which needs rows that start 4-byte aligned, so an even number
// of blocks a row (the odd blocks then start at 2 mod 4, which the kernel's lanes and the
// activation layout follow).
inline bool int8_tensor_core_supports(GgmlType t, int64_t n_in, size_t row_bytes, const void* data) {
  if (n_in <= 0 || n_in > (int64_t(1) << 24)) return false;
  const uintptr_t base = reinterpret_cast<uintptr_t>(data);
  switch (t) {
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: return n_in % 256 == 0 && row_bytes % 16 == 0 && base % 16 == 0;
    case GgmlType::Q6_K: return n_in % 512 == 0 && row_bytes % 4 == 0 && base % 4 == 0;
    // IQ4_XS: tiles (repacked at upload, so any row size), read with 16-byte loads. Whether the
    // weight is in that layout is the caller's part (imma_supports).
    case GgmlType::IQ4_XS: return n_in % 256 == 0 && base % 16 == 0;
    default: return false;
  }
}

inline int64_t unit_count(GgmlType t, int64_t n_in) {
  int64_t n = 0;
  dispatch_unit_type(t, [&](auto tag) { n = n_in / Unit<decltype(tag)::value>::kElems; });
  return n;
}

}  // namespace df::mv
