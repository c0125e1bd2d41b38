// Scale (and min) searches shared by the weight quantizers. Each fits one small group of
// values (16 or 32) to an integer grid, trying a handful of candidate grid spacings and
// keeping the one with the lowest weighted error, the approach of llama.cpp's reference
// quantizers (without importance matrix). Internal to src/quant.
#pragma once
#include <cstdint>
#include <cstring>

namespace df::quant {

// Round to nearest, ties to even, for |f| < 2^22: adding 1.5*2^23 pushes the fraction out of
// the mantissa, so the low mantissa bits are the rounded integer. Branch-free.
inline int nearest_int(float f) {
  const float v = f + 12582912.f;
  int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// Asymmetric grid: x ~= scale * L - neg_min, L in [0, nmax] (Q2_K, Q4_K, Q5_K); n is 16 or 32
// and w are per-element error weights. Tries the spacings (max - min) / (nmax + rmin +
// rdelta*k), k = 0..nstep, refitting scale and min by weighted least squares on each grid
// (min clamped to <= 0 so that zero stays representable). Returns scale; L gets the grid.
// mad: minimise the weighted absolute error instead of the squared one.
float fit_affine(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min, float rmin,
                 float rdelta, int nstep, bool mad);

// Symmetric grid: x ~= scale * (L - nmax), L - nmax in [-nmax, nmax - 1] (Q3_K, Q6_K), with
// error weights x^2. The largest-magnitude value goes to the side with the extra level, and
// 19 spacings around nmax / max|x| are tried. Returns the least-squares scale (0 for an
// all-zero group, with L = nmax).
float fit_symmetric(int n, int nmax, const float* x, uint8_t* L);

}  // namespace df::quant
