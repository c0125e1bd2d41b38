#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

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
  GenerationResult result;
  double started = 0, first_token = 0, last_token = 0;
  Active(std::shared_ptr<Ticket> t, int n_sampleable, const Tokenizer& tok)
      : ticket(std::move(t)), sampler(ticket->req.sampling, n_sampleable), decoder(tok) {}
};

Engine::Engine(TargetModel& model, const Tokenizer& tok, const EngineOptions& opt)
    : model_(model), tok_(tok), opt_(opt) {
  if (opt_.ctx < 2) fail("context of {} tokens is too small", opt_.ctx);
  opt_.prefill_chunk = std::clamp(opt_.prefill_chunk, 1, model_.options().max_batch_rows);
  state_ = model_.make_state(1, opt_.ctx);
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
  a.prefilled += n;
  if (a.prefilled == prompt.size()) logits_.assign(out_.logits.begin(), out_.logits.end());
}

// One decode step: pick the tokens to commit (one sampled or forced token today; a verified
// speculative block later), report each, then feed the last one to get the next logits.
bool Engine::decode_step() {
  Active& a = *active_;
  // The tokens this step commits, in order. Today one: forced or sampled. A speculative step
  // will put the accepted draft tokens (+ the bonus token) here after verifying them.
  struct Commit {
    int32_t token;
    bool forced;
  };
  std::vector<Commit> commits;
  if (!a.forced.empty()) {
    commits.push_back({a.forced.front(), true});
    a.forced.pop_front();
  } else {
    commits.push_back({a.sampler.sample(logits_), false});
  }
  for (const Commit& c : commits)
    if (!commit(c.token, c.forced)) return false;
  // Feed the last committed token; its logits choose the next step's tokens.
  batch_.clear();
  batch_.add(seq_, state_->get(seq_).n_past, commits.back().token, true);
  model_.forward(batch_, *state_, out_);
  logits_.assign(out_.logits.begin(), out_.logits.end());
  return true;
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
