// Parsing and validating /v1/chat/completions and /v1/completions bodies. Every problem becomes
// an ApiError (400) naming the field; unknown fields are ignored, as OpenAI does; fields whose
// meaning we cannot honour (n > 1, json response formats, echo, tool_choice "required", ...)
// are refused.
//
// Bodies are nlohmann::ordered_json: what reaches the chat template (messages, tools,
// chat_template_kwargs) keeps the client's key order, which templates print with tojson.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampler.h"

namespace df::server {

// Reasoning budgets of reasoning_effort low / medium / high, in tokens.
inline constexpr int kEffortLow = 256, kEffortMedium = 1024, kEffortHigh = 4096;
inline constexpr int kBudgetFromServer = -2;
inline constexpr size_t kMaxStopBytes = 512;  // longest stop sequence accepted  // the request did not set one: the server's --reasoning-budget

struct GenerationFields {
  std::string model;              // echoed back
  int max_tokens = -1;            // -1: until the context is full
  SamplingParams sampling;        // defaults: the CLI's (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05)
  std::vector<std::string> stop;  // at most 4
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  int top_logprobs = -1;          // -1: no logprobs
};

// Required and Named make the answer open a tool call: the server commits the opening of the
// template's tool-call form (and, for Named, the function's name) as soon as the answer begins,
// after any thinking; the model writes the rest.
enum class ToolChoice { Auto, None, Required, Named };

struct ChatRequest {
  GenerationFields gen;
  // Normalized: text content as strings; tool-call arguments sent as a JSON string that holds
  // an object are parsed into that object (templates iterate them), other strings stay strings.
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;  // null, or the tool definitions offered to the template
  ToolChoice tool_choice = ToolChoice::Auto;
  std::string tool_choice_name;  // Named: the function (one of `tools`)
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
  int reasoning_budget = kBudgetFromServer;  // -1: unlimited
};

struct CompletionRequest {
  GenerationFields gen;
  std::string prompt;                  // text prompt, or
  std::vector<int32_t> prompt_tokens;  // token ids given directly
  bool prompt_is_tokens = false;
};

// n_vocab bounds token ids (logit_bias keys, token prompts).
ChatRequest parse_chat_request(const nlohmann::ordered_json& body, int n_vocab);
CompletionRequest parse_completion_request(const nlohmann::ordered_json& body, int n_vocab);

// The tools a template sees: null when there are none or tool_choice is "none".
nlohmann::ordered_json template_tools(const ChatRequest& r);

}  // namespace df::server
