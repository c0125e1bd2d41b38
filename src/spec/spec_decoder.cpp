#include "spec/spec_decoder.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "backend/top_k_order.h"
#include "spec/verify.h"
#include "spec/warmup.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace df {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

SpecDecoder::SpecDecoder(TargetModel& model, DraftSource& drafts, const Tokenizer* tok, int ctx, SpecOptions opt)
    : model_(model),
      drafts_(drafts),
      tok_(tok),
      policy_(opt),
      argmax_drafts_(opt.argmax_drafts),
      state_(model.make_state(1, ctx, drafts.block_size())) {
  seq_ = state_->create();
  const size_t B = size_t(drafts.block_size());
  ids_dev_ = static_cast<int32_t*>(model.backend().alloc((2 * B - 1) * sizeof(int32_t)));
  ids_host_.resize(2 * B - 1);
}

SpecDecoder::~SpecDecoder() { model_.backend().release(ids_dev_); }

int SpecDecoder::drafts_this_step(int budget) const {
  // Never verify past what may still be emitted (the bonus comes on top) or past the context.
  int n = policy_.drafts(drafts_.block_size());
  n = std::min(n, budget - 1);
  n = std::min(n, state_->max_tokens_per_seq() - state_->get(seq_).n_past - 1);
  return std::max(n, 0);
}

