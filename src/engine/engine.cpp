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
  int slot = -1, seq = -1;    // its slot, and the slot's sequence in the engine's state
  DraftSource* drafts = nullptr;  // the slot's draft source (none: no speculation)
  SpecPolicy policy;
  std::vector<float> logits;  // logits for its next token (empty when the last step returned an argmax id)
  // Or the top candidates for it (when the last step returned top-k: ForwardOutput::top_k_only).
  std::vector<int32_t> top_ids;
  std::vector<float> top_logits;
  // The block being verified: its drafts and their proposal distributions (sampling).
  std::vector<int32_t> drafts_buf;
  std::vector<std::vector<float>> qs;
  std::vector<spec::SparseDist> qs_top;  // the same, when the drafts came from top candidates
  Active(std::shared_ptr<Ticket> t, int n_sampleable, const Tokenizer& tok, const SpecOptions& spec,
         SpecCosts& costs)
      : ticket(std::move(t)),
        sampler(ticket->req.sampling, n_sampleable),
        decoder(tok),
        draft_sampler(spec::draft_sampling(ticket->req.sampling), n_sampleable),
        rng(ticket->req.sampling.seed ^ 0x5bd1e995u),
        policy(spec, costs) {}
};

Engine::Engine(TargetModel& model, const Tokenizer& tok, const EngineOptions& opt, DraftSource* drafts)
    : Engine(model, tok, opt, drafts ? std::vector<DraftSource*>{drafts} : std::vector<DraftSource*>{}) {}

Engine::Engine(TargetModel& model, const Tokenizer& tok, const EngineOptions& opt, std::vector<DraftSource*> drafts)
    : model_(model), tok_(tok), opt_(opt), drafts_(std::move(drafts)), step_timer_(model.backend()) {
  if (opt_.ctx < 2) fail("context of {} tokens is too small", opt_.ctx);
  for (DraftSource* d : drafts_)
    if (d == nullptr || d->block_size() != drafts_.front()->block_size()) fail("engine: draft sources must share one block size");
  opt_.prefill_chunk = std::clamp(opt_.prefill_chunk, 1, model_.options().max_batch_rows);
  opt_.parallel = drafts_.empty() ? std::clamp(opt_.parallel, 1, model_.options().max_batch_rows) : int(drafts_.size());
  if (opt_.parallel > model_.options().max_batch_rows) fail("engine: more draft sources than batch rows");
  state_ = model_.make_state(opt_.parallel, opt_.ctx, drafts_.empty() ? 0 : drafts_.front()->block_size());
  draft_ids_ = drafts_.empty() ? 0 : size_t(opt_.parallel) * size_t(drafts_.front()->block_size() - 1);
  ids_host_.resize(draft_ids_ + size_t(model_.options().max_batch_rows));
  ids_dev_ = static_cast<int32_t*>(model_.backend().alloc(ids_host_.size() * sizeof(int32_t)));
  for (int i = 0; i < opt_.parallel; ++i) {
    seqs_.push_back(state_->create());
    free_slots_.push_back(opt_.parallel - 1 - i);  // slot 0 first
  }
  worker_ = std::thread([this] { worker_loop(); });
}

Engine::~Engine() {
  shutdown();
  worker_.join();
  model_.backend().release(ids_dev_);
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
    std::vector<std::shared_ptr<Ticket>> admitted;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty() || !actives_.empty(); });
      if (stopping_) break;
      while (!queue_.empty() && int(actives_.size() + admitted.size()) < opt_.parallel) {
        admitted.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    for (auto& t : admitted) start(t);
    running_ = int(actives_.size());
    step_all();
    running_ = int(actives_.size());
  }
  while (!actives_.empty()) finish(*actives_.front(), FinishReason::Cancelled);
  running_ = 0;
}

void Engine::start(const std::shared_ptr<Ticket>& t) {
  const int n_sampleable = std::min(model_.hparams().n_vocab, tok_.n_vocab());
  actives_.push_back(std::make_unique<Active>(t, n_sampleable, tok_, opt_.spec, spec_costs_));
  Active& a = *actives_.back();
  a.slot = free_slots_.back();
  free_slots_.pop_back();
  a.seq = seqs_[size_t(a.slot)];
  a.drafts = drafts_.empty() ? nullptr : drafts_[size_t(a.slot)];
  a.started = now_seconds();
  a.result.prompt_tokens = int(t->req.prompt.size());
  a.result.queue_seconds = a.started - t->submitted;
  a.forced.assign(t->req.forced_prefix.begin(), t->req.forced_prefix.end());
  for (int32_t tok : t->req.prompt) a.sampler.accept(tok);
  state_->reset(a.seq);
  if (a.drafts) a.drafts->reset();
}

