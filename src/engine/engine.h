// The serving engine: requests wait in a bounded FIFO queue, one worker thread runs a step loop
// over the Batch API (chunked prefill, then decode), and every committed token reaches its
// request through a callback. Up to `parallel` requests generate together (continuous
// batching): each step is one forward with a row for every decoding request and prompt chunks
// of the prefilling ones, admitted from the queue as others finish. With draft sources (one per
// slot) every decoding request whose policy speculates adds its committed token and a drafted
// block to that same forward, verified there and walked, committed and rolled back on its own
// (several tokens a step; the callback is still called once per committed token); its
// drafter ingests its own rows of every step, plain or speculative.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/logprobs.h"
#include "engine/sampler.h"
#include "model/target_model.h"
#include "spec/batch_gate.h"
#include "spec/spec_policy.h"
#include "spec/warmup.h"

namespace df {

class Tokenizer;
class DraftSource;

struct EngineOptions {
  int ctx = 8192;          // tokens per sequence (prompt + generated)
  int max_queue = 64;      // requests allowed to wait; submit() refuses beyond that
  int prefill_chunk = 512; // prompt rows per prefill step (<= the model's max_batch_rows)
  int parallel = 4;        // requests generated together (continuous batching); with draft sources, their count
  SpecOptions spec;        // speculation policy, when the engine has a draft source
  // Plain sampled rows (top_k on, no penalties, bias or logprobs) download their top-k
  // candidates, not the logits (ForwardOutput::top_k_only); the tokens are the same either
  // way (the tests turn it off and on and compare; on the H200 the CUDA kernel passed
  // CudaOps.TopKRows* and CudaTopK.* in session 8).
  bool device_top_k = true;
};

// One committed token as the request sees it.
struct TokenEvent {
  int32_t id = 0;
  std::string text;      // UTF-8-safe piece (bytes of an unfinished character wait for the next token)
  bool eog = false;      // end-of-generation token: text is empty, generation ends after it
  bool forced = false;   // committed from the request's forced list, not sampled
  const TokenLogprobs* logprobs = nullptr;  // when the request asked for them
};

// The request's answer to a token: stop now, and/or tokens to commit next instead of sampling
// (a reasoning budget closing the thinking block, for example).
struct TokenDecision {
  bool stop = false;
  std::vector<int32_t> force;
};

enum class FinishReason { Eog, Length, Stopped, Cancelled, Error };

struct GenerationResult {
  FinishReason finish = FinishReason::Length;
  std::string error;        // for FinishReason::Error
  std::string tail_text;    // bytes the stream decoder still held at the end (U+FFFD-repaired)
  int prompt_tokens = 0;
  int generated_tokens = 0;
  double queue_seconds = 0;   // submit -> start of prefill
  double ttft_seconds = 0;    // submit -> first committed token
  double decode_seconds = 0;  // first committed token -> last
  // Speculative decoding (zero without a draft source).
  int draft_steps = 0;
  int drafted_tokens = 0;
  int accepted_tokens = 0;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;
  int max_tokens = 128;
  SamplingParams sampling;
  int top_logprobs = -1;               // -1: no logprobs; 0..20: chosen token plus this many alternatives
  std::vector<int32_t> forced_prefix;  // committed before anything is sampled
  // Both run on the worker thread; keep them short. on_done is called exactly once.
  std::function<TokenDecision(const TokenEvent&)> on_token;
  std::function<void(const GenerationResult&)> on_done;
};

class Engine {
 public:
  class Ticket;  // a submitted request; cancel() through it

  // drafts (nullable, outlives the engine): speculative decoding with this source, one slot.
  Engine(TargetModel& model, const Tokenizer& tok, const EngineOptions& opt, DraftSource* drafts = nullptr);
  // One draft source per slot (each outlives the engine): parallel = drafts.size().
  Engine(TargetModel& model, const Tokenizer& tok, const EngineOptions& opt, std::vector<DraftSource*> drafts);
  ~Engine();  // cancels everything and joins the worker
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues the request; nullptr when max_queue requests are already waiting.
  std::shared_ptr<Ticket> submit(GenerationRequest req);
  // A waiting request leaves the queue at once (on_done: Cancelled); the active one stops
  // before its next step and frees its sequence state.
  void cancel(const std::shared_ptr<Ticket>& t);

  // Refuses new requests and cancels all others (the active one before its next step); the
  // worker exits. For server shutdown: nobody waits for generations to run to the end.
  void shutdown();

  int waiting() const;
  int running() const { return running_.load(); }  // requests being generated
  const EngineOptions& options() const { return opt_; }

