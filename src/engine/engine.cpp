#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <span>

#include "spec/draft_source.h"
#include "spec/verify.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace df {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

class Engine::Ticket {
 public:
  explicit Ticket(GenerationRequest r) : req(std::move(r)), submitted(now_seconds()) {}
  GenerationRequest req;
  double submitted;
  std::atomic<bool> cancelled{false};
};

// The request being generated: its sampler, decoder and progress.
struct Engine::Active {
  std::shared_ptr<Ticket> ticket;
  Sampler sampler;
  StreamDecoder decoder;
  size_t prefilled = 0;  // prompt tokens fed so far
  std::deque<int32_t> forced;
  // Speculation: a token the last verify chose (a residual draw when sampling) that the next
  // step commits before anything else; the draft proposal sampler and the acceptance draws.
  std::optional<int32_t> next;
  Sampler draft_sampler;
  std::mt19937_64 rng;
  GenerationResult result;
  double started = 0, first_token = 0, last_token = 0;
  Active(std::shared_ptr<Ticket> t, int n_sampleable, const Tokenizer& tok)
      : ticket(std::move(t)),
        sampler(ticket->req.sampling, n_sampleable),
        decoder(tok),
        draft_sampler(spec::draft_sampling(ticket->req.sampling), n_sampleable),
        rng(ticket->req.sampling.seed ^ 0x5bd1e995u) {}
};

Engine::Engine(TargetModel& model, const Tokenizer& tok, const EngineOptions& opt, DraftSource* drafts)
    : model_(model), tok_(tok), opt_(opt), drafts_(drafts), policy_(opt.spec) {
  if (opt_.ctx < 2) fail("context of {} tokens is too small", opt_.ctx);
  opt_.prefill_chunk = std::clamp(opt_.prefill_chunk, 1, model_.options().max_batch_rows);
  state_ = model_.make_state(1, opt_.ctx, drafts_ ? drafts_->block_size() : 0);
  seq_ = state_->create();
  worker_ = std::thread([this] { worker_loop(); });
}

Engine::~Engine() {
  shutdown();
  worker_.join();
}

void Engine::shutdown() {
  std::deque<std::shared_ptr<Ticket>> left;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
    left.swap(queue_);
  }
  cv_.notify_all();
  for (auto& t : left) {
    GenerationResult r;
    r.finish = FinishReason::Cancelled;
    r.prompt_tokens = int(t->req.prompt.size());
    notify_done(t->req, r);
  }
}

std::shared_ptr<Engine::Ticket> Engine::submit(GenerationRequest req) {
  if (req.prompt.empty()) fail("empty prompt");
  auto t = std::make_shared<Ticket>(std::move(req));
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_ || int(queue_.size()) >= opt_.max_queue) return nullptr;
    queue_.push_back(t);
  }
  cv_.notify_all();
  return t;
}

void Engine::cancel(const std::shared_ptr<Ticket>& t) {
  if (!t) return;
  t->cancelled = true;
  bool removed = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = std::find(queue_.begin(), queue_.end(), t);
    if (it != queue_.end()) {
      queue_.erase(it);
      removed = true;
    }
  }
  if (removed) {
    GenerationResult r;
    r.finish = FinishReason::Cancelled;
    r.prompt_tokens = int(t->req.prompt.size());
    r.queue_seconds = now_seconds() - t->submitted;
    notify_done(t->req, r);
  }
}

int Engine::waiting() const {
  std::lock_guard<std::mutex> lk(mu_);
  return int(queue_.size());
}

void Engine::worker_loop() {
  for (;;) {
    std::shared_ptr<Ticket> next;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      next = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    start(next);
    while (active_) {
      bool stop_now;
      {
        std::lock_guard<std::mutex> lk(mu_);
        stop_now = stopping_;
      }
      if (stop_now) {
        finish(FinishReason::Cancelled);
        break;
      }
      step();
    }
    busy_ = false;
  }
}

void Engine::start(const std::shared_ptr<Ticket>& t) {
  const int n_sampleable = std::min(model_.hparams().n_vocab, tok_.n_vocab());
  active_ = std::make_unique<Active>(t, n_sampleable, tok_);
  Active& a = *active_;
  a.started = now_seconds();
  a.result.prompt_tokens = int(t->req.prompt.size());
  a.result.queue_seconds = a.started - t->submitted;
  a.forced.assign(t->req.forced_prefix.begin(), t->req.forced_prefix.end());
  for (int32_t tok : t->req.prompt) a.sampler.accept(tok);
  state_->reset(seq_);
  if (drafts_) {
    drafts_->reset();
    policy_.reset();
  }
}

