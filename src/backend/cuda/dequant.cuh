// Block formats -> float on the device, 32 elements at a time ("chunk" c = elements 32c..32c+31
// of a row). Bit-exact with quant/dequant_*.cpp (ggml's reference): where the CPU rounds a
// product before an add, __fmul_rn/__fadd_rn keep nvcc from fusing them into one FMA.
//
// Bandwidth note: these read the block bytes with plain byte loads (blocks are only 2-byte
// aligned: 18, 22, 110, ... bytes). Correct first; wide loads come with the fast kernels.
#pragma once
#include <cstdint>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "quant/types.h"

namespace df::cuda {

// The IQ4 non-linear code book (quant/blocks.h kIQ4Values).
static __constant__ int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                              1,    13,   25,  38,  53,  69,  89,  113};

__device__ __forceinline__ float ld_half(const uint8_t* p) {
  return half_bits_to_float(*reinterpret_cast<const uint16_t*>(p));  // every f16 field is 2-aligned
}

// Bytes per block and elements per block of the block formats handled here.
template <GgmlType T>
struct BlockInfo;
template <> struct BlockInfo<GgmlType::Q4_0> { static constexpr int bytes = 18, elems = 32; };
template <> struct BlockInfo<GgmlType::Q4_1> { static constexpr int bytes = 20, elems = 32; };
template <> struct BlockInfo<GgmlType::Q5_0> { static constexpr int bytes = 22, elems = 32; };
template <> struct BlockInfo<GgmlType::Q5_1> { static constexpr int bytes = 24, elems = 32; };
template <> struct BlockInfo<GgmlType::Q8_0> { static constexpr int bytes = 34, elems = 32; };
template <> struct BlockInfo<GgmlType::IQ4_NL> { static constexpr int bytes = 18, elems = 32; };
template <> struct BlockInfo<GgmlType::Q2_K> { static constexpr int bytes = 84, elems = 256; };
template <> struct BlockInfo<GgmlType::Q3_K> { static constexpr int bytes = 110, elems = 256; };
template <> struct BlockInfo<GgmlType::Q4_K> { static constexpr int bytes = 144, elems = 256; };
template <> struct BlockInfo<GgmlType::Q5_K> { static constexpr int bytes = 176, elems = 256; };
template <> struct BlockInfo<GgmlType::Q6_K> { static constexpr int bytes = 210, elems = 256; };
template <> struct BlockInfo<GgmlType::IQ4_XS> { static constexpr int bytes = 136, elems = 256; };

// Q4_K / Q5_K packed 6-bit scale and min of sub-block s (quant/blocks.h k4_scale_min).
__device__ __forceinline__ void k4_scale_min(const uint8_t* q, int s, int& sc, int& mn) {
  if (s < 4) {
    sc = q[s] & 63;
    mn = q[s + 4] & 63;
  } else {
    sc = (q[s + 4] & 15) | ((q[s - 4] >> 6) << 4);
    mn = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
  }
}

