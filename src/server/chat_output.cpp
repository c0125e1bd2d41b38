#include "server/chat_output.h"

namespace df::server {

ChatOutput::ChatOutput(const ChatOutputOptions& opt) : stop_(opt.stops) {
  if (opt.parse_reasoning) reasoning_ = std::make_unique<ReasoningSplitter>(opt.starts_in_reasoning);
  if (opt.parse_tools) tools_ = std::make_unique<ToolCallStreamer>(opt.tools);
}

void ChatOutput::route(std::string_view text, std::vector<OutputPiece>& out, bool final) {
  scratch_.clear();
  if (reasoning_) {
    reasoning_->push(text, scratch_);
    if (final) reasoning_->flush(scratch_);
  } else {
    append_text(scratch_, OutputPiece::Kind::Content, text);
  }
  // Reasoning passes through; content goes through the tool-call streamer.
  for (OutputPiece& p : scratch_) {
    if (p.kind == OutputPiece::Kind::Content && tools_) tools_->push(p.text, out);
    else if (p.kind == OutputPiece::Kind::ToolCall) out.push_back(std::move(p));
    else append_text(out, p.kind, p.text);
  }
  if (final && tools_) tools_->flush(out);
}

void ChatOutput::push(std::string_view text, std::vector<OutputPiece>& out) {
  const std::string safe = stop_.push(text);
  route(safe, out, false);
}

void ChatOutput::finish(std::vector<OutputPiece>& out) {
  const std::string rest = stop_.flush();
  route(rest, out, true);
}

}  // namespace df::server
