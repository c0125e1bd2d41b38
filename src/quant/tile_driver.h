// Walks an nr x nc output block in register tiles of a kernel K (internal to src/quant).
//
// K provides template <int R, int C> static void tile(n, w, w_stride, a, a_stride, out, ldo)
// computing an R x C block, plus the tile shapes:
//   kRows x kCols          used when there are more than kNarrowCols activation rows,
//   kNarrowRows x (<= kNarrowCols) otherwise (decode: one activation row, more weight rows).
// Weight-row tiles are the outer loop so a tile's weight bytes stay in L1 while every
// activation row passes over them; each weight block is decoded once per R x C tile.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace df::quant {

template <class K>
struct TileDriver {
  static constexpr int kMaxRows = std::max(K::kRows, K::kNarrowRows);
  static constexpr int kMaxCols = std::max(K::kCols, K::kNarrowCols);
  using Fn = void (*)(int64_t, const uint8_t*, size_t, const uint8_t*, size_t, float*, size_t);

  template <int R, int C>
  static constexpr Fn entry() {
    if constexpr ((R <= K::kRows && C <= K::kCols) || (R <= K::kNarrowRows && C <= K::kNarrowCols))
      return &K::template tile<R, C>;
    else
      return nullptr;
  }
  template <int R, std::size_t... Cs>
  static constexpr void fill_row(Fn (&t)[kMaxRows][kMaxCols], std::index_sequence<Cs...>) {
    ((t[R - 1][Cs] = entry<R, int(Cs) + 1>()), ...);
  }
  template <std::size_t... Rs>
  static constexpr auto make_table(std::index_sequence<Rs...>) {
    struct Table { Fn f[kMaxRows][kMaxCols]; } t{};
    (fill_row<int(Rs) + 1>(t.f, std::make_index_sequence<kMaxCols>{}), ...);
    return t;
  }
  static constexpr auto kTable = make_table(std::make_index_sequence<kMaxRows>{});

  static void run(int64_t n, const void* wv, size_t ws, int nr, const void* av, size_t as, int nc, float* out,
                  size_t ldo) {
    const auto* w = static_cast<const uint8_t*>(wv);
    const auto* a = static_cast<const uint8_t*>(av);
    const bool narrow = nc <= K::kNarrowCols;
    const int rt = narrow ? K::kNarrowRows : K::kRows;
    const int ct = narrow ? K::kNarrowCols : K::kCols;
    for (int r0 = 0; r0 < nr; r0 += rt) {
      const int rr = std::min(rt, nr - r0);
      for (int c0 = 0; c0 < nc; c0 += ct) {
        const int cc = std::min(ct, nc - c0);
        kTable.f[rr - 1][cc - 1](n, w + size_t(r0) * ws, ws, a + size_t(c0) * as, as, out + size_t(c0) * ldo + r0, ldo);
      }
    }
  }
};

}  // namespace df::quant
