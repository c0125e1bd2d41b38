// Chain verification rules (docs: ../shared/docs/speculative-decoding.md §4).
//   greedy: accept the longest prefix of drafts that equal the target's argmax at the previous
//           position; the target's argmax after it is the bonus token.
//   sampled: draft x ~ q is kept with probability min(1, p(x)/q(x)); on the first rejection the
//           token is drawn from the residual max(0, p - q) (normalised; p itself if that is all
//           zero) and the block ends. Emitted tokens are then distributed exactly as p.
#pragma once
#include <cstdint>
#include <random>
#include <span>

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

// The draft's proposal distribution q: the request's filters and temperature without penalties
// (they depend on the history the block is still building; any fixed q keeps sampling exact).
SamplingParams draft_sampling(const SamplingParams& request);

}  // namespace df::spec
