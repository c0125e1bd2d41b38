// Scratch layout of the chunked delta rule (deltanet_chunked.cu), shared with the host
// emulation in tests/test_gdn_chunk_emulation.cpp so both walk the same buffers.
//
// Per (chunk c, value head h) one record of record_floats() floats at (c * n_v + h), chunks
// counted from the start of a piece (the rows one prepare + state pass covers). Rows t >= n of
// a partial last chunk are zero in every array, so loops may run over all 64 rows.
//   U  [64][d_v]  T diag(beta) V                          (the value targets before S)
//   W  [64][d_k]  T diag(beta e^G) K                      (how S_prev reaches them)
//   Qg [64][d_k]  e^{G_t} q_t                             (output read of S_prev)
//   Kd [64][d_k]  e^{G_last - G_s} k_s                    (state write)
//   QK [64][64]   (q_t . k_s) e^{G_t - G_s}, s <= t        (intra-chunk attention)
//   eL [32]       e^{G_last}, then zeros: records (and so every array) start on 128-byte lines,
//                 so the state pass's row copies touch no extra L2 sectors
// G_t is the cumulative log-decay inside the chunk; only differences or non-positive values
// are exponentiated, so nothing overflows however strong the decay.
#pragma once
#include <cstddef>

#ifdef __CUDACC__
#define DF_GDN_HD __host__ __device__
#else
#define DF_GDN_HD
#endif

namespace df::cuda::gdn_chunk {

constexpr int kChunk = 64;        // tokens per chunk (the CPU backend's C)
constexpr int kPieceRows = 1024;  // rows per pass: bounds the scratch (113 MB at n_v 48, d 128)
constexpr int kCols = 16;         // value columns of S per state block (16 or 32; deltanet_chunked.cu)

struct Layout {
  int dk, dv;
  DF_GDN_HD size_t u() const { return 0; }
  DF_GDN_HD size_t w() const { return size_t(kChunk) * dv; }
  DF_GDN_HD size_t qg() const { return w() + size_t(kChunk) * dk; }
  DF_GDN_HD size_t kd() const { return qg() + size_t(kChunk) * dk; }
  DF_GDN_HD size_t qk() const { return kd() + size_t(kChunk) * dk; }
  DF_GDN_HD size_t el() const { return qk() + size_t(kChunk) * kChunk; }
  DF_GDN_HD size_t record_floats() const { return el() + 32; }
};

// Shapes the chunked kernels take (others run the recurrent form): d_k 64 or 128 (the state
// pass's tiles are 32-key slices, its threads own d_k / 32 keys of S), d_v a multiple of kCols.
inline bool supports(int dk, int dv) { return (dk == 64 || dk == 128) && dv > 0 && dv % kCols == 0; }

inline size_t scratch_floats(int n_v, int dk, int dv, int rows) {
  const int piece = rows < kPieceRows ? rows : kPieceRows;
  const size_t chunks = size_t(piece + kChunk - 1) / kChunk;
  return chunks * size_t(n_v) * Layout{dk, dv}.record_floats();
}

}  // namespace df::cuda::gdn_chunk
