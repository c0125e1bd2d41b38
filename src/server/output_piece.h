// What a chat completion's generated text turns into: reasoning text, answer text, tool calls.
#pragma once
#include <string>
#include <vector>

namespace df::server {

struct ToolCall {
  std::string id;         // "call_<random>"
  std::string name;
  std::string arguments;  // a JSON object as text (OpenAI's function.arguments)
};

struct OutputPiece {
  enum class Kind { Reasoning, Content, ToolCall };
  Kind kind = Kind::Content;
  std::string text;  // Reasoning, Content
  ToolCall call;     // ToolCall
};

// Appends text of a kind, merging with the previous piece of the same kind.
inline void append_text(std::vector<OutputPiece>& out, OutputPiece::Kind kind, std::string_view text) {
  if (text.empty()) return;
  if (!out.empty() && out.back().kind == kind && kind != OutputPiece::Kind::ToolCall) {
    out.back().text += text;
    return;
  }
  OutputPiece p;
  p.kind = kind;
  p.text = std::string(text);
  out.push_back(std::move(p));
}

// Length of the longest suffix of `text` that is a proper prefix of `tag` (text to hold back
// because the next token may complete the tag).
inline size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  for (size_t k = std::min(text.size(), tag.size() - 1); k > 0; --k)
    if (text.substr(text.size() - k) == tag.substr(0, k)) return k;
  return 0;
}

}  // namespace df::server
