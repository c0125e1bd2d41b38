// The one step API: every target forward is a Batch of rows. Rows of one sequence form a
// contiguous segment with consecutive positions. Prefill chunk = n rows (logits for the last),
// decode = 1 row, chain verify = 1 + B rows, tree verify = rows with parents (later).
#pragma once
#include <cstdint>
#include <vector>

namespace df {

struct BatchRow {
  int32_t seq = 0;
  int32_t pos = 0;
  int32_t token = 0;
  int32_t parent = -1;  // -1: ordinary causal row
  bool want_logits = false;
  // Part of a speculative segment: the model leaves the recurrent state as it was and keeps the
  // row's delta-rule inputs; the segment stays provisional until TargetModel::commit keeps a
  // prefix of it (replaying those rows).
  bool speculative = false;
};

// Rows whose tokens are in backend memory, not on the host: rows [row, row + n) take ids[0..n)
// (int32, backend memory), read when the forward runs (a device copy inside its step).
struct DeviceTokens {
  int row = 0;
  int n = 0;
  const int32_t* ids = nullptr;
};

struct Batch {
  // A device-token row's BatchRow::token: not known on the host (DeviceTokens gives it).
  static constexpr int32_t kDeviceToken = -1;
  std::vector<BatchRow> rows;
  std::vector<DeviceTokens> device_tokens;
  void clear() {
    rows.clear();
    device_tokens.clear();
  }
  void add(int32_t seq, int32_t pos, int32_t token, bool want_logits) {
    rows.push_back(BatchRow{seq, pos, token, -1, want_logits, false});
  }
  // A verify row: logits wanted, provisional until commit.
  void add_speculative(int32_t seq, int32_t pos, int32_t token) {
    rows.push_back(BatchRow{seq, pos, token, -1, true, true});
  }
  // n verify rows at positions pos.. whose tokens are ids[0..n) in backend memory: drafts that
  // stayed on the device (Backend::argmax_rows_to), so the host builds and launches the verify
  // step without waiting for them. The ids must be token ids of the model's vocabulary.
  void add_speculative_from(int32_t seq, int32_t pos, const int32_t* ids, int n) {
    if (n <= 0) return;
    device_tokens.push_back(DeviceTokens{int(rows.size()), n, ids});
    for (int i = 0; i < n; ++i) rows.push_back(BatchRow{seq, pos + i, kDeviceToken, -1, true, true});
  }
};

// Logits of the rows that asked for them, in row order: logits[i * n_vocab ...] belongs to
// rows[logit_rows[i]]. With greedy_only > 0 (set by the caller before forward) the model
// returns, instead of logits, each such row's greedy choice among ids < greedy_only in
// greedy[i]: the argmax runs on the backend, so a step downloads a few bytes, not n_vocab floats
// a row (a 248K vocabulary is 1 MB a row). Ties go to the lowest id, like Sampler's greedy pick.
// With top_k_only = K > 0 instead, each such row's K largest logits among ids < top_k_limit:
// top_ids[i * K ...] and top_logits[i * K ...], by logit descending, ties to the lower id, NaN
// last (Backend::top_k_rows; 1 <= K <= min(top_k_limit, kMaxDeviceTopK)): what Sampler::
// sample_top draws from, a few hundred bytes a row.
// With greedy_to set as well (backend memory, a logit row each), the ids go there instead of
// greedy, and the forward returns without waiting for them: the caller downloads them, with
// whatever else it needs from the device, in one round trip.
struct ForwardOutput {
  int greedy_only = 0;
  int32_t* greedy_to = nullptr;  // with greedy_only: where the ids go (greedy stays empty)
  int top_k_only = 0;
  int top_k_limit = 0;  // ids >= this never count (the vocabulary's padding rows)
  std::vector<int> logit_rows;
  std::vector<float> logits;    // empty when greedy_only or top_k_only
  std::vector<int32_t> greedy;  // one id per logit row when greedy_only
  std::vector<int32_t> top_ids;   // top_k_only ids per logit row
  std::vector<float> top_logits;  // and their logits
};

}  // namespace df
