// 8-lane float/int vectors through GCC/Clang vector extensions, for the quantizers (internal
// to src/quant). The compiler emits AVX with -mavx2 and SSE pairs otherwise, so quantization
// code stays portable without per-ISA variants.
#pragma once
#include <cstdint>
#include <cstring>

#if !defined(__AVX__)
// Without AVX, GCC notes that 32-byte vectors are passed differently than with it; these
// helpers are inline and internal, so no call crosses such a boundary.
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace df::quant {

using f32x8 = float __attribute__((vector_size(32)));
using i32x8 = int32_t __attribute__((vector_size(32)));
using u32x8 = uint32_t __attribute__((vector_size(32)));

inline f32x8 load8(const float* p) {
  f32x8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline f32x8 splat8(float f) { return f32x8{} + f; }

// Round to nearest, ties to even (like nearest_int in scale_search.h), valid for |v| < 2^22.
inline i32x8 round_even8(f32x8 v) {
  const f32x8 m = v + 12582912.f;
  i32x8 i;
  std::memcpy(&i, &m, sizeof i);
  return (i & 0x007fffff) - 0x00400000;
}

// round_even8 clamped to [lo, hi], as floats.
inline f32x8 round_clamp8(f32x8 v, int lo, int hi) {
  i32x8 i = round_even8(v);
  i = i < lo ? i32x8{} + lo : i;
  i = i > hi ? i32x8{} + hi : i;
  return __builtin_convertvector(i, f32x8);
}

}  // namespace df::quant
