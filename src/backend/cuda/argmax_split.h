// How argmax.cu splits a row over blocks, and the rule that merges their picks: shared with the
// host emulation in tests/test_argmax_split.cpp, so both cut the same chunks and merge alike.
//
// A row of n values is cut into parts(n) contiguous chunks of chunk(n) values (the last one
// shorter), chunk(n) a multiple of kTile so every tile but the chunk's last is full; each chunk
// block leaves one (value, index) pick in the scratch, and a second kernel merges a row's picks.
// At most kMaxParts chunks per row whatever n, so the scratch depends on the row count only.
#pragma once
#include <climits>
#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define DF_ARGMAX_HD __host__ __device__ __forceinline__
#else
#define DF_ARGMAX_HD inline
#endif

namespace df::cuda::argmax_split {

constexpr int kThreads = 256;            // per chunk block
constexpr int kPer = 8;                  // loads a thread issues together (one tile)
constexpr int kTile = kThreads * kPer;   // 2048 values
constexpr int kMaxParts = 128;           // chunks per row at most (the merge block's threads)

// Values per chunk: n / kMaxParts rounded up to whole tiles (a 248,320-entry row: 2048, 122 chunks).
DF_ARGMAX_HD int chunk(int n) {
  const int64_t per = (int64_t(n) + kMaxParts - 1) / kMaxParts;
  return int((per + kTile - 1) / kTile * kTile);
}
DF_ARGMAX_HD int parts(int n) { return int((int64_t(n) + chunk(n) - 1) / chunk(n)); }

// A pick: the best (value, index) seen; index INT_MAX until a number is seen (NaN never is).
struct Pick {
  float v;
  int i;
};
DF_ARGMAX_HD Pick no_pick() { return Pick{-__builtin_huge_valf(), INT_MAX}; }

// Whether (v, i) beats p: a larger value, or an equal one at a lower index. NaN compares false,
// so it never wins; any number beats no_pick() (-inf too, its index being below INT_MAX). With
// distinct indices this is a strict total order on the numbers, so the winner does not depend on
// the order picks are merged in: it is the CPU's left-to-right scan's choice.
DF_ARGMAX_HD bool beats(float v, int i, const Pick& p) { return v > p.v || (v == p.v && i < p.i); }

// Scratch (device memory): rows int32 results, then rows * kMaxParts picks, 16-byte aligned.
DF_ARGMAX_HD size_t picks_offset(int rows) { return (size_t(rows) * sizeof(int32_t) + 15) / 16 * 16; }
DF_ARGMAX_HD size_t scratch_bytes(int rows) { return picks_offset(rows) + size_t(rows) * kMaxParts * sizeof(Pick); }

}  // namespace df::cuda::argmax_split
