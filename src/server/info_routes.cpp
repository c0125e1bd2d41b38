// The small endpoints: /v1/models, /tokenize, /detokenize, /apply-template, /health, /metrics.
#include <ctime>

#include <fmt/format.h>

#include "server/openai_json.h"
#include "server/requests.h"
#include "server/server_core.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace df::server {

using nlohmann::json;

namespace {

void handle_models(ServerCore& c, const httplib::Request& req, httplib::Response& res) {
  if (!c.require_ready(req, res)) return;
  static const int64_t created = int64_t(std::time(nullptr));
  c.reply_json(req, res,
               json{{"object", "list"},
                    {"data", json::array({json{{"id", c.model.name},
                                               {"object", "model"},
                                               {"created", created},
                                               {"owned_by", "deltaflash"},
                                               {"context_length", c.model.ctx}}})}});
}

// {"content": "text", "parse_special": true} -> {"tokens": [...]}
void handle_tokenize(ServerCore& c, const httplib::Request& req, httplib::Response& res) {
  if (!c.require_ready(req, res)) return;
  try {
    const nlohmann::ordered_json body = parse_body(req);
    if (!body.is_object() || !body.contains("content") || !body["content"].is_string())
      throw ApiError(400, "'content' (a string) is required", "content");
    bool parse_special = true;
    if (body.contains("parse_special")) {
      if (!body["parse_special"].is_boolean()) throw ApiError(400, "'parse_special' must be a boolean", "parse_special");
      parse_special = body["parse_special"].get<bool>();
    }
    c.reply_json(req, res, json{{"tokens", c.model.tokenizer->encode(body["content"].get<std::string>(), parse_special)}});
  } catch (const ApiError& e) {
    c.reply_error(req, res, e);
  }
}

// {"tokens": [...]} -> {"content": "text"} (invalid UTF-8 replaced by U+FFFD)
void handle_detokenize(ServerCore& c, const httplib::Request& req, httplib::Response& res) {
  if (!c.require_ready(req, res)) return;
  try {
    const nlohmann::ordered_json body = parse_body(req);
    if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array())
      throw ApiError(400, "'tokens' (a list of token ids) is required", "tokens");
    const int n_vocab = c.model.tokenizer->n_vocab();
    std::vector<int32_t> ids;
    for (const auto& t : body["tokens"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab)
        throw ApiError(400, fmt::format("token ids must be integers in [0, {})", n_vocab), "tokens");
      ids.push_back(t.get<int32_t>());
    }
    c.reply_json(req, res, json{{"content", utf8::replace_invalid(c.model.tokenizer->decode(ids))}});
  } catch (const ApiError& e) {
    c.reply_error(req, res, e);
  }
}

// A chat completion body -> {"prompt": the rendered template text}.
void handle_apply_template(ServerCore& c, const httplib::Request& req, httplib::Response& res) {
  if (!c.require_ready(req, res)) return;
  try {
    const ChatRequest r = parse_chat_request(parse_body(req), c.model.tokenizer->n_vocab());
    c.reply_json(req, res, json{{"prompt", c.renderer->render(r).text}});
  } catch (const ApiError& e) {
    c.reply_error(req, res, e);
  }
}

}  // namespace

void register_info_routes(ServerCore& c) {
  c.http.Get("/v1/models", [&c](const httplib::Request& req, httplib::Response& res) { handle_models(c, req, res); });
  c.http.Post("/tokenize", [&c](const httplib::Request& req, httplib::Response& res) { handle_tokenize(c, req, res); });
  c.http.Post("/detokenize", [&c](const httplib::Request& req, httplib::Response& res) { handle_detokenize(c, req, res); });
  c.http.Post("/apply-template",
              [&c](const httplib::Request& req, httplib::Response& res) { handle_apply_template(c, req, res); });
  c.http.Get("/health", [&c](const httplib::Request& req, httplib::Response& res) {
    if (c.ready.load(std::memory_order_acquire)) {
      c.reply_json(req, res, json{{"status", "ok"}});
    } else {
      res.set_header("Retry-After", "1");
      RequestLog log;
      log.status = 503;
      c.reply_json(req, res, json{{"status", "loading"}}, log);
    }
  });
  c.http.Get("/metrics", [&c](const httplib::Request& req, httplib::Response& res) {
    const bool ready = c.ready.load(std::memory_order_acquire);
    const int waiting = ready ? c.engine->waiting() : 0;
    const int running = ready ? c.engine->running() : 0;
    c.finish_request(req, RequestLog{});
    res.set_content(c.metrics.render(waiting, running), "text/plain; version=0.0.4");
  });
}

}  // namespace df::server
