// Quantized matrix products: activations are converted once to the weight type's dot format,
// then output rows are split across threads. Each thread walks its weight rows in small blocks
// and multiplies every block against all activation rows while it is hot in L1, so a prefill
// reads each weight byte from memory once.
#include <algorithm>

#include "backend/cpu/cpu_backend.h"
#include "quant/dequant.h"
#include "quant/vec_dot.h"
#include "util/error.h"

namespace df {

namespace {
constexpr int kWeightRowsPerBlock = 16;
constexpr int kActRowsPerTile = 8;
}  // namespace

void CpuBackend::matmul(const Weight& w, const float* x, int rows, float* y) {
  if (rows <= 0) return;
  const int64_t n_in = w.n_in, n_out = w.n_out;
  const size_t a_row = activation_row_size(w.type, n_in);
  if (act_scratch_.size() < a_row * size_t(rows)) act_scratch_.resize(a_row * size_t(rows));
  uint8_t* acts = act_scratch_.data();
  pool_.parallel_for(rows, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r) quantize_activation_row(w.type, x + r * n_in, acts + r * a_row, n_in);
  });
  const int64_t n_blocks = (n_out + kWeightRowsPerBlock - 1) / kWeightRowsPerBlock;
  const auto* wbase = static_cast<const uint8_t*>(w.data);
  pool_.parallel_for(n_blocks, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t blk = b; blk < e; ++blk) {
      const int64_t r0 = blk * kWeightRowsPerBlock;
      const int nr = int(std::min<int64_t>(kWeightRowsPerBlock, n_out - r0));
      for (int c0 = 0; c0 < rows; c0 += kActRowsPerTile) {
        const int nc = std::min(kActRowsPerTile, rows - c0);
        vec_dot_tile(w.type, n_in, wbase + r0 * w.row_bytes, w.row_bytes, nr, acts + size_t(c0) * a_row, a_row, nc,
                     y + int64_t(c0) * n_out + r0, size_t(n_out));
      }
    }
  });
}

void CpuBackend::embed(const Weight& table, const int32_t* tokens, int rows, float* out) {
  const auto* base = static_cast<const uint8_t*>(table.data);
  for (int r = 0; r < rows; ++r) {
    if (tokens[r] < 0 || tokens[r] >= table.n_out) fail("token id {} is outside the vocabulary (0..{})", tokens[r], table.n_out - 1);
    dequantize_row(table.type, base + size_t(tokens[r]) * table.row_bytes, out + int64_t(r) * table.n_in, table.n_in);
  }
}

}  // namespace df
