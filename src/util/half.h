// IEEE binary16 and bfloat16 <-> float conversions (bit-exact, round-to-nearest-even).
#pragma once
#include <cstdint>
#include <cstring>

namespace df {

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do { mant <<= 1; ++e; } while ((mant & 0x400) == 0);
      bits = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return uint16_t(sign | 0x7e00);          // NaN
  if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00);         // overflow -> inf
  if (absx < 0x38800000u) {                                        // subnormal or zero
    if (absx < 0x33000000u) return uint16_t(sign);
    const uint32_t e = absx >> 23;
    uint32_t m = (absx & 0x7fffff) | 0x800000;
    const int shift = 126 - int(e);                                // 14..24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = absx - 0x38000000u;                                 // rebias exponent
  const uint32_t rem = r & 0x1fff;
  r >>= 13;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) ++r;
  return uint16_t(sign | r);
}

inline float bf16_to_f32(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 64);  // quiet NaN
  return uint16_t((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

}  // namespace df
