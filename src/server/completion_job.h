// One completion request between the engine and its HTTP connection. The engine's callbacks
// (worker thread) run the text pipeline and produce SSE frames or the final body; the HTTP
// thread waits for them. Knows the OpenAI shapes of chat.completion(.chunk) and text_completion.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "server/chat_output.h"

namespace df {
class Tokenizer;
}

namespace df::server {

enum class ApiKind { Chat, Text };

struct JobSetup {
  ApiKind kind = ApiKind::Chat;
  std::string id;  // "chatcmpl-..." or "cmpl-..."
  std::string model;
  int64_t created = 0;
  bool stream = false;
  bool include_usage = false;
  int top_logprobs = -1;
  int prompt_tokens = 0;
  ChatOutputOptions output;
  int reasoning_budget = -1;                // thinking tokens before the close is forced; -1: unlimited
  std::vector<int32_t> think_close_tokens;  // the forced close: tokens of "\n</think>\n\n"
  // tool_choice required / named: committed as soon as the answer begins (after any thinking).
  std::vector<int32_t> tool_call_opening;
};

class CompletionJob {
 public:
  CompletionJob(JobSetup setup, const Tokenizer& tok);

  // Tokens to commit before sampling: the thinking close when the budget is 0 and the prompt
  // opened thinking; then a forced tool call's opening when the answer starts there.
  const std::vector<int32_t>& forced_prefix() const { return forced_prefix_; }

  // Engine callbacks (worker thread).
  TokenDecision on_token(const TokenEvent& ev);
  void on_done(const GenerationResult& r);

  enum class Wait { Data, Timeout, Done };
  // HTTP side. Streaming: appends the SSE frames produced so far to `out` (Data), or returns
  // Done once the last frame has been taken. Non-streaming: Done when body() is ready.
  Wait wait(std::string& out, std::chrono::milliseconds timeout);

  // After Done.
  int status() const { return status_; }  // 200, 500 (generation failed), 499 (cancelled)
  const std::string& body() const { return body_; }
  const GenerationResult& result() const { return result_; }
  int reasoning_tokens() const { return reasoning_tokens_; }
  const JobSetup& setup() const { return s_; }

 private:
  nlohmann::json chunk(nlohmann::json choice) const;
  void emit_pieces(std::vector<OutputPiece>& pieces);
  void emit(nlohmann::json choice);  // one streamed chunk with pending logprobs attached
  nlohmann::json take_logprobs();
  std::string finish_reason(const GenerationResult& r) const;

  JobSetup s_;
  const Tokenizer& tok_;
  ChatOutput output_;
  int reasoning_tokens_ = 0;
  bool close_forced_ = false;
  bool tool_opening_forced_ = false;  // tool_call_opening is committed (or queued)
  std::vector<int32_t> forced_prefix_;  // decided at construction, before generation
  int tool_index_ = 0;

  // Accumulated for the non-streaming body.
  std::string content_, reasoning_;
  nlohmann::json tool_calls_ = nlohmann::json::array();
  // Logprobs not yet attached to a chunk (chat entries, or the legacy completions lists).
  nlohmann::json logprobs_ = nlohmann::json::array();
  int text_offset_ = 0;

  GenerationResult result_;
  int status_ = 200;
  std::string body_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::string frames_;  // produced, not yet taken
  bool done_ = false;
};

}  // namespace df::server