// Q3_K signed 6-bit scale j (quant/blocks.h q3k_scales).
__device__ __forceinline__ int q3k_scale(const uint8_t* q, int j) {
  const int low = j < 8 ? (q[j] & 15) : (q[j - 8] >> 4);
  const int high = (q[8 + (j % 4)] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// v[0..32) = elements 32c..32c+31 of the row starting at `row`.
template <GgmlType T>
__device__ __forceinline__ void deq32(const uint8_t* row, int64_t c, float* v) {
  using B = BlockInfo<T>;
  constexpr int kChunks = B::elems / 32;
  const uint8_t* b = row + (c / kChunks) * B::bytes;
  const int j = int(c % kChunks);  // chunk inside a 256-element super-block
  if constexpr (T == GgmlType::Q4_0) {
    const float d = ld_half(b);
    const uint8_t* qs = b + 2;
#pragma unroll
    for (int l = 0; l < 16; ++l) {
      v[l] = float((qs[l] & 15) - 8) * d;
      v[l + 16] = float((qs[l] >> 4) - 8) * d;
    }
  } else if constexpr (T == GgmlType::Q4_1) {
    const float d = ld_half(b), m = ld_half(b + 2);
    const uint8_t* qs = b + 4;
#pragma unroll
    for (int l = 0; l < 16; ++l) {
      v[l] = __fadd_rn(__fmul_rn(float(qs[l] & 15), d), m);
      v[l + 16] = __fadd_rn(__fmul_rn(float(qs[l] >> 4), d), m);
    }
  } else if constexpr (T == GgmlType::Q5_0 || T == GgmlType::Q5_1) {
    constexpr bool kMin = T == GgmlType::Q5_1;
    const float d = ld_half(b), m = kMin ? ld_half(b + 2) : 0.0f;
    const uint8_t* qh = b + (kMin ? 4 : 2);
    const uint8_t* qs = qh + 4;
    const uint32_t h = uint32_t(qh[0]) | uint32_t(qh[1]) << 8 | uint32_t(qh[2]) << 16 | uint32_t(qh[3]) << 24;
#pragma unroll
    for (int l = 0; l < 16; ++l) {
      const int x0 = int((qs[l] & 15) | (((h >> l) & 1) << 4));
      const int x1 = int((qs[l] >> 4) | (((h >> (l + 16)) & 1) << 4));
      if constexpr (kMin) {
        v[l] = __fadd_rn(__fmul_rn(float(x0), d), m);
        v[l + 16] = __fadd_rn(__fmul_rn(float(x1), d), m);
      } else {
        v[l] = float(x0 - 16) * d;
        v[l + 16] = float(x1 - 16) * d;
      }
    }
  } else if constexpr (T == GgmlType::Q8_0) {
    const float d = ld_half(b);
    const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
#pragma unroll
    for (int l = 0; l < 32; ++l) v[l] = float(qs[l]) * d;
  } else if constexpr (T == GgmlType::IQ4_NL) {
    const float d = ld_half(b);
    const uint8_t* qs = b + 2;
#pragma unroll
    for (int l = 0; l < 16; ++l) {
      v[l] = d * float(kIq4Values[qs[l] & 15]);
      v[l + 16] = d * float(kIq4Values[qs[l] >> 4]);
    }
  } else if constexpr (T == GgmlType::Q2_K) {
    // scales[16] qs[64] d dmin; chunk j: half j/4, shift 2(j%4), scales 2j (l < 16) and 2j+1.
    const uint8_t* sc = b;
    const uint8_t* q = b + 16 + 32 * (j / 4);
    const float d = ld_half(b + 80), dmin = ld_half(b + 82);
    const int shift = 2 * (j % 4);
#pragma unroll
    for (int run = 0; run < 2; ++run) {
      const int s = sc[2 * j + run];
      const float dl = __fmul_rn(d, float(s & 15)), ml = __fmul_rn(dmin, float(s >> 4));
#pragma unroll
      for (int l = 16 * run; l < 16 * run + 16; ++l) v[l] = __fsub_rn(__fmul_rn(dl, float((q[l] >> shift) & 3)), ml);
    }
  } else if constexpr (T == GgmlType::Q3_K) {
    // hmask[32] qs[64] scales[12] d; chunk j: half j/4, shift 2(j%4), high-bit mask 1 << j.
    const uint8_t* hm = b;
    const uint8_t* q = b + 32 + 32 * (j / 4);
    const uint8_t* scales = b + 96;
    const float d = ld_half(b + 108);
    const int shift = 2 * (j % 4);
    const int m = 1 << j;
#pragma unroll
    for (int run = 0; run < 2; ++run) {
      const float dl = d * float(q3k_scale(scales, 2 * j + run));
#pragma unroll
      for (int l = 16 * run; l < 16 * run + 16; ++l) {
        const int x = int((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
        v[l] = dl * float(x);
      }
    }
  } else if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
    // d dmin scales[12] [qh[32]] qs[128]; chunk j: bytes qs[32 (j/2) ..], low nibble for even j.
    constexpr bool k5 = T == GgmlType::Q5_K;
    const float d = ld_half(b), dmin = ld_half(b + 2);
    int sc, mn;
    k4_scale_min(b + 4, j, sc, mn);
    const float d1 = __fmul_rn(d, float(sc)), m1 = __fmul_rn(dmin, float(mn));
    const uint8_t* qh = b + 16;
    const uint8_t* q = b + (k5 ? 48 : 16) + 32 * (j / 2);
    const int sh = 4 * (j % 2);
#pragma unroll
    for (int l = 0; l < 32; ++l) {
      int x = (q[l] >> sh) & 15;
      if constexpr (k5) x += (qh[l] >> j) & 1 ? 16 : 0;
      v[l] = __fsub_rn(__fmul_rn(d1, float(x)), m1);
    }
  } else if constexpr (T == GgmlType::Q6_K) {
    // ql[128] qh[64] scales[16] d; chunk j: half j/4, k = j%4 picks the ql half/nibble and qh bits.
    const int half = j / 4, k = j % 4;
    const uint8_t* ql = b + 64 * half + 32 * (k & 1);
    const uint8_t* qh = b + 128 + 32 * half;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * half + 2 * k;
    const float d = ld_half(b + 208);
    const int lsh = k >= 2 ? 4 : 0;
#pragma unroll
    for (int l = 0; l < 32; ++l) {
      const int x = int(((ql[l] >> lsh) & 15) | (((qh[l] >> (2 * k)) & 3) << 4)) - 32;
      v[l] = d * float(sc[l / 16]) * float(x);
    }
  } else if constexpr (T == GgmlType::IQ4_XS) {
    // d scales_h scales_l[4] qs[128]; chunk j = sub-block ib with a 6-bit scale.
    const float d = ld_half(b);
    const int scales_h = *reinterpret_cast<const uint16_t*>(b + 2);
    const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 15) | (((scales_h >> (2 * j)) & 3) << 4);
    const float dl = d * float(ls - 32);
    const uint8_t* qs = b + 8 + 16 * j;
#pragma unroll
    for (int l = 0; l < 16; ++l) {
      v[l] = dl * float(kIq4Values[qs[l] & 15]);
      v[l + 16] = dl * float(kIq4Values[qs[l] >> 4]);
    }
  }
}

// One element of a float-format row (F32, F16, BF16).
template <GgmlType T>
__device__ __forceinline__ float load_float_elem(const uint8_t* row, int64_t i) {
  if constexpr (T == GgmlType::F32) {
    return reinterpret_cast<const float*>(row)[i];
  } else if constexpr (T == GgmlType::F16) {
    return half_bits_to_float(reinterpret_cast<const uint16_t*>(row)[i]);
  } else {
    return bf16_bits_to_float(reinterpret_cast<const uint16_t*>(row)[i]);
  }
}

// Calls f(TypeTag<T>{}) with the compile-time type of a supported weight type (inside f:
// `constexpr GgmlType T = decltype(tag)::value;`); returns false for types without a kernel.
template <GgmlType T>
using TypeTag = std::integral_constant<GgmlType, T>;

template <class F>
bool dispatch_weight_type(GgmlType t, F&& f) {
  switch (t) {
    case GgmlType::F32: f(TypeTag<GgmlType::F32>{}); return true;
    case GgmlType::F16: f(TypeTag<GgmlType::F16>{}); return true;
    case GgmlType::BF16: f(TypeTag<GgmlType::BF16>{}); return true;
    case GgmlType::Q4_0: f(TypeTag<GgmlType::Q4_0>{}); return true;
    case GgmlType::Q4_1: f(TypeTag<GgmlType::Q4_1>{}); return true;
    case GgmlType::Q5_0: f(TypeTag<GgmlType::Q5_0>{}); return true;
    case GgmlType::Q5_1: f(TypeTag<GgmlType::Q5_1>{}); return true;
    case GgmlType::Q8_0: f(TypeTag<GgmlType::Q8_0>{}); return true;
    case GgmlType::Q2_K: f(TypeTag<GgmlType::Q2_K>{}); return true;
    case GgmlType::Q3_K: f(TypeTag<GgmlType::Q3_K>{}); return true;
    case GgmlType::Q4_K: f(TypeTag<GgmlType::Q4_K>{}); return true;
    case GgmlType::Q5_K: f(TypeTag<GgmlType::Q5_K>{}); return true;
    case GgmlType::Q6_K: f(TypeTag<GgmlType::Q6_K>{}); return true;
    case GgmlType::IQ4_NL: f(TypeTag<GgmlType::IQ4_NL>{}); return true;
    case GgmlType::IQ4_XS: f(TypeTag<GgmlType::IQ4_XS>{}); return true;
    default: return false;
  }
}

__host__ __device__ constexpr bool is_float_format(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
}

}  // namespace df::cuda