void Engine::step_all() {
  for (size_t i = 0; i < actives_.size();) {
    if (actives_[i]->ticket->cancelled)
      finish(*actives_[i], FinishReason::Cancelled);  // removes it
    else
      ++i;
  }
  if (actives_.size() == 1) {
    step_one(*actives_.front());
  } else if (actives_.size() > 1) {
    step_batched();
  }
}

void Engine::step_one(Active& a) {
  try {
    if (a.prefilled < a.ticket->req.prompt.size()) {
      batch_.clear();
      parts_.clear();
      add_prefill_chunk(a, model_.options().max_batch_rows);
      run_parts();
    } else {
      decode_step(a);
    }
  } catch (const std::exception& e) {
    if (is_active(a)) finish(a, FinishReason::Error, e.what());
  }
}

// Several requests in one forward: each decoding request commits its next token and adds one
// row for the logits after it, or, when its policy speculates, the token and a drafted block to
// verify; prefilling requests add prompt chunks with the rows left. The kernels compute every
// row as they would alone (batch-invariant), so a greedy request's decoded tokens do not depend
// on what it shares the step with (a sampling one's follow the same distribution). Its prompt's
// chunks do (the rows left), and a chunk's length picks its forms (chunked DeltaNet from 32 rows,
// the backend's prompt products from 128: TargetModel's forward), which agree to rounding.
void Engine::step_batched() {
  step_t0_ = now_seconds();
  step_timer_.restart();
  const bool spec_ok = !opt_.spec.adaptive || gate_.allow();
  batch_.clear();
  parts_.clear();
  decoding_.clear();
  for (auto& up : actives_)
    if (up->prefilled == up->ticket->req.prompt.size()) decoding_.push_back(up.get());
  for (Active* a : decoding_) {  // a snapshot: a commit that finishes a request removes it
    int32_t token;
    bool forced = false;
    try {
      forced = next_token(*a, token);
    } catch (const std::exception& e) {
      finish(*a, FinishReason::Error, e.what());
      continue;
    }
    if (!commit(*a, token, forced)) continue;  // finished: a is gone
    try {
      const int n = spec_ok ? draft_count(*a, model_.options().max_batch_rows - int(batch_.rows.size()) - 1) : 0;
      if (n > 0) add_spec_part(*a, token, n);
      else add_decode_row(*a, token);
    } catch (const std::exception& e) {  // the drafter failed: this request only
      finish(*a, FinishReason::Error, e.what());
    }
  }
  int budget = model_.options().max_batch_rows - int(batch_.rows.size());
  for (auto& up : actives_)
    if (up->prefilled < up->ticket->req.prompt.size() && budget > 0) budget -= add_prefill_chunk(*up, budget);
  const bool prefilling = std::any_of(parts_.begin(), parts_.end(), [](const Part& p) { return p.prefill; });
  const bool speculating = std::any_of(parts_.begin(), parts_.end(), [](const Part& p) { return p.drafted > 0; });
  const bool ok = run_parts();
  // Steps with prompt chunks are left out of the gate's measurements: their time is not decode's.
  if (ok && !prefilling && !drafts_.empty()) gate_.record(speculating, now_seconds() - step_t0_, step_committed_, step_timer_.representative());
}

void Engine::add_decode_row(Active& a, int32_t token) {
  batch_.add(a.seq, state_->get(a.seq).n_past, token, true);
  parts_.push_back({&a, 1, false, true});
}

int Engine::add_prefill_chunk(Active& a, int max_rows) {
  const std::vector<int32_t>& prompt = a.ticket->req.prompt;
  const size_t n = std::min({prompt.size() - a.prefilled, size_t(opt_.prefill_chunk), size_t(max_rows)});
  const int start = state_->get(a.seq).n_past;
  for (size_t i = 0; i < n; ++i) {
    const size_t k = a.prefilled + i;
    batch_.add(a.seq, start + int(i), prompt[k], k + 1 == prompt.size());
  }
  parts_.push_back({&a, n, true, a.prefilled + n == prompt.size()});
  return int(n);
}

