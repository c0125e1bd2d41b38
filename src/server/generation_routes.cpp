// POST /v1/chat/completions and /v1/completions: validate, render, tokenize, check the
// context, queue on the engine, then answer with one JSON body or an SSE stream. A client that
// goes away cancels its request.
#include <chrono>
#include <ctime>
#include <random>

#include <fmt/format.h>

#include "server/completion_job.h"
#include "server/connection_probe.h"
#include "server/openai_json.h"
#include "server/requests.h"
#include "server/server_core.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace df::server {

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

std::string new_request_id(const char* prefix) {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % (sizeof kAlnum - 1)];
  return id;
}

int vocab_limit(const ServerCore& c) {
  return std::min(c.model.model->hparams().n_vocab, c.model.tokenizer->n_vocab());
}

// The completion budget: the request's max_tokens, or whatever the context has left.
int resolve_max_tokens(int prompt_tokens, int requested, int ctx) {
  if (prompt_tokens >= ctx)
    throw ApiError(400,
                   fmt::format("the prompt has {} tokens but the context holds {} (prompt and completion together)",
                               prompt_tokens, ctx),
                   "messages", "context_length_exceeded");
  if (requested > 0 && prompt_tokens + requested > ctx)
    throw ApiError(400,
                   fmt::format("the prompt has {} tokens and max_tokens is {}: together more than the context of {}",
                               prompt_tokens, requested, ctx),
                   "max_tokens", "context_length_exceeded");
  return requested > 0 ? requested : ctx - prompt_tokens;
}

const char* finish_text(FinishReason f) {
  switch (f) {
    case FinishReason::Eog: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Stopped: return "stop-sequence";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
  }
  return "?";
}

// The intervals between a request's consecutive committed tokens.
struct TokenIntervals {
  std::chrono::steady_clock::time_point last;
  bool started = false;
  std::vector<double> seconds;
  void tick() {
    const auto now = std::chrono::steady_clock::now();
    if (started) seconds.push_back(std::chrono::duration<double>(now - last).count());
    last = now;
    started = true;
  }
};

