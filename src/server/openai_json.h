// The JSON shapes of OpenAI responses that several endpoints share: logprobs, usage, SSE frames.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "engine/logprobs.h"
#include "server/output_piece.h"

namespace df {
class Tokenizer;
}

namespace df::server {

// Serializes without ever throwing on invalid UTF-8 (replaced by U+FFFD).
std::string dump_json(const nlohmann::json& j);

// "data: <json>\n\n"
std::string sse_frame(const nlohmann::json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

// Chat logprobs entry: {"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}.
nlohmann::json chat_logprob_entry(const Tokenizer& tok, int32_t id, const TokenLogprobs& lp);

nlohmann::json tool_call_json(const ToolCall& c);

nlohmann::json usage_json(int prompt_tokens, int completion_tokens, int reasoning_tokens, bool chat);

}  // namespace df::server
