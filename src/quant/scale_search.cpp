// Scale searches. The candidate grid spacings are independent, so they are evaluated 8 at a
// time, one candidate per vector lane, while the group's values are walked one by one: no
// horizontal sums and many independent accumulator chains, which is what makes the ~20
// candidates per group affordable (make-model quantizes ~10^9 weights).
#include "quant/scale_search.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "quant/vec8.h"

namespace df::quant {

float fit_affine(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min, float rmin,
                 float rdelta, int nstep, bool mad) {
  float mn = x[0], mx = x[0], sum_w = 0, sum_x = 0;
  for (int i = 0; i < n; ++i) {
    mn = std::min(mn, x[i]);
    mx = std::max(mx, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (mn > 0) mn = 0;
  if (mx == mn) {
    std::fill(L, L + n, uint8_t(0));
    *neg_min = -mn;
    return 0.f;
  }
  constexpr int kVecs = 3;
  const int ncand = nstep + 2;
  assert(ncand <= 8 * kVecs);
  const int nv = (ncand + 7) / 8;

  // Best so far: grid values from (x - offset) * iscale, reconstruction scale * l + min.
  float best_err = INFINITY, best_iscale = 0, best_offset = mn, best_scale = 0, best_min = mn;

  // One round of candidates with the grid anchored at `offset`. Lane 0: the plain grid
  // (offset at 0, max at nmax) kept as is; lanes 1..nstep+1: spacing (nmax + rmin + rdelta*k)
  // / (max - offset) with scale and min refitted by weighted least squares. Spare lanes
  // repeat lane 0 and never win (ties keep the earlier candidate).
  auto round = [&](float offset) {
    const float range = mx - offset;
    f32x8 iscale[kVecs];
    for (int c = 0; c < 8 * nv; ++c)
      iscale[c / 8][c % 8] = (c == 0 || c >= ncand) ? float(nmax) / range
                                                    : (rmin + rdelta * float(c - 1) + float(nmax)) / range;
    f32x8 sl[kVecs] = {}, sl2[kVecs] = {}, sxl[kVecs] = {};
    for (int i = 0; i < n; ++i) {
      const float xs = x[i] - offset, wi = w[i], wxi = wi * x[i];
      for (int k = 0; k < nv; ++k) {
        const f32x8 l = round_clamp8(iscale[k] * xs, 0, nmax);
        const f32x8 wl = wi * l;
        sl[k] += wl;
        sl2[k] += wl * l;
        sxl[k] += wxi * l;
      }
    }
    f32x8 scale[kVecs], min[kVecs], err[kVecs];
    for (int k = 0; k < nv; ++k) {
      const f32x8 D = sum_w * sl2[k] - sl[k] * sl[k];
      const f32x8 D_safe = D > 0 ? D : 1.f;
      f32x8 sc = (sum_w * sxl[k] - sum_x * sl[k]) / D_safe;
      f32x8 m = (sl2[k] * sum_x - sl[k] * sxl[k]) / D_safe;
      const f32x8 sl2_safe = sl2[k] > 0 ? sl2[k] : 1.f;
      sc = m > 0 ? sxl[k] / sl2_safe : sc;  // a positive min would lose zero: clamp it
      m = m > 0 ? 0.f : m;
      for (int lane = 0; lane < 8; ++lane) {
        const int c = 8 * k + lane;
        if (c == 0 || c >= ncand) {
          sc[lane] = 1.f / iscale[k][lane];
          m[lane] = offset;
        } else if (!(D[lane] > 0)) {
          sc[lane] = NAN;  // degenerate grid: never selected
        }
      }
      scale[k] = sc;
      min[k] = m;
      // Squared error expanded in the sums (plus the constant sum(w x^2), left out).
      err[k] = sc * sc * sl2[k] + 2.f * sc * m * sl[k] + m * m * sum_w - 2.f * sc * sxl[k] - 2.f * m * sum_x;
    }
    if (mad) {  // the absolute error has no closed form: second pass
      for (int k = 0; k < nv; ++k) err[k] = f32x8{};
      for (int i = 0; i < n; ++i) {
        const float xs = x[i] - offset;
        for (int k = 0; k < nv; ++k) {
          const f32x8 l = round_clamp8(iscale[k] * xs, 0, nmax);
          const f32x8 diff = l * scale[k] + min[k] - x[i];
          err[k] += w[i] * (diff < 0 ? -diff : diff);
        }
      }
    }
    bool improved = false;
    for (int c = 0; c < ncand; ++c) {
      const float e = err[c / 8][c % 8];
      if (e < best_err) {
        best_err = e;
        best_iscale = iscale[c / 8][c % 8];
        best_offset = offset;
        best_scale = scale[c / 8][c % 8];
        best_min = min[c / 8][c % 8];
        improved = true;
      }
    }
    return improved;
  };
  // llama.cpp re-anchors the grid at every better min as it goes through its candidates;
  // re-running the candidates anchored at the best min so far, while that keeps improving,
  // recovers that refinement (and then matches its error).
  round(mn);
  for (int r = 0; r < 4; ++r) {
    const float offset = best_min;
    if (offset == best_offset || !(mx > offset) || !round(offset)) break;
  }

  for (int i = 0; i < n; ++i) L[i] = uint8_t(std::clamp(nearest_int((x[i] - best_offset) * best_iscale), 0, nmax));
  *neg_min = -best_min;
  return best_scale;
}

float fit_symmetric(int n, int nmax, const float* x, uint8_t* L) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < 1e-15f) {
    std::fill(L, L + n, uint8_t(nmax));
    return 0.f;
  }
  // Lane 0: the extreme value exactly at -nmax; lanes 1..18: spacings nmax + 0.1*k,
  // k = -9..-1, 1..9. Spare lanes repeat lane 0.
  constexpr int kVecs = 3, kCand = 19;
  f32x8 iscale[kVecs];
  for (int c = 0; c < 8 * kVecs; ++c) {
    const int is = (c == 0 || c >= kCand) ? 0 : c <= 9 ? c - 10 : c - 9;
    iscale[c / 8][c % 8] = -(float(nmax) + 0.1f * float(is)) / max;
  }
  // With error weights x^2, the least-squares scale is sum(w x l) / sum(w l^2) and the error
  // it leaves falls as sum(w x l)^2 / sum(w l^2) rises.
  f32x8 slx[kVecs] = {}, sl2[kVecs] = {};
  for (int i = 0; i < n; ++i) {
    const float xi = x[i], wi = xi * xi;
    for (int k = 0; k < kVecs; ++k) {
      const f32x8 l = round_clamp8(iscale[k] * xi, -nmax, nmax - 1);
      const f32x8 wl = wi * l;
      slx[k] += wl * xi;
      sl2[k] += wl * l;
    }
  }
  int best = -1;
  float best_q = 0;
  for (int c = 0; c < kCand; ++c) {
    const float a = slx[c / 8][c % 8], b = sl2[c / 8][c % 8];
    if (b > 0 && (best < 0 || a * a / b > best_q)) {
      best = c;
      best_q = a * a / b;
    }
  }
  if (best < 0) best = 0;
  const float best_iscale = iscale[best / 8][best % 8];
  for (int i = 0; i < n; ++i) L[i] = uint8_t(std::clamp(nearest_int(best_iscale * x[i]), -nmax, nmax - 1) + nmax);
  const float b = sl2[best / 8][best % 8];
  return b > 0 ? slx[best / 8][best % 8] / b : 0.f;
}

}  // namespace df::quant