bool Engine::run_parts() {
  step_committed_ = 0;
  if (parts_.empty()) return true;
  const size_t V = size_t(model_.hparams().n_vocab);
  const int n_sampleable = std::min(model_.hparams().n_vocab, tok_.n_vocab());
  bool ids = true;  // every row that wants logits needs only its argmax: no logits download
  for (const Part& p : parts_) ids = ids && (!p.logits || argmax_only(*p.a));
  // Otherwise, when every such row can sample from top candidates (verify blocks too: their
  // rules run on them, spec/verify.h), the step downloads the top K of each, K the most any
  // row needs.
  int top_k = 0;
  if (!ids) {
    for (const Part& p : parts_) {
      if (!p.logits) continue;
      const int need = top_k_needed(*p.a);
      if (need == 0) {
        top_k = 0;
        break;
      }
      top_k = std::max(top_k, need);
    }
  }
  out_.greedy_only = ids ? n_sampleable : 0;
  out_.greedy_to = ids ? ids_dev_ + draft_ids_ : nullptr;
  out_.top_k_only = std::min(top_k, n_sampleable);
  out_.top_k_limit = n_sampleable;
  const size_t K = size_t(out_.top_k_only);
  try {
    model_.forward(batch_, *state_, out_);
    fetch_ids(ids);
  } catch (const std::exception& e) {
    out_.greedy_only = 0;
    out_.greedy_to = nullptr;
    out_.top_k_only = 0;
    for (const Part& p : parts_)
      if (is_active(*p.a)) finish(*p.a, FinishReason::Error, e.what());
    return false;
  }
  out_.greedy_only = 0;
  out_.greedy_to = nullptr;
  out_.top_k_only = 0;
  size_t li = 0, row = 0;  // logit row, batch row
  for (const Part& p : parts_) {
    const size_t li0 = li, row0 = row;
    row += p.rows;
    if (p.logits) li += p.drafted > 0 ? p.rows : 1;
    if (p.drafted > 0) {  // may finish the request
      finish_spec_part(*p.a, li0, int(row0), p.drafted, ids, K);
      continue;
    }
    // The request's drafter keeps its context, also while it shares plain steps.
    if (p.a->drafts) p.a->drafts->on_target_rows_from(int(row0), int(p.rows));
    if (p.prefill) p.a->prefilled += p.rows;
    if (!p.logits) continue;
    if (!p.prefill) ++step_committed_;
    // A plain decode step's cost, for the policy's comparison with its speculative ones (both
    // the whole step, shared or not).
    if (!p.prefill && p.a->drafts) p.a->policy.record(now_seconds() - step_t0_, 1, 0, step_timer_.representative());
    p.a->top_ids.clear();
    p.a->top_logits.clear();
    if (ids) {
      p.a->next = out_.greedy[li0];
      p.a->logits.clear();
    } else if (K > 0) {
      p.a->top_ids.assign(out_.top_ids.begin() + long(li0 * K), out_.top_ids.begin() + long((li0 + 1) * K));
      p.a->top_logits.assign(out_.top_logits.begin() + long(li0 * K), out_.top_logits.begin() + long((li0 + 1) * K));
      p.a->logits.clear();
    } else {
      p.a->logits.assign(out_.logits.begin() + long(li0 * V), out_.logits.begin() + long((li0 + 1) * V));
    }
  }
  return true;
}

void Engine::fetch_ids(bool ids) {
  const bool drafts = std::any_of(parts_.begin(), parts_.end(), [](const Part& p) { return p.device_drafts; });
  if (!ids && !drafts) return;
  const size_t D = draft_ids_, n_ids = ids ? out_.logit_rows.size() : 0;
  const size_t from = drafts ? 0 : D;
  model_.backend().download(ids_host_.data() + from, ids_dev_ + from, (D + n_ids - from) * sizeof(int32_t));
  if (ids) out_.greedy.assign(ids_host_.begin() + long(D), ids_host_.begin() + long(D + n_ids));
  const size_t B1 = drafts_.empty() ? 0 : size_t(drafts_.front()->block_size() - 1);
  for (const Part& p : parts_)
    if (p.device_drafts) {
      const auto first = ids_host_.begin() + long(size_t(p.a->slot) * B1);
      std::copy(first, first + p.drafted, p.a->drafts_buf.begin());
    }
}

bool Engine::next_token(Active& a, int32_t& token) {
  if (!a.forced.empty()) {
    token = a.forced.front();
    a.forced.pop_front();
    return true;
  }
  if (a.next) {
    token = *a.next;
    a.next.reset();
  } else if (!a.top_ids.empty()) {
    token = a.sampler.sample_top(a.top_ids, a.top_logits);
  } else {
    token = a.sampler.sample(a.logits);
  }
  return false;
}

