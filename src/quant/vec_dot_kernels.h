// Kernel tables behind vec_dot / vec_dot_tile (internal to src/quant).
#pragma once
#include <cstddef>
#include <cstdint>

#include "quant/types.h"

namespace df::quant {

// One weight row (type wt) times one activation row in wt's vec_dot_type.
using DotFn = float (*)(int64_t n, const void* w, const void* a);
// out[c * ldo + r] for r < nr, c < nc (see vec_dot_tile).
using TileFn = void (*)(int64_t n, const void* w, size_t w_stride, int nr, const void* a, size_t a_stride, int nc,
                        float* out, size_t ldo);

// Portable scalar kernel: the path of builds without AVX2 and of types without a SIMD kernel
// (Q4_1, Q5_1, Q2_K, Q3_K); nullptr for types without dot support.
DotFn scalar_dot(GgmlType wt);

// SIMD tile kernels of this build, nullptr where none exists (then scalar_dot is used).
TileFn simd_tile_legacy(GgmlType wt);   // vec_dot_legacy_simd.cpp: Q8_0, Q4_0, Q5_0, IQ4_NL
TileFn simd_tile_q4k_q5k(GgmlType wt);  // vec_dot_q4k_q5k_simd.cpp
TileFn simd_tile_q6k(GgmlType wt);      // vec_dot_q6k_simd.cpp
TileFn simd_tile_iq4xs(GgmlType wt);    // vec_dot_iq4xs_simd.cpp
TileFn simd_tile_float(GgmlType wt);    // vec_dot_float_simd.cpp: F32, F16, BF16

}  // namespace df::quant