 private:
  struct Active;
  void worker_loop();
  void start(const std::shared_ptr<Ticket>& t);
  void step_all();             // one step of every active request
  void step_one(Active& a);    // a alone: prefill chunk, or decode (and speculate)
  void step_batched();         // several: one forward for all of them
  bool decode_step(Active& a);
  // Drafts a's next step verifies after its committed token (0: a plain row), within the
  // policy's width, its token budget, the context and `rows_left` rows of this forward.
  int draft_count(const Active& a, int rows_left) const;
  // The rows of one forward, built part by part (one part a request), then run.
  void add_decode_row(Active& a, int32_t token);   // token is committed: the row gives the next
  int add_prefill_chunk(Active& a, int max_rows);  // returns the rows added
  // The anchor (committed) and n drafts after it as speculative rows, verified by the forward.
  void add_spec_part(Active& a, int32_t anchor, int n);
  // forward, then per part: the walk over a speculative part's rows (commit, rollback), drafter
  // ingest, next logits or ids. false: the forward failed (its parts are finished).
  bool run_parts();
  // After the forward, one download: the step's argmax ids (ids: into out_.greedy) and the
  // drafts its speculative parts left on the device (into their drafts_buf).
  void fetch_ids(bool ids);
  // After the forward: walks a's verified block (its logits or ids from logit row li0, batch
  // row row0), commits the kept rows and rolls the rest back.
  // K > 0: the step returned each logit row's top K candidates (ForwardOutput::top_k_only).
  void finish_spec_part(Active& a, size_t li0, int row0, int n, bool ids, size_t K);
  // The token a commits next: forced (returns true), chosen by the last step, or sampled.
  bool next_token(Active& a, int32_t& token);
  bool commit(Active& a, int32_t token, bool forced);  // false: the request is finished (a is gone)
  bool is_active(const Active& a) const;
  // Whether the request's next tokens depend on the logits only through their argmax (plain
  // greedy, no logprobs): then forwards return argmax ids instead of logits.
  bool argmax_only(const Active& a) const;
  // Whether a's next token can be sampled from a step's top-k candidates (Sampler::sample_top),
  // and from how many at least; 0: it needs the full logits.
  int top_k_needed(const Active& a) const;
  void finish(Active& a, FinishReason why, std::string error = {});  // removes a
  static void notify_done(const GenerationRequest& req, const GenerationResult& r);

  TargetModel& model_;
  const Tokenizer& tok_;
  EngineOptions opt_;
  std::vector<DraftSource*> drafts_;  // per slot; empty without speculation
  std::unique_ptr<SequenceStore> state_;  // opt_.parallel sequences
  std::vector<int> seqs_;                 // the sequence of each slot
  std::vector<int> free_slots_;           // slots no request holds
  Batch batch_;
  ForwardOutput out_;
  struct Part {  // a request's rows in batch_
    Active* a;
    size_t rows;
    bool prefill, logits;
    int drafted = 0;  // > 0: a speculative block of 1 + drafted rows, all with logits
    bool device_drafts = false;  // the drafts are the drafter's argmax, left on the device (ids_dev_)
  };
  std::vector<Part> parts_;           // of batch_, reused every step
  std::vector<Active*> decoding_;     // step_batched scratch
  // Ids on the device (backend memory): each slot's greedy drafts (block - 1 from slot * (block -
  // 1)), then, from draft_ids_, a step's argmax ids (one per logit row). The verify rows read
  // the drafts there; after the forward one download brings what the step needs to ids_host_.
  int32_t* ids_dev_ = nullptr;
  size_t draft_ids_ = 0;  // slots x (block - 1)
  std::vector<int32_t> ids_host_;
  std::vector<float> draft_logits_;               // speculation scratch, reused every step
  std::vector<int32_t> draft_top_ids_;             // the drafter's top candidates (device_top_k)
  std::vector<float> draft_top_logits_;
  double step_t0_ = 0;  // when this step began (policy timings: the whole step, drafting included)
  StepTimer step_timer_;  // restarted with step_t0_: whether the step is timed (spec/warmup.h)
  int step_committed_ = 0;  // tokens the parts of this step committed (plain rows, kept block rows)
  BatchSpecGate gate_;      // whether requests sharing a step speculate (adaptive policy only)
  SpecCosts spec_costs_;    // step costs the requests' policies share (worker thread only)
  std::vector<std::unique_ptr<Active>> actives_;  // worker thread only

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Ticket>> queue_;
  bool stopping_ = false;
  std::atomic<int> running_{0};
  std::thread worker_;
};

}  // namespace df