// Queues the job and answers the request (JSON or SSE).
void run_job(ServerCore& c, const httplib::Request& req, httplib::Response& res, JobSetup setup,
             std::vector<int32_t> prompt, const GenerationFields& gen) {
  setup.prompt_tokens = int(prompt.size());
  const int max_tokens = resolve_max_tokens(int(prompt.size()), gen.max_tokens, c.model.ctx);
  auto job = std::make_shared<CompletionJob>(std::move(setup), *c.model.tokenizer);

  GenerationRequest g;
  g.prompt = std::move(prompt);
  g.max_tokens = max_tokens;
  g.sampling = gen.sampling;
  g.top_logprobs = gen.top_logprobs;
  g.forced_prefix = job->forced_prefix();
  // When each token was committed (the engine calls on_token right after committing it), for
  // the per-token latency histogram. on_token and on_done both run on the worker thread.
  auto intervals = std::make_shared<TokenIntervals>();
  g.on_token = [job, intervals](const TokenEvent& e) {
    intervals->tick();
    return job->on_token(e);
  };
  // Runs on the worker when the request ends in any way: metrics and the log line.
  g.on_done = [job, intervals, &c, method = req.method, path = req.path](const GenerationResult& r) {
    // Token metrics first: once the client has its answer, /metrics already counts it.
    c.metrics.count_tokens(r.prompt_tokens, r.generated_tokens);
    c.metrics.count_speculation(r.draft_steps, r.drafted_tokens, r.accepted_tokens);
    if (r.generated_tokens > 0) c.metrics.observe_ttft(r.ttft_seconds);
    c.metrics.observe_token_intervals(intervals->seconds);
    job->on_done(r);
    RequestLog log;
    log.id = job->setup().id;
    log.status = job->status();
    log.prompt_tokens = r.prompt_tokens;
    log.completion_tokens = r.generated_tokens;
    if (r.generated_tokens > 0) log.ttft_seconds = r.ttft_seconds;
    if (r.generated_tokens > 1 && r.decode_seconds > 0) log.decode_tok_s = (r.generated_tokens - 1) / r.decode_seconds;
    log.finish = finish_text(r.finish);
    if (r.finish == FinishReason::Error) log.finish += ": " + r.error;
    c.finish_request(method, path, log);
  };

  std::shared_ptr<Engine::Ticket> ticket = c.engine->submit(std::move(g));
  if (!ticket) {
    res.set_header("Retry-After", "1");
    c.reply_error(req, res,
                  ApiError(503, fmt::format("the server is busy ({} requests waiting); retry later", c.opt.max_queue), "",
                           "queue_full"));
    return;
  }
  auto probe = std::make_shared<ConnectionProbe>(req.remote_addr, req.remote_port, req.local_port);

  if (!job->setup().stream) {
    std::string ignored;
    for (;;) {
      const CompletionJob::Wait w = job->wait(ignored, 100ms);
      if (w == CompletionJob::Wait::Done) break;
      if (probe->closed()) c.engine->cancel(ticket);  // keep waiting: on_done follows within a step
    }
    res.status = job->status();
    if (job->status() == 499) {
      res.set_content(dump_json(error_json(499, "client closed the connection")), "application/json");
    } else {
      res.set_content(job->body(), "application/json");
    }
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  Engine* engine = c.engine.get();
  res.set_chunked_content_provider(
      "text/event-stream",
      [job, ticket, probe, engine](size_t, httplib::DataSink& sink) {
        std::string buf;
        for (;;) {
          buf.clear();
          const CompletionJob::Wait w = job->wait(buf, 100ms);
          if (!buf.empty() && !sink.write(buf.data(), buf.size())) {
            engine->cancel(ticket);
            return false;
          }
          if (w == CompletionJob::Wait::Done) {
            sink.done();
            return true;
          }
          if (w == CompletionJob::Wait::Timeout && probe->closed()) {
            engine->cancel(ticket);
            return false;
          }
        }
      },
      // Runs however the response ends; a stream that never completed cancels its request.
      [ticket, engine](bool success) {
        if (!success) engine->cancel(ticket);
      });
}

JobSetup base_setup(const ServerCore& c, ApiKind kind, const GenerationFields& gen) {
  JobSetup s;
  s.kind = kind;
  s.id = new_request_id(kind == ApiKind::Chat ? "chatcmpl-" : "cmpl-");
  s.model = gen.model.empty() ? c.model.name : gen.model;
  s.created = int64_t(std::time(nullptr));
  s.stream = gen.stream;
  s.include_usage = gen.stream && gen.include_usage;
  s.top_logprobs = gen.top_logprobs;
  s.output.stops = gen.stop;
  return s;
}

void handle_chat(ServerCore& c, const httplib::Request& req, httplib::Response& res) {
  if (!c.require_ready(req, res)) return;
  try {
    const ChatRequest r = parse_chat_request(parse_body(req), vocab_limit(c));
    const RenderedPrompt p = c.renderer->render(r);
    std::vector<int32_t> prompt = c.model.tokenizer->encode(p.text, true);
    if (prompt.empty()) throw ApiError(400, "the rendered prompt is empty", "messages");
    JobSetup s = base_setup(c, ApiKind::Chat, r.gen);
    s.output.parse_reasoning = true;
    s.output.starts_in_reasoning = p.starts_in_reasoning;
    s.output.tools = template_tools(r);
    s.output.parse_tools = !s.output.tools.is_null();
    s.reasoning_budget = r.reasoning_budget == kBudgetFromServer ? c.opt.reasoning_budget : r.reasoning_budget;
    s.think_close_tokens = c.think_close;
    if (r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named)
      s.tool_call_opening = c.model.tokenizer->encode(
          forced_tool_call_opening(c.renderer->xml_tool_calls(), r.tool_choice_name), true);
    run_job(c, req, res, std::move(s), std::move(prompt), r.gen);
  } catch (const ApiError& e) {
    c.reply_error(req, res, e);
  }
}

void handle_completion(ServerCore& c, const httplib::Request& req, httplib::Response& res) {
  if (!c.require_ready(req, res)) return;
  try {
    const CompletionRequest r = parse_completion_request(parse_body(req), vocab_limit(c));
    std::vector<int32_t> prompt = r.prompt_is_tokens ? r.prompt_tokens : c.model.tokenizer->encode(r.prompt, true);
    if (prompt.empty()) throw ApiError(400, "the prompt is empty after tokenization", "prompt");
    run_job(c, req, res, base_setup(c, ApiKind::Text, r.gen), std::move(prompt), r.gen);
  } catch (const ApiError& e) {
    c.reply_error(req, res, e);
  }
}

}  // namespace

void register_generation_routes(ServerCore& c) {
  c.http.Post("/v1/chat/completions", [&c](const httplib::Request& req, httplib::Response& res) { handle_chat(c, req, res); });
  c.http.Post("/v1/completions", [&c](const httplib::Request& req, httplib::Response& res) { handle_completion(c, req, res); });
}

}  // namespace df::server
