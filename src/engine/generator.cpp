#include "engine/generator.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace df {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

Generator::Generator(TargetModel& model, const Tokenizer* tok, int ctx)
    : model_(model), tok_(tok), state_(model.make_state(1, ctx)) {
  seq_ = state_->create();
}

void Generator::reset() { state_->reset(seq_); }

void Generator::prefill(const std::vector<int32_t>& prompt, int chunk, std::vector<float>& last_logits) {
  if (prompt.empty()) fail("empty prompt");
  chunk = std::max(1, std::min(chunk, model_.options().max_batch_rows));
  const int start = state_->get(seq_).n_past;
  for (size_t i0 = 0; i0 < prompt.size(); i0 += size_t(chunk)) {
    const size_t n = std::min(prompt.size() - i0, size_t(chunk));
    batch_.clear();
    for (size_t i = 0; i < n; ++i)
      batch_.add(seq_, start + int(i0 + i), prompt[i0 + i], i0 + i + 1 == prompt.size());
    model_.forward(batch_, *state_, out_);
  }
  last_logits.assign(out_.logits.begin(), out_.logits.end());
}

void Generator::decode(int32_t token, std::vector<float>& logits) {
  batch_.clear();
  batch_.add(seq_, state_->get(seq_).n_past, token, true);
  model_.forward(batch_, *state_, out_);
  logits.assign(out_.logits.begin(), out_.logits.end());
}

int32_t Generator::decode_greedy(int32_t token, int limit) {
  batch_.clear();
  batch_.add(seq_, state_->get(seq_).n_past, token, true);
  out_.greedy_only = limit;
  model_.forward(batch_, *state_, out_);
  out_.greedy_only = 0;
  return out_.greedy[0];
}

void Generator::decode_top_k(int32_t token, int k, int limit, std::vector<int32_t>& ids,
                             std::vector<float>& logits) {
  batch_.clear();
  batch_.add(seq_, state_->get(seq_).n_past, token, true);
  out_.top_k_only = k;
  out_.top_k_limit = limit;
  try {
    model_.forward(batch_, *state_, out_);
  } catch (...) {
    out_.top_k_only = 0;
    throw;
  }
  out_.top_k_only = 0;
  ids.assign(out_.top_ids.begin(), out_.top_ids.end());
  logits.assign(out_.top_logits.begin(), out_.top_logits.end());
}

GenerateStats Generator::generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                  const std::function<bool(int32_t)>& on_token) {
  GenerateStats st;
  st.prompt_tokens = int(prompt.size());
  const int n_vocab = model_.hparams().n_vocab;
  const int n_sampleable = tok_ ? std::min(n_vocab, tok_->n_vocab()) : n_vocab;
  Sampler sampler(opt.sampling, n_sampleable);
  for (int32_t t : prompt) sampler.accept(t);

  std::vector<float> logits;
  const double t0 = now_seconds();
  prefill(prompt, opt.prefill_chunk, logits);
  const double t1 = now_seconds();
  st.prefill_seconds = t1 - t0;
  st.finish_reason = "length";
  double t_first = t1;
  // Plain greedy: each step returns its argmax id, not the logits (see ForwardOutput).
  const bool argmax_only = sampler.plain_greedy();
  // Sampling that reads only the top top_k logits: each step returns those (and their ids).
  const int top_k = !argmax_only && opt.device_top_k ? sampler.top_candidates(kMaxDeviceTopK) : 0;
  std::vector<int32_t> top_ids;
  std::optional<int32_t> next;
  for (int i = 0; i < opt.max_new_tokens; ++i) {
    const int32_t tok = next ? *next : !top_ids.empty() ? sampler.sample_top(top_ids, logits) : sampler.sample(logits);
    sampler.accept(tok);
    if (i == 0) t_first = now_seconds();
    st.generated_tokens++;
    const bool eog = opt.stop_at_eog && tok_ && tok_->is_eog(tok);
    if (!on_token(tok)) {
      st.finish_reason = "callback";
      break;
    }
    if (eog) {
      st.finish_reason = "stop";
      break;
    }
    if (i + 1 == opt.max_new_tokens) break;
    if (state_->get(seq_).n_past + 1 > state_->max_tokens_per_seq()) {
      st.finish_reason = "length";
      break;
    }
    if (argmax_only)
      next = decode_greedy(tok, n_sampleable);
    else if (top_k > 0)
      decode_top_k(tok, top_k, n_sampleable, top_ids, logits);
    else
      decode(tok, logits);
  }
  st.decode_seconds = now_seconds() - t_first;
  return st;
}

}  // namespace df
