#include "convert/convert_tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "convert/v_heads.h"
#include "quant/quantize.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace df::convert {

namespace {

// Value-head reordering as a permutation of rows and/or of the elements within each row.
struct Permutation {
  std::vector<int64_t> rows;  // empty: identity
  std::vector<int64_t> cols;  // empty: identity
};

Permutation v_head_permutation(VHeadAxis axis, const HParams& hp, int64_t n_rows, int64_t ne0) {
  Permutation p;
  const int n_k = hp.ssm_n_group, n_v = hp.ssm_dt_rank;
  if (axis == VHeadAxis::None || n_k == n_v) return p;  // the identity
  const int64_t qk = 2 * int64_t(n_k) * hp.ssm_d_state;  // q and k rows/channels come first
  const int64_t d_v = hp.d_v();
  switch (axis) {
    case VHeadAxis::QkvRows:
    case VHeadAxis::ConvChannels: p.rows = v_head_source_index(n_rows, qk, d_v, n_k, n_v); break;
    case VHeadAxis::Rows: p.rows = v_head_source_index(n_rows, 0, d_v, n_k, n_v); break;
    case VHeadAxis::RowPerHead: p.rows = v_head_source_index(n_rows, 0, 1, n_k, n_v); break;
    case VHeadAxis::Elements: p.cols = v_head_source_index(ne0, 0, 1, n_k, n_v); break;
    case VHeadAxis::Columns: p.cols = v_head_source_index(ne0, 0, d_v, n_k, n_v); break;
    case VHeadAxis::None: break;
  }
  return p;
}

void apply(ValueOp op, float* x, int64_t n) {
  switch (op) {
    case ValueOp::None: return;
    case ValueOp::AddOne:
      for (int64_t i = 0; i < n; ++i) x[i] += 1.0f;
      return;
    case ValueOp::NegExp:
      for (int64_t i = 0; i < n; ++i) x[i] = -std::exp(x[i]);
      return;
  }
}

// A float type stored unchanged: rows are copied as bytes (bf16 -> bf16 is the common case).
bool same_float_type(StDtype from, GgmlType to) {
  return (from == StDtype::F32 && to == GgmlType::F32) || (from == StDtype::F16 && to == GgmlType::F16) ||
         (from == StDtype::BF16 && to == GgmlType::BF16);
}

}  // namespace

void convert_tensor(const TensorConversion& c, const HParams& hp, uint8_t* dst, ThreadPool& pool) {
  const StTensor& t = *c.src;
  const int64_t ne0 = t.shape.empty() ? 1 : t.shape.back();
  const int64_t rows = ne0 == 0 ? 0 : t.n_elements() / ne0;
  const TypeTraits& tr = type_traits(c.type);
  if (ne0 % tr.block_size != 0)
    fail("internal: tensor '{}' rows of {} are not a multiple of {}'s block of {}", t.name, ne0, tr.name,
         tr.block_size);
  const size_t row_bytes = row_size(c.type, ne0);
  const Permutation perm = v_head_permutation(c.v_heads, hp, rows, ne0);
  if (!is_float_readable(t.dtype))
    fail("{}: tensor '{}' has dtype {}; only F32, F16, BF16 and F64 weights can be converted", t.file, t.name,
         dtype_name(t.dtype));
  const bool copy_bytes = same_float_type(t.dtype, c.type) && c.op == ValueOp::None && perm.cols.empty();

  // ~64 KiB of output per task: small tensors stay on one thread, large ones spread evenly.
  const int64_t grain = std::max<int64_t>(1, int64_t(65536 / std::max<size_t>(row_bytes, 1)));
  pool.parallel_for(rows, grain, [&](int64_t begin, int64_t end, int) {
    std::vector<float> in(static_cast<size_t>(ne0)), out(static_cast<size_t>(ne0));
    for (int64_t r = begin; r < end; ++r) {
      const int64_t src_row = perm.rows.empty() ? r : perm.rows[size_t(r)];
      if (copy_bytes) {
        std::memcpy(dst + size_t(r) * row_bytes, t.data + size_t(src_row) * row_bytes, row_bytes);
        continue;
      }
      read_as_f32(t, src_row * ne0, ne0, in.data());
      if (perm.cols.empty()) {
        out.swap(in);
      } else {
        for (int64_t i = 0; i < ne0; ++i) out[size_t(i)] = in[size_t(perm.cols[size_t(i)])];
      }
      apply(c.op, out.data(), ne0);
      quantize_row(c.type, out.data(), dst + size_t(r) * row_bytes, ne0);
    }
  });
}

}  // namespace df::convert
