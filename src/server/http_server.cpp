#include <fmt/format.h>

#include "server/http_server.h"

#include <cstdio>
#include <map>

#include "server/openai_json.h"
#include "server/server_core.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace df::server {

using nlohmann::json;

namespace {

// Routes and the methods they take (for 405 and the Allow header).
const std::map<std::string, std::string>& known_routes() {
  static const std::map<std::string, std::string> routes = {
      {"/v1/chat/completions", "POST"}, {"/v1/completions", "POST"}, {"/v1/models", "GET"},
      {"/tokenize", "POST"},            {"/detokenize", "POST"},     {"/apply-template", "POST"},
      {"/health", "GET"},               {"/metrics", "GET"},
  };
  return routes;
}

bool is_open_route(const std::string& path) { return path == "/health" || path == "/metrics"; }

// Compares without an early exit, so response time does not reveal how much of a key matched.
bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size() || b.empty()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

bool ServerCore::require_ready(const httplib::Request& req, httplib::Response& res) {
  if (ready.load(std::memory_order_acquire)) return true;
  res.set_header("Retry-After", "1");
  reply_error(req, res, ApiError(503, "the model is still loading", "", "model_loading"));
  return false;
}

void ServerCore::reply_json(const httplib::Request& req, httplib::Response& res, const json& body, RequestLog log) {
  res.status = log.status;
  res.set_content(dump_json(body), "application/json");
  finish_request(req, log);
}

void ServerCore::reply_error(const httplib::Request& req, httplib::Response& res, const ApiError& e, RequestLog log) {
  log.status = e.status;
  if (log.finish.empty()) log.finish = e.what();
  reply_json(req, res, error_json(e), log);
}

void ServerCore::finish_request(const std::string& method, const std::string& path, const RequestLog& log) {
  metrics.count_request(log.status);
  if (is_open_route(path)) return;
  std::string line = fmt::format("[{}] {} {} {}", log.id.empty() ? "-" : log.id, method, path, log.status);
  if (log.prompt_tokens >= 0) line += fmt::format(" prompt={}", log.prompt_tokens);
  if (log.completion_tokens >= 0) line += fmt::format(" completion={}", log.completion_tokens);
  if (log.ttft_seconds >= 0) line += fmt::format(" ttft={:.3f}s", log.ttft_seconds);
  if (log.decode_tok_s >= 0) line += fmt::format(" {:.1f}tok/s", log.decode_tok_s);
  if (!log.finish.empty()) line += " " + log.finish;
  std::fprintf(stderr, "%s\n", line.c_str());
}

nlohmann::ordered_json parse_body(const httplib::Request& req) {
  using ojson = nlohmann::ordered_json;
  // Deeper nesting than any API body needs would only make later recursive copies and
  // template conversion deep (and stack-hungry): refuse it while parsing.
  static constexpr int kMaxDepth = 64;
  auto limit_depth = [](int depth, ojson::parse_event_t, ojson&) {
    if (depth > kMaxDepth) throw ApiError(400, fmt::format("the request body is nested deeper than {} levels", kMaxDepth));
    return true;
  };
  try {
    return ojson::parse(req.body, limit_depth);
  } catch (const ojson::parse_error& e) {
    throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what());
  }
}

HttpServer::HttpServer(const ServerOptions& opt) : core_(std::make_unique<ServerCore>(opt)) {
  ServerCore& c = *core_;
  httplib::Server& http = c.http;
  const int threads = std::max(1, opt.http_threads);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  http.set_payload_max_length(opt.max_body_bytes);

  http.set_pre_routing_handler([&c](const httplib::Request& req, httplib::Response& res) {
    if (c.opt.api_key.empty() || is_open_route(req.path)) return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (auth.compare(0, prefix.size(), prefix) == 0 && same_secret(auth.substr(prefix.size()), c.opt.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("WWW-Authenticate", "Bearer");
    c.reply_error(req, res,
                  ApiError(401, auth.empty() ? "missing API key: send 'Authorization: Bearer <key>'" : "invalid API key",
                           "", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });

  // Errors httplib produces itself (no route, body too large, unparsable request) get an
  // OpenAI-shaped body too; responses our handlers built already have one.
  http.set_error_handler(httplib::Server::HandlerWithResponse([&c](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.is_chunked_content_provider_) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e(res.status, "bad request");
    if (res.status == 404) {
      auto it = known_routes().find(req.path);
      if (it != known_routes().end()) {
        res.set_header("Allow", it->second);
        e = ApiError(405, fmt::format("{} is not allowed on {} (use {})", req.method, req.path, it->second), "",
                     "method_not_allowed");
      } else {
        e = ApiError(404, fmt::format("unknown route {} {}", req.method, req.path), "", "not_found");
      }
    } else if (res.status == 413 &&
               req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0) {
      // httplib parses form bodies itself and caps them at 8 KiB (curl -d sends this type).
      e = ApiError(413, "form-encoded bodies are limited to 8192 bytes: send JSON with 'Content-Type: application/json'",
                   "", "request_too_large");
    } else if (res.status == 413) {
      e = ApiError(413, fmt::format("the request body is larger than {} bytes", c.opt.max_body_bytes), "",
                   "request_too_large");
    } else if (res.status >= 500) {
      e = ApiError(res.status, "internal server error");
    }
    c.reply_error(req, res, e);
    return httplib::Server::HandlerResponse::Handled;
  }));

  http.set_exception_handler([&c](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const ApiError& e) {
      c.reply_error(req, res, e);
      return;
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    c.reply_error(req, res, ApiError(500, "internal error: " + what));
  });

  register_generation_routes(c);
  register_info_routes(c);
}

HttpServer::~HttpServer() {
  stop();
  core_->engine.reset();  // joins the worker; waiting requests end as cancelled
}

int HttpServer::bind() {
  ServerCore& c = *core_;
  int port = c.opt.port;
  if (port == 0) {
    port = c.http.bind_to_any_port(c.opt.host);
  } else if (!c.http.bind_to_port(c.opt.host, port)) {
    port = -1;
  }
  if (port <= 0) fail("cannot listen on {}:{} (address in use, or not an address of this machine?)", c.opt.host, c.opt.port);
  return port;
}

void HttpServer::attach(const ServedModel& m) {
  ServerCore& c = *core_;
  c.model = m;
  const Vocab& v = m.tokenizer->vocab();
  auto token_text = [&](int32_t id) { return id >= 0 && id < m.tokenizer->n_vocab() ? m.tokenizer->token_bytes(id) : std::string(); };
  c.renderer = std::make_unique<PromptRenderer>(m.chat_template, token_text(v.bos_id), token_text(v.eos_id));
  c.think_close = m.tokenizer->encode("\n</think>\n\n", true);
  EngineOptions eo;
  eo.ctx = m.ctx;
  eo.max_queue = c.opt.max_queue;
  eo.parallel = c.opt.parallel;
  eo.spec = m.spec;
  c.engine = std::make_unique<Engine>(*m.model, *m.tokenizer, eo, m.drafts);
  c.ready.store(true, std::memory_order_release);
}

bool HttpServer::serve() { return core_->http.listen_after_bind(); }

void HttpServer::stop() {
  // Requests in flight end as cancelled at once, so the HTTP threads can finish.
  if (core_->ready.load(std::memory_order_acquire)) core_->engine->shutdown();
  core_->http.stop();
}

}  // namespace df::server