GenerateStats SpecDecoder::generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                    const std::function<bool(int32_t)>& on_token) {
  if (prompt.empty()) fail("empty prompt");
  GenerateStats st;
  st.prompt_tokens = int(prompt.size());
  state_->reset(seq_);
  drafts_.reset();
  policy_.reset();
  const size_t V = size_t(model_.hparams().n_vocab);
  const int n_sampleable = tok_ ? std::min(int(V), tok_->n_vocab()) : int(V);
  Sampler sampler(opt.sampling, n_sampleable);
  Sampler draft_sampler(spec::draft_sampling(opt.sampling), n_sampleable);
  std::mt19937_64 rng(opt.sampling.seed ^ 0x5bd1e995u);
  const bool greedy = opt.sampling.temperature <= 0;
  // Plain greedy: verify rows come back as argmax ids, not logits (see ForwardOutput).
  const bool argmax_only = sampler.plain_greedy();
  for (int32_t t : prompt) sampler.accept(t);
  // Sampled steps on top candidates (opt.device_top_k): the verify rows and the drafter's rows
  // come back as their top_k largest logits instead of n_vocab each, verified by spec/verify.h's
  // top-candidate rules (the same tokens and random numbers as the dense ones). The drafter's
  // sampler has the same filters (draft_sampling drops only penalties), so the same K serves it.
  const int K = opt.device_top_k && !greedy ? sampler.top_candidates(kMaxDeviceTopK) : 0;

  // Prefill; every chunk's features go to the drafter.
  const double t0 = now_seconds();
  const int chunk = std::max(1, std::min(opt.prefill_chunk, model_.options().max_batch_rows));
  for (size_t i0 = 0; i0 < prompt.size(); i0 += size_t(chunk)) {
    const size_t n = std::min(prompt.size() - i0, size_t(chunk));
    batch_.clear();
    for (size_t i = 0; i < n; ++i) batch_.add(seq_, int(i0 + i), prompt[i0 + i], i0 + i + 1 == prompt.size());
    model_.forward(batch_, *state_, out_);
    drafts_.on_target_rows(int(n));
  }
  std::vector<float> last(out_.logits.begin(), out_.logits.end());
  const double t1 = now_seconds();
  st.prefill_seconds = t1 - t0;
  st.finish_reason = "length";

  // Emits one token; false when generation must end (eog, callback, max_tokens).
  bool done = false;
  double t_first = t1;
  auto emit = [&](int32_t tok) {
    sampler.accept(tok);
    if (st.generated_tokens++ == 0) t_first = now_seconds();
    const bool eog = opt.stop_at_eog && tok_ && tok_->is_eog(tok);
    if (!on_token(tok)) {
      st.finish_reason = "callback";
      done = true;
    } else if (eog) {
      st.finish_reason = "stop";
      done = true;
    } else if (st.generated_tokens >= opt.max_new_tokens) {
      done = true;
    }
    return !done;
  };

  int32_t anchor = sampler.sample(last);
  if (opt.max_new_tokens <= 0) return st;
  emit(anchor);
  std::vector<float> draft_logits, draft_top_logits;
  std::vector<int32_t> drafts, draft_top_ids;
  std::vector<std::vector<float>> qs;
  std::vector<spec::SparseDist> qs_top;
  while (!done) {
    if (state_->get(seq_).n_past + 1 > state_->max_tokens_per_seq()) {
      st.finish_reason = "length";
      break;
    }
    const double s0 = now_seconds();
    const StepTimer timer(model_.backend());
    const int n = drafts_this_step(opt.max_new_tokens - st.generated_tokens);
    drafts.resize(size_t(n));
    qs.clear();  // empty: point proposals (walk_block)
    qs_top.clear();
    // The drafter's argmax stays on the device (ids_dev_): the verify reads it there.
    const bool device_drafts = n > 0 && (greedy || argmax_drafts_);
    if (device_drafts) {
      drafts_.propose_greedy_to(anchor, n, n_sampleable, model_.backend(), ids_dev_);
    } else if (n > 0 && K > 0) {
      drafts_.propose_top(anchor, n, K, n_sampleable, draft_top_ids, draft_top_logits);
      spec::choose_drafts_top(spec::TopRows{draft_top_ids, draft_top_logits, size_t(K)}, greedy, draft_sampler, rng,
                              drafts, qs_top);
    } else if (n > 0) {
      drafts_.propose(anchor, n, draft_logits);
      spec::choose_drafts(draft_logits, V, n_sampleable, greedy, draft_sampler, rng, drafts, qs);
    }
    batch_.clear();
    const int p0 = state_->get(seq_).n_past;
    if (n == 0) {  // a plain step: no checkpoints, nothing to commit
      batch_.add(seq_, p0, anchor, true);
    } else if (device_drafts) {
      batch_.add_speculative(seq_, p0, anchor);
      batch_.add_speculative_from(seq_, p0 + 1, ids_dev_, n);
    } else {
      batch_.add_speculative(seq_, p0, anchor);
      for (int i = 0; i < n; ++i) batch_.add_speculative(seq_, p0 + 1 + i, drafts[size_t(i)]);
    }
    const size_t B1 = size_t(drafts_.block_size()) - 1;  // the verify's ids follow the drafts in ids_dev_
    out_.greedy_only = argmax_only ? n_sampleable : 0;
    out_.greedy_to = argmax_only ? ids_dev_ + B1 : nullptr;
    out_.top_k_only = K;
    out_.top_k_limit = n_sampleable;
    model_.forward(batch_, *state_, out_);
    out_.greedy_only = 0;
    out_.greedy_to = nullptr;
    out_.top_k_only = 0;
    // The step's one wait: the drafts and the verify's ids come down together (a sampled step's
    // verify rows came down in the forward; its drafts follow, the device idle by then).
    const size_t rows = size_t(n) + 1;
    if (argmax_only) {
      const size_t from = device_drafts ? 0 : B1;
      model_.backend().download(ids_host_.data() + from, ids_dev_ + from, (B1 + rows - from) * sizeof(int32_t));
      out_.greedy.assign(ids_host_.begin() + long(B1), ids_host_.begin() + long(B1 + rows));
    } else if (device_drafts) {
      model_.backend().download(ids_host_.data(), ids_dev_, size_t(n) * sizeof(int32_t));
    }
    if (device_drafts) std::copy(ids_host_.begin(), ids_host_.begin() + n, drafts.begin());
    const spec::TopRows target_top{out_.top_ids, out_.top_logits, size_t(K)};
    auto on_accept = [&](int32_t d) {
      st.accepted_tokens++;
      return emit(d);
    };
    const spec::BlockWalk w =
        argmax_only ? spec::walk_block_greedy(out_.greedy, drafts, on_accept)
        : K > 0     ? spec::walk_block_top(target_top, drafts, qs_top, greedy, sampler, rng, on_accept)
                    : spec::walk_block(out_.logits, V, drafts, qs, greedy, sampler, rng, on_accept);
    const int kept = w.kept;
    {
      StepScope step(model_.backend());  // the rollback copies and the drafter's ingest: one graph
      if (n > 0) {
        model_.commit(*state_, seq_, kept);
        drafts_.on_verified_rows(0, kept);
      } else {
        drafts_.on_target_rows(kept);
      }
    }
    if (n > 0) {
      st.draft_steps++;
      st.drafted_tokens += n;
    } else {
      st.plain_steps++;
    }
    const double step_seconds = now_seconds() - s0;
    st.steps.push_back({n, kept, float(step_seconds * 1e3)});
    policy_.record(step_seconds, kept, n, timer.representative());
    if (done) break;
    if (w.next)
      anchor = *w.next;
    else if (K > 0)
      anchor = sampler.sample_top(target_top.ids_of(size_t(w.next_row)), target_top.logits_of(size_t(w.next_row)));
    else
      anchor = sampler.sample(std::span<const float>(out_.logits).subspan(size_t(w.next_row) * V, V));
    emit(anchor);
  }
  st.decode_seconds = now_seconds() - t_first;
  return st;
}

}  // namespace df
