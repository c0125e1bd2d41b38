// State shared by the HTTP handlers of HttpServer, and the helpers every handler uses to
// answer: JSON bodies, OpenAI-shaped errors, the per-request log line and metrics.
#pragma once
#include <httplib.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "server/api_error.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/prompt_renderer.h"

namespace df::server {

// What one request did, for the log line and the metrics.
struct RequestLog {
  std::string id;  // empty for requests that generate nothing
  int status = 200;
  int prompt_tokens = -1;
  int completion_tokens = -1;
  double ttft_seconds = -1;
  double decode_tok_s = -1;
  std::string finish;
};

struct ServerCore {
  explicit ServerCore(const ServerOptions& o) : opt(o) {}
  ServerOptions opt;
  httplib::Server http;
  Metrics metrics;
  std::atomic<bool> ready{false};
  // Set once by attach(), before `ready`; read-only afterwards.
  ServedModel model;
  std::unique_ptr<PromptRenderer> renderer;
  std::unique_ptr<Engine> engine;
  std::vector<int32_t> think_close;  // tokens of "\n</think>\n\n"

  // Answers 503 while the model loads; true when ready.
  bool require_ready(const httplib::Request& req, httplib::Response& res);
  void reply_json(const httplib::Request& req, httplib::Response& res, const nlohmann::json& body, RequestLog log = {});
  void reply_error(const httplib::Request& req, httplib::Response& res, const ApiError& e, RequestLog log = {});
  // One stderr line per request (not for /health and /metrics) and the request counters.
  void finish_request(const std::string& method, const std::string& path, const RequestLog& log);
  void finish_request(const httplib::Request& req, const RequestLog& log) { finish_request(req.method, req.path, log); }
};

// The body as a JSON value with its objects' keys in the order the client wrote them (they can
// reach a chat template's tojson); ApiError 400 when it is not JSON.
nlohmann::ordered_json parse_body(const httplib::Request& req);

void register_generation_routes(ServerCore& core);  // /v1/chat/completions, /v1/completions
void register_info_routes(ServerCore& core);        // models, tokenize, detokenize, apply-template, health, metrics

}  // namespace df::server