bool Engine::is_active(const Active& a) const {
  return std::any_of(actives_.begin(), actives_.end(), [&](const auto& up) { return up.get() == &a; });
}

// One decode step: commit the next token (forced, chosen by the last verify, or sampled), then
// either feed it alone for the next logits, or draft after it and verify the block in one
// forward, committing every accepted draft.
bool Engine::decode_step(Active& a) {
  int32_t token;
  const bool forced = next_token(a, token);
  if (!commit(a, token, forced)) return false;
  step_t0_ = now_seconds();
  step_timer_.restart();
  const int n = draft_count(a, model_.options().max_batch_rows - 1);
  batch_.clear();
  parts_.clear();
  if (n > 0) add_spec_part(a, token, n);
  else add_decode_row(a, token);
  return run_parts() && is_active(a);  // false: failed or finished (a is gone)
}

int Engine::draft_count(const Active& a, int rows_left) const {
  if (!a.drafts || !a.forced.empty()) return 0;  // forced tokens come next: no drafting past them
  const int left = a.ticket->req.max_tokens - a.result.generated_tokens;
  const int n = std::min({a.policy.drafts(a.drafts->block_size()), left - 1,
                          opt_.ctx - state_->get(a.seq).n_past - 2, rows_left});
  return std::max(n, 0);
}

void Engine::add_spec_part(Active& a, int32_t anchor, int n) {
  const size_t V = size_t(model_.hparams().n_vocab);
  const int n_sampleable = std::min(model_.hparams().n_vocab, tok_.n_vocab());
  a.drafts_buf.resize(size_t(n));
  a.qs.clear();  // empty: point proposals (walk_block)
  a.qs_top.clear();
  const int k = top_k_needed(a);
  const int p0 = state_->get(a.seq).n_past;
  if (a.ticket->req.sampling.temperature <= 0 || opt_.spec.argmax_drafts) {
    // The drafter's argmax stays on the device, in the slot's ids: the verify rows read it there
    // and fetch_ids brings it to drafts_buf after the forward.
    int32_t* ids = ids_dev_ + size_t(a.slot) * size_t(a.drafts->block_size() - 1);
    a.drafts->propose_greedy_to(anchor, n, n_sampleable, model_.backend(), ids);
    batch_.add_speculative(a.seq, p0, anchor);
    batch_.add_speculative_from(a.seq, p0 + 1, ids, n);
    parts_.push_back({&a, size_t(n) + 1, false, true, n, true});
    return;
  } else if (k > 0) {  // drafts from the drafter's top candidates (the step may still verify on full logits)
    a.drafts->propose_top(anchor, n, k, n_sampleable, draft_top_ids_, draft_top_logits_);
    spec::choose_drafts_top(spec::TopRows{draft_top_ids_, draft_top_logits_, size_t(k)}, false, a.draft_sampler, a.rng,
                            a.drafts_buf, a.qs_top);
  } else {
    a.drafts->propose(anchor, n, draft_logits_);
    spec::choose_drafts(draft_logits_, V, n_sampleable, false, a.draft_sampler, a.rng, a.drafts_buf, a.qs);
  }
  batch_.add_speculative(a.seq, p0, anchor);
  for (int i = 0; i < n; ++i) batch_.add_speculative(a.seq, p0 + 1 + i, a.drafts_buf[size_t(i)]);
  parts_.push_back({&a, size_t(n) + 1, false, true, n});
}

