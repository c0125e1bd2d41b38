// Log-probabilities of the target's raw logits (log-softmax before any sampling transform:
// no penalties, bias, temperature or filters), as the OpenAI logprobs fields report them.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace df {

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
};

struct TokenLogprobs {
  float logprob = 0;               // of the committed token
  std::vector<TokenLogprob> top;   // most likely first; ties broken by the smaller id
};

// logits: n_vocab raw values; only ids < n_sampleable count (padding rows never compete).
TokenLogprobs compute_logprobs(std::span<const float> logits, int n_sampleable, int32_t chosen, int top_n);

}  // namespace df
