// Parsing and validating /v1/chat/completions and /v1/completions bodies. Every problem becomes
// an ApiError (400) naming the field; unknown fields are ignored, as OpenAI does; fields whose
// meaning we cannot honour (n > 1, json response formats, echo, ...) are refused.
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

enum class ToolChoice { Auto, None, Required, Named };

struct ChatRequest {
  GenerationFields gen;
  nlohmann::json messages;  // normalized: text content as strings, tool-call arguments as objects
  nlohmann::json tools;     // null, or the tool definitions offered to the template
  ToolChoice tool_choice = ToolChoice::Auto;
  std::string tool_name;    // ToolChoice::Named
  nlohmann::json template_kwargs = nlohmann::json::object();
  int reasoning_budget = kBudgetFromServer;  // -1: unlimited
};

struct CompletionRequest {
  GenerationFields gen;
  std::string prompt;                  // text prompt, or
  std::vector<int32_t> prompt_tokens;  // token ids given directly
  bool prompt_is_tokens = false;
};

// n_vocab bounds token ids (logit_bias keys, token prompts).
ChatRequest parse_chat_request(const nlohmann::json& body, int n_vocab);
CompletionRequest parse_completion_request(const nlohmann::json& body, int n_vocab);

// The messages, tools and kwargs a template sees (tool_choice "none" offers no tools).
nlohmann::json template_tools(const ChatRequest& r);

}  // namespace df::server
