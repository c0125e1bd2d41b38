#include "server/openai_json.h"

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace df::server {

using nlohmann::json;

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_frame(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

namespace {
json token_json(const Tokenizer& tok, int32_t id, float logprob) {
  const std::string& raw = tok.token_bytes(id);
  json bytes = json::array();
  for (unsigned char c : raw) bytes.push_back(int(c));
  return json{{"token", utf8::replace_invalid(raw)}, {"logprob", logprob}, {"bytes", std::move(bytes)}};
}
}  // namespace

json chat_logprob_entry(const Tokenizer& tok, int32_t id, const TokenLogprobs& lp) {
  json e = token_json(tok, id, lp.logprob);
  json top = json::array();
  for (const TokenLogprob& t : lp.top) top.push_back(token_json(tok, t.id, t.logprob));
  e["top_logprobs"] = std::move(top);
  return e;
}

json tool_call_json(const ToolCall& c) {
  return json{{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
}

json usage_json(int prompt_tokens, int completion_tokens, int reasoning_tokens, bool chat) {
  json u = {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens}};
  if (chat) u["completion_tokens_details"] = {{"reasoning_tokens", reasoning_tokens}};
  return u;
}

}  // namespace df::server
