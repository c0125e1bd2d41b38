// deltaflash serve: an OpenAI-compatible HTTP server over the Engine.
//   POST /v1/chat/completions, /v1/completions   generation (JSON or SSE streaming)
//   GET  /v1/models                             the served model
//   POST /tokenize, /detokenize, /apply-template  llama.cpp-style helpers
//   GET  /health (503 until the model is loaded), /metrics (Prometheus text)
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "spec/spec_policy.h"

namespace df {
class DraftSource;
class TargetModel;
class Tokenizer;
}  // namespace df

namespace df::server {

struct ServerCore;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (bind() returns it)
  std::string api_key;              // empty: no authentication
  int max_queue = 64;               // waiting requests before 503
  int parallel = 4;                 // requests generated together
  int reasoning_budget = -1;        // default thinking budget in tokens; -1: unlimited
  size_t max_body_bytes = 8 << 20;  // larger request bodies get 413
  int http_threads = 32;            // connections served at once
};

// The model being served, once loaded. The server does not own it.
struct ServedModel {
  TargetModel* model = nullptr;
  const Tokenizer* tokenizer = nullptr;
  std::string name;           // reported by /v1/models
  std::string chat_template;  // Jinja source; empty: ChatML
  int ctx = 8192;             // tokens per request (prompt + completion)
  std::vector<DraftSource*> drafts;  // speculative decoding (--draft), one per --parallel slot; not owned
  SpecOptions spec;
};

class HttpServer {
 public:
  explicit HttpServer(const ServerOptions& opt);
  ~HttpServer();
  // Binds the listening socket; returns the port. Throws df::Error when it cannot.
  int bind();
  // Makes the model available: /health turns 200. Throws df::Error on a bad chat template.
  void attach(const ServedModel& m);
  // Serves until stop(); returns false when listening failed.
  bool serve();
  void stop();

 private:
  std::unique_ptr<ServerCore> core_;
};

}  // namespace df::server
