// Token sampling: penalties, logit bias, then top-k -> top-p -> min-p -> temperature -> draw
// (llama.cpp's default order), or greedy argmax when temperature <= 0. Seeded and reproducible.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <random>
#include <span>
#include <vector>

namespace df {

struct SamplingParams {
  float temperature = 0.8f;   // <= 0: greedy
  int top_k = 40;             // <= 0: off
  float top_p = 0.95f;        // >= 1: off
  float min_p = 0.05f;        // <= 0: off
  float repeat_penalty = 1.0f;     // 1: off; divides positive logits (multiplies negative) of recent tokens
  float presence_penalty = 0.0f;   // subtracted once per token seen in the window
  float frequency_penalty = 0.0f;  // subtracted per occurrence in the window
  int penalty_last_n = 64;         // window of recent tokens the penalties look at
  std::map<int32_t, float> logit_bias;
  uint64_t seed = 0xdf;
};

class Sampler {
 public:
  // n_sampleable: tokens with ids >= this are never drawn (padding rows of the vocabulary).
  Sampler(const SamplingParams& p, int n_sampleable);

  // Picks the next token from raw logits (n_vocab floats; not modified).
  int32_t sample(std::span<const float> logits);
  // The same pick from a row's top candidates only: ids and their logits sorted by logit
  // descending, ties to the lower id (Backend::top_k_rows), at least min(top_k, n_sampleable)
  // of them, all < n_sampleable. When can_sample_from_top(ids.size()) holds and the row has no
  // NaN, this is exactly sample(row), drawing the same random numbers.
  int32_t sample_top(std::span<const int32_t> ids, std::span<const float> logits);
  // Whether sample_top from a row's top k gives sample()'s token: nothing reads other logits
  // (no penalties, no logit bias), and greedy, or top_k on and within k candidates.
  bool can_sample_from_top(int k) const;
  // How many of a row's top candidates the next draw needs, at most max_k: 1 when greedy,
  // min(top_k, sampleable ids) when sampling; 0 when it reads more of the row than that.
  int top_candidates(int max_k) const;
  // Records a token that became part of the context (prompt or generated) for the penalties.
  void accept(int32_t token);
  const SamplingParams& params() const { return p_; }
  // Greedy with nothing that reads the logits but the argmax (no penalties, no bias): then the
  // choice is the argmax among sampleable ids, and the model may compute it on the backend.
  bool plain_greedy() const {
    return p_.temperature <= 0 && p_.repeat_penalty == 1.0f && p_.presence_penalty == 0.0f &&
           p_.frequency_penalty == 0.0f && p_.logit_bias.empty();
  }

  // The probability distribution sample() draws from, over all ids (zeros outside the kept
  // candidates). Used by tests and by speculative verification.
  std::vector<float> distribution(std::span<const float> logits);
  // The same distribution from a row's top candidates (as sample_top takes them), as its
  // nonzero entries only, ids ascending: the same values distribution() has at those ids.
  void distribution_top(std::span<const int32_t> ids, std::span<const float> logits, std::vector<int32_t>& out_ids,
                        std::vector<float>& out_probs);

 private:
  void prepare(std::span<const float> logits);  // fills cand_ with penalised, filtered candidates
  void prepare_top(std::span<const int32_t> ids, std::span<const float> logits);  // the same from top candidates
  // The filters after top-k (top-p, min-p) on cand_, sorted by logit descending (sampling only).
  void filter();
  int32_t draw();  // a draw from cand_ at the temperature (> 0)

  SamplingParams p_;
  int n_sampleable_;
  std::mt19937_64 rng_;
  std::deque<int32_t> recent_;
  std::vector<int32_t> window_;  // scratch for counting recent tokens
  struct Cand {
    int32_t id;
    float logit;
  };
  std::vector<Cand> cand_;
  std::vector<float> probs_;
};

}  // namespace df
