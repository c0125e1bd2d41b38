// Chain verification rules (docs: ../shared/docs/speculative-decoding.md §4).
//   greedy: accept the longest prefix of drafts that equal the target's argmax at the previous
//           position; the target's argmax after it is the bonus token.
//   sampled: draft x ~ q is kept with probability min(1, p(x)/q(x)); on the first rejection the
//           token is drawn from the residual max(0, p - q) (normalised; p itself if that is all
//           zero) and the block ends. Emitted tokens are then distributed exactly as p.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "engine/sampler.h"

namespace df::spec {

// Number of leading drafts equal to the target's argmax at the row before them:
// drafts[i] is checked against target_argmax[i].
int accept_greedy(std::span<const int32_t> drafts, std::span<const int32_t> target_argmax);

// A draw from a distribution (non-negative weights, not necessarily normalised).
int32_t draw(std::span<const float> dist, std::mt19937_64& rng);

struct RejectionStep {
  bool accepted = false;
  int32_t token = -1;  // x when accepted, else the residual draw
};

// One position of lossless speculative sampling: p the target's distribution, q the draft's
// (both normalised over the same ids), x the draft token drawn from q.
RejectionStep rejection_step(std::span<const float> p, std::span<const float> q, int32_t x, std::mt19937_64& rng);

// The same rule for a draft proposed deterministically (the drafter's argmax: q is all mass on
// x): x is kept with probability p(x), else the token is drawn from p without x. Either way the
// emitted token is distributed as p.
RejectionStep rejection_step_point(std::span<const float> p, int32_t x, std::mt19937_64& rng);

// The draft's proposal distribution q: the request's filters and temperature without penalties
// (they depend on the history the block is still building; any fixed q keeps sampling exact).
SamplingParams draft_sampling(const SamplingParams& request);

// The draft tokens of one step from the drafter's logits (drafts.size() rows of n_vocab):
// greedy, the argmax over the sampleable ids; else a draw from q = draft_sampler's distribution,
// kept in qs for the rejection rule.
void choose_drafts(std::span<const float> draft_logits, size_t n_vocab, int n_sampleable, bool greedy,
                   Sampler& draft_sampler, std::mt19937_64& rng, std::vector<int32_t>& drafts,
                   std::vector<std::vector<float>>& qs);

struct BlockWalk {
  int kept = 1;                 // verify rows kept: the anchor plus the accepted drafts
  int next_row = 0;             // the row whose logits predict the token after the kept rows
  std::optional<int32_t> next;  // that token when the walk chose it (mismatch or residual draw);
                                // empty: sample it from next_row's logits (bonus, or a stop)
};

// Walks a verified block [anchor, d1..dn]: row i's logits (logits + i * n_vocab, n + 1 rows)
// decide the token after row i — greedy: sampler's choice must equal the draft; sampling: the
// rejection rule with qs, or, when qs is empty, with point proposals (the drafts are the
// drafter's argmax: rejection_step_point). on_accept(token) commits an accepted draft (updating the sampler's
// history before the next row is judged); returning false ends the walk after it.
BlockWalk walk_block(std::span<const float> logits, size_t n_vocab, std::span<const int32_t> drafts,
                     const std::vector<std::vector<float>>& qs, bool greedy, Sampler& sampler,
                     std::mt19937_64& rng, const std::function<bool(int32_t)>& on_accept);

// --- The same rules on the rows' top candidates (ForwardOutput::top_k_only, and the drafter's
// top candidates): where the samplers can sample from them (Sampler::can_sample_from_top), p
// and q are zero outside a few ids, so each is kept as its nonzero entries, ids ascending.
// Every function below draws the same random numbers and returns the same tokens as its dense
// counterpart above on the full rows (the sums run over the same nonzero values in the same
// order), without touching n_vocab entries per row.
struct SparseDist {
  std::vector<int32_t> ids;  // ascending
  std::vector<float> w;      // their weights (> 0)
  float at(int32_t id) const;  // 0 outside ids
};

int32_t draw(const SparseDist& dist, std::mt19937_64& rng);
RejectionStep rejection_step(const SparseDist& p, const SparseDist& q, int32_t x, std::mt19937_64& rng);
RejectionStep rejection_step_point(const SparseDist& p, int32_t x, std::mt19937_64& rng);

// Rows of top candidates: row i's k ids and logits at ids + i * k, logits + i * k.
struct TopRows {
  std::span<const int32_t> ids;
  std::span<const float> logits;
  size_t k = 0;
  std::span<const int32_t> ids_of(size_t i) const { return ids.subspan(i * k, k); }
  std::span<const float> logits_of(size_t i) const { return logits.subspan(i * k, k); }
};

// choose_drafts from the drafter's top candidates (qs receives the sparse q of each draft).
void choose_drafts_top(const TopRows& draft_top, bool greedy, Sampler& draft_sampler, std::mt19937_64& rng,
                       std::vector<int32_t>& drafts, std::vector<SparseDist>& qs);
// walk_block on the verify rows' top candidates (n + 1 rows); qs empty: point proposals.
BlockWalk walk_block_top(const TopRows& target_top, std::span<const int32_t> drafts, const std::vector<SparseDist>& qs,
                         bool greedy, Sampler& sampler, std::mt19937_64& rng,
                         const std::function<bool(int32_t)>& on_accept);

// The greedy walk when the verify forward returned only each row's greedy choice
// (ForwardOutput::greedy_only): target[i] is row i's choice, n + 1 entries. Accepts drafts while
// they equal the target's choice; next is the target's choice at next_row (a mismatch or the
// bonus), left empty only when on_accept ended the walk. Same result as walk_block with greedy
// sampling and no penalties or bias.
BlockWalk walk_block_greedy(std::span<const int32_t> target, std::span<const int32_t> drafts,
                            const std::function<bool(int32_t)>& on_accept);

}  // namespace df::spec
