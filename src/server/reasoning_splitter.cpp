#include "server/reasoning_splitter.h"

namespace df::server {

namespace {
constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

size_t leading_space(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}
}  // namespace

ReasoningSplitter::ReasoningSplitter(bool starts_in_reasoning)
    : state_(starts_in_reasoning ? State::Reasoning : State::Opening), skip_space_(starts_in_reasoning) {}

void ReasoningSplitter::push(std::string_view text, std::vector<OutputPiece>& out) {
  held_ += text;
  for (;;) {
    if (skip_space_) {
      const size_t n = leading_space(held_);
      held_.erase(0, n);
      if (held_.empty()) return;
      skip_space_ = false;
    }
    if (state_ == State::Opening) {
      const size_t n = leading_space(held_);
      const std::string_view rest = std::string_view(held_).substr(n);
      if (rest.empty()) return;  // only whitespace: a <think> may follow
      if (rest.substr(0, kOpen.size()) == kOpen) {
        held_.erase(0, n + kOpen.size());
        state_ = State::Reasoning;
        skip_space_ = true;
        continue;
      }
      if (rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest) return;  // maybe "<thi"
      state_ = State::Content;
      continue;
    }
    if (state_ == State::Reasoning) {
      const size_t at = held_.find(kClose);
      if (at != std::string::npos) {
        append_text(out, OutputPiece::Kind::Reasoning, std::string_view(held_).substr(0, at));
        held_.erase(0, at + kClose.size());
        state_ = State::Content;
        skip_space_ = true;
        continue;
      }
      const size_t keep = partial_tag_suffix(held_, kClose);
      append_text(out, OutputPiece::Kind::Reasoning, std::string_view(held_).substr(0, held_.size() - keep));
      held_.erase(0, held_.size() - keep);
      return;
    }
    append_text(out, OutputPiece::Kind::Content, held_);
    held_.clear();
    return;
  }
}

void ReasoningSplitter::flush(std::vector<OutputPiece>& out) {
  if (skip_space_) held_.clear();
  append_text(out, state_ == State::Reasoning ? OutputPiece::Kind::Reasoning : OutputPiece::Kind::Content, held_);
  held_.clear();
}

}  // namespace df::server