bool Engine::step() {
  Active& a = *active_;
  if (a.ticket->cancelled) {
    finish(FinishReason::Cancelled);
    return false;
  }
  try {
    if (a.prefilled < a.ticket->req.prompt.size()) {
      prefill_step();
      return true;
    }
    return decode_step();
  } catch (const std::exception& e) {
    finish(FinishReason::Error, e.what());
    return false;
  }
}

void Engine::prefill_step() {
  Active& a = *active_;
  const std::vector<int32_t>& prompt = a.ticket->req.prompt;
  const size_t n = std::min(prompt.size() - a.prefilled, size_t(opt_.prefill_chunk));
  const int start = state_->get(seq_).n_past;
  batch_.clear();
  for (size_t i = 0; i < n; ++i) {
    const size_t k = a.prefilled + i;
    batch_.add(seq_, start + int(i), prompt[k], k + 1 == prompt.size());
  }
  model_.forward(batch_, *state_, out_);
  if (drafts_) drafts_->on_target_rows(int(n));
  a.prefilled += n;
  if (a.prefilled == prompt.size()) logits_.assign(out_.logits.begin(), out_.logits.end());
}

// One decode step: commit the next token (forced, chosen by the last verify, or sampled), then
// either feed it alone for the next logits, or draft after it and verify the block in one
// forward, committing every accepted draft (speculate).
bool Engine::decode_step() {
  Active& a = *active_;
  int32_t token;
  bool forced = false;
  if (!a.forced.empty()) {
    token = a.forced.front();
    a.forced.pop_front();
    forced = true;
  } else if (a.next) {
    token = *a.next;
    a.next.reset();
  } else {
    token = a.sampler.sample(logits_);
  }
  if (!commit(token, forced)) return false;
  const double t0 = now_seconds();
  int n = 0;
  if (drafts_ && active_->forced.empty()) {  // forced tokens come next: no drafting past them
    const int left = a.ticket->req.max_tokens - a.result.generated_tokens;
    n = std::min({policy_.drafts(drafts_->block_size()), left - 1, opt_.ctx - state_->get(seq_).n_past - 2});
  }
  if (n > 0) return speculate(token, n);
  batch_.clear();
  batch_.add(seq_, state_->get(seq_).n_past, token, true);
  if (argmax_only(a)) {  // the next token is this row's argmax: no logits download
    out_.greedy_only = a.sampler.n_sampleable();
    model_.forward(batch_, *state_, out_);
    out_.greedy_only = 0;
    a.next = out_.greedy[0];
  } else {
    model_.forward(batch_, *state_, out_);
    logits_.assign(out_.logits.begin(), out_.logits.end());
  }
  if (drafts_) {
    drafts_->on_target_rows(1);
    policy_.record(now_seconds() - t0, 1, 0);
  }
  return true;
}

