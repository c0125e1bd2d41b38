// bench --draft: the cost side of speculative decoding on this device — one drafter block, and
// one verify step of that block as the decoder runs it (speculative rows with per-row
// checkpoints, argmax ids, the commit and the drafter's ingest), against a plain decode step —
// and the speedup those costs imply at a given acceptance (tau: tokens committed per step),
// labelled as a projection. A plain forward of the same rows (no checkpoints) is reported beside.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/loaded_model.h"

namespace df::cli {

struct DraftBenchInput {
  std::string draft_path;
  std::vector<int32_t> prompt;        // context the drafter drafts after
  int reps = 5;
  double plain_step_ms = 0;           // one decode step of the target
  std::map<int, double> verify_ms;    // rows -> one plain forward of that many rows (for comparison)
  std::vector<double> taus = {3, 5, 7};
};

// Measures blocks 8 and 16 (those the drafter allows): one JSON object per block with draft_ms,
// verify_ms (the speculative step after the draft), plain_forward_ms, plain_step_ms,
// cost_vs_plain and projected_speedup_at_tau {"3": .., "5": .., "7": ..}; and sampled_step_ms /
// sampled_top_step_ms: a whole sampled speculative step (T = 0.7, top_k 40), drafter to commit,
// on full logits and on the rows' top 40 candidates (the host's share of sampled speculation).
nlohmann::json bench_draft(LoadedModel& m, const DraftBenchInput& in);

}  // namespace df::cli
