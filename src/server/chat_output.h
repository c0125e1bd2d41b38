// The text pipeline of one completion: stop sequences, then <think> splitting, then tool-call
// extraction, each holding back only what the next token could still change.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/stop_matcher.h"
#include "server/output_piece.h"
#include "server/reasoning_splitter.h"
#include "server/tool_calls.h"

namespace df::server {

struct ChatOutputOptions {
  std::vector<std::string> stops;
  bool parse_reasoning = false;      // chat: split <think> blocks into reasoning_content
  bool starts_in_reasoning = false;  // the prompt ended inside an open <think>
  bool parse_tools = false;          // tools were offered to the template
  nlohmann::ordered_json tools;      // their definitions (schemas coerce parameter types)
};

class ChatOutput {
 public:
  explicit ChatOutput(const ChatOutputOptions& opt);
  void push(std::string_view text, std::vector<OutputPiece>& out);
  void finish(std::vector<OutputPiece>& out);  // end of generation
  bool stopped() const { return stop_.matched(); }  // a stop sequence ended the text
  bool in_reasoning() const { return reasoning_ && reasoning_->in_reasoning(); }
  int tool_calls() const { return tools_ ? tools_->calls() : 0; }

 private:
  void route(std::string_view text, std::vector<OutputPiece>& out, bool final);

  StopMatcher stop_;
  std::unique_ptr<ReasoningSplitter> reasoning_;
  std::unique_ptr<ToolCallStreamer> tools_;
  std::vector<OutputPiece> scratch_;
};

}  // namespace df::server