// Verifies [anchor, d1..dn] in one forward and walks the rows in order: row i's logits decide
// the token after row i (greedy: the sampler's choice must equal the draft; sampling: the
// lossless rejection rule). Kept rows are committed (rollback by checkpoint copy); logits_ ends
// as the logits after the last kept row, so the next step samples (or takes a.next) from them.
bool Engine::speculate(int32_t anchor, int n) {
  Active& a = *active_;
  const double t0 = now_seconds();
  const size_t V = size_t(model_.hparams().n_vocab);
  const int n_sampleable = std::min(model_.hparams().n_vocab, tok_.n_vocab());
  const bool greedy = a.ticket->req.sampling.temperature <= 0;
  const bool ids_only = argmax_only(a);
  drafts_buf_.resize(size_t(n));
  if (greedy) {
    drafts_->propose_greedy(anchor, n, n_sampleable, drafts_buf_);
  } else {
    drafts_->propose(anchor, n, draft_logits_);
    spec::choose_drafts(draft_logits_, V, n_sampleable, greedy, a.draft_sampler, a.rng, drafts_buf_, qs_);
  }
  batch_.clear();
  const int p0 = state_->get(seq_).n_past;
  batch_.add_speculative(seq_, p0, anchor);
  for (int i = 0; i < n; ++i) batch_.add_speculative(seq_, p0 + 1 + i, drafts_buf_[size_t(i)]);
  out_.greedy_only = ids_only ? n_sampleable : 0;
  model_.forward(batch_, *state_, out_);
  out_.greedy_only = 0;
  a.result.draft_steps++;
  a.result.drafted_tokens += n;
  bool finished = false;
  int row = 0;  // the row whose logits predicted the draft being committed (for its logprobs)
  auto on_accept = [&](int32_t d) {
    if (!ids_only)
      logits_.assign(out_.logits.begin() + long(size_t(row) * V), out_.logits.begin() + long(size_t(row + 1) * V));
    ++row;
    a.result.accepted_tokens++;
    if (!commit(d, false)) {  // finished: active_ is gone, the sequence state no longer matters
      finished = true;
      return false;
    }
    return active_->forced.empty();  // forced tokens (reasoning budget) come next
  };
  const spec::BlockWalk w = ids_only ? spec::walk_block_greedy(out_.greedy, drafts_buf_, on_accept)
                                     : spec::walk_block(out_.logits, V, drafts_buf_, qs_, greedy, a.sampler, a.rng, on_accept);
  if (finished) return false;
  // The next step commits w.next, or samples from these logits (bonus, or after a stop).
  if (!ids_only)
    logits_.assign(out_.logits.begin() + long(size_t(w.next_row) * V),
                   out_.logits.begin() + long(size_t(w.next_row + 1) * V));
  a.next = w.next;
  model_.commit(*state_, seq_, w.kept);
  drafts_->on_target_rows(w.kept);
  policy_.record(now_seconds() - t0, w.kept, n);
  return true;
}

bool Engine::argmax_only(const Active& a) const {
  return a.sampler.plain_greedy() && a.ticket->req.top_logprobs < 0;
}

bool Engine::commit(int32_t token, bool forced) {
  Active& a = *active_;
  const GenerationRequest& req = a.ticket->req;
  a.sampler.accept(token);
  const double now = now_seconds();
  if (a.result.generated_tokens == 0) a.first_token = now;
  a.last_token = now;
  a.result.generated_tokens++;

  TokenEvent ev;
  ev.id = token;
  ev.forced = forced;
  ev.eog = tok_.is_eog(token);
  if (!ev.eog) ev.text = a.decoder.push(token);
  TokenLogprobs lp;
  if (req.top_logprobs >= 0) {
    lp = compute_logprobs(logits_, std::min(model_.hparams().n_vocab, tok_.n_vocab()), token, req.top_logprobs);
    ev.logprobs = &lp;
  }
  TokenDecision d;
  if (req.on_token) {
    try {
      d = req.on_token(ev);
    } catch (const std::exception& e) {
      finish(FinishReason::Error, std::string("while handling a token: ") + e.what());
      return false;
    }
  }
  for (int32_t f : d.force) a.forced.push_back(f);

  if (ev.eog) {
    finish(FinishReason::Eog);
    return false;
  }
  if (d.stop) {
    finish(FinishReason::Stopped);
    return false;
  }
  if (a.result.generated_tokens >= req.max_tokens || state_->get(seq_).n_past + 1 > opt_.ctx) {
    finish(FinishReason::Length);
    return false;
  }
  return true;
}

void Engine::finish(FinishReason why, std::string error) {
  std::unique_ptr<Active> a = std::move(active_);
  GenerationResult& r = a->result;
  r.finish = why;
  r.error = std::move(error);
  r.tail_text = why == FinishReason::Eog || why == FinishReason::Length ? a->decoder.flush() : std::string();
  if (r.generated_tokens > 0) {
    r.ttft_seconds = a->first_token - a->ticket->submitted;
    r.decode_seconds = a->last_token - a->first_token;
  }
  state_->reset(seq_);  // frees the KV blocks and clears the recurrent slot now
  notify_done(a->ticket->req, r);
}

void Engine::notify_done(const GenerationRequest& req, const GenerationResult& r) {
  if (!req.on_done) return;
  try {
    req.on_done(r);
  } catch (const std::exception& e) {
    // The request is over either way; the engine must keep serving the others.
    std::fprintf(stderr, "engine: request completion handler failed: %s\n", e.what());
  }
}

}  // namespace df
