// Tool calls in generated text: Qwen's XML form
//   <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n</tool_call>
// and the Qwen3 JSON form
//   <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
// turned into OpenAI tool calls. Blocks that do not parse stay content.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/output_piece.h"

namespace df::server {

// Parses the text between <tool_call> and </tool_call>. tools: the request's tool list (or
// null); parameter values of the XML form are converted to the JSON types their schema names.
// The arguments keep the order in which the model wrote them.
std::optional<ToolCall> parse_tool_call(std::string_view body, const nlohmann::ordered_json& tools);

// "call_" + 24 random alphanumerics.
std::string new_tool_call_id();

// The start of a tool call that tool_choice forces: "<tool_call>\n", then for a named function
// its name in the template's form ("<function=NAME>\n", or the JSON form's
// "{\"name\": \"NAME\", \"arguments\": "); name empty: the tag alone.
std::string forced_tool_call_opening(bool xml_form, const std::string& name);

// Streams answer content, holding back everything from "<tool_call>" until its block closes,
// then emitting a ToolCall piece (or the raw block as content when it does not parse).
class ToolCallStreamer {
 public:
  explicit ToolCallStreamer(nlohmann::ordered_json tools) : tools_(std::move(tools)) {}
  void push(std::string_view content, std::vector<OutputPiece>& out);
  void flush(std::vector<OutputPiece>& out);
  int calls() const { return calls_; }

 private:
  void emit_content(std::string_view text, std::vector<OutputPiece>& out);
  void close_block(std::string_view body, bool closed, std::vector<OutputPiece>& out);

  nlohmann::ordered_json tools_;
  std::string held_;
  bool in_block_ = false;
  size_t searched_ = 0;  // held_ bytes already known not to contain the closing tag
  int calls_ = 0;
  // Trailing whitespace of the content so far: framing when a tool call or the end follows a
  // call, text when more content follows.
  std::string pending_space_;
};

}  // namespace df::server