// Walks the rows of a verified block [anchor, d1..dn] in order: row i's logits decide the token
// after row i (greedy: the sampler's choice must equal the draft; sampling: the lossless
// rejection rule). Kept rows are committed (their delta rule replayed); a.logits ends as the
// logits after the last kept row, so the next step samples (or takes a.next) from them.
void Engine::finish_spec_part(Active& a, size_t li0, int row0, int n, bool ids, size_t K) {
  const size_t V = size_t(model_.hparams().n_vocab);
  const bool greedy = a.ticket->req.sampling.temperature <= 0;
  a.top_ids.clear();
  a.top_logits.clear();
  const bool dense = !ids && K == 0;  // full logits came back
  a.result.draft_steps++;
  a.result.drafted_tokens += n;
  bool finished = false;
  size_t row = li0;  // the logit row that predicted the draft being committed (for its logprobs)
  ++step_committed_;  // the anchor
  auto on_accept = [&](int32_t d) {
    if (dense) a.logits.assign(out_.logits.begin() + long(row * V), out_.logits.begin() + long((row + 1) * V));
    ++row;
    ++step_committed_;
    a.result.accepted_tokens++;
    if (!commit(a, d, false)) {  // finished: a is gone, the sequence state no longer matters
      finished = true;
      return false;
    }
    return a.forced.empty();  // forced tokens (reasoning budget) come next
  };
  const size_t rows = size_t(n) + 1;
  const spec::TopRows top{std::span<const int32_t>(out_.top_ids).subspan(li0 * K, rows * K),
                          std::span<const float>(out_.top_logits).subspan(li0 * K, rows * K), K};
  if (dense && !a.qs_top.empty()) {  // drafts from top candidates, verified on full logits: q in full
    for (const spec::SparseDist& q : a.qs_top) {
      a.qs.emplace_back(V, 0.0f);
      for (size_t j = 0; j < q.ids.size(); ++j) a.qs.back()[size_t(q.ids[j])] = q.w[j];
    }
  }
  const spec::BlockWalk w =
      ids     ? spec::walk_block_greedy(std::span<const int32_t>(out_.greedy).subspan(li0, rows), a.drafts_buf, on_accept)
      : K > 0 ? spec::walk_block_top(top, a.drafts_buf, a.qs_top, greedy, a.sampler, a.rng, on_accept)
              : spec::walk_block(std::span<const float>(out_.logits).subspan(li0 * V, rows * V), V, a.drafts_buf, a.qs,
                                 greedy, a.sampler, a.rng, on_accept);
  if (finished) return;
  // The next step commits w.next, or samples from this row (bonus, or after a stop).
  if (K > 0 && !ids) {
    a.top_ids.assign(top.ids_of(size_t(w.next_row)).begin(), top.ids_of(size_t(w.next_row)).end());
    a.top_logits.assign(top.logits_of(size_t(w.next_row)).begin(), top.logits_of(size_t(w.next_row)).end());
  } else if (dense) {
    a.logits.assign(out_.logits.begin() + long((li0 + size_t(w.next_row)) * V),
                    out_.logits.begin() + long((li0 + size_t(w.next_row) + 1) * V));
  }
  a.next = w.next;
  {
    StepScope step(model_.backend());  // the rollback copies and the drafter's ingest: one graph
    model_.commit(*state_, a.seq, w.kept);
    a.drafts->on_verified_rows(row0, w.kept);
  }
  a.policy.record(now_seconds() - step_t0_, w.kept, n, step_timer_.representative());
}

bool Engine::argmax_only(const Active& a) const {
  return a.sampler.plain_greedy() && a.ticket->req.top_logprobs < 0;
}

int Engine::top_k_needed(const Active& a) const {
  if (!opt_.device_top_k || a.ticket->req.top_logprobs >= 0) return 0;
  return a.sampler.top_candidates(kMaxDeviceTopK);
}

bool Engine::commit(Active& a, int32_t token, bool forced) {
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
    lp = compute_logprobs(a.logits, std::min(model_.hparams().n_vocab, tok_.n_vocab()), token, req.top_logprobs);
    ev.logprobs = &lp;
  }
  TokenDecision d;
  if (req.on_token) {
    try {
      d = req.on_token(ev);
    } catch (const std::exception& e) {
      finish(a, FinishReason::Error, std::string("while handling a token: ") + e.what());
      return false;
    }
  }
  for (int32_t f : d.force) a.forced.push_back(f);

  if (ev.eog) {
    finish(a, FinishReason::Eog);
    return false;
  }
  if (d.stop) {
    finish(a, FinishReason::Stopped);
    return false;
  }
  if (a.result.generated_tokens >= req.max_tokens || state_->get(a.seq).n_past + 1 > opt_.ctx) {
    finish(a, FinishReason::Length);
    return false;
  }
  return true;
}

void Engine::finish(Active& active, FinishReason why, std::string error) {
  const auto it = std::find_if(actives_.begin(), actives_.end(), [&](const auto& up) { return up.get() == &active; });
  if (it == actives_.end()) return;
  std::unique_ptr<Active> a = std::move(*it);
  actives_.erase(it);
  GenerationResult& r = a->result;
  r.finish = why;
  r.error = std::move(error);
  r.tail_text = why == FinishReason::Eog || why == FinishReason::Length ? a->decoder.flush() : std::string();
  if (r.generated_tokens > 0) {
    r.ttft_seconds = a->first_token - a->ticket->submitted;
    r.decode_seconds = a->last_token - a->first_token;
  }
  state_->reset(a->seq);  // frees the KV blocks and clears the recurrent slot now
  free_slots_.push_back(a->slot);
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
