// Splits generated text into reasoning (inside <think>...</think>) and answer content, as the
// text streams in. Tags split across tokens are held back, never emitted.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "server/output_piece.h"

namespace df::server {

class ReasoningSplitter {
 public:
  // starts_in_reasoning: the prompt ended inside an open <think> block (templates that open it
  // in the generation prompt), so the generated text begins as reasoning.
  explicit ReasoningSplitter(bool starts_in_reasoning);

  void push(std::string_view text, std::vector<OutputPiece>& out);
  void flush(std::vector<OutputPiece>& out);  // end of generation: emit what is held
  bool in_reasoning() const { return state_ == State::Reasoning; }

 private:
  // Opening: nothing but whitespace so far, a <think> may still come.
  enum class State { Opening, Reasoning, Content };
  State state_;
  bool skip_space_ = false;  // drop whitespace right after a tag
  std::string held_;
};

}  // namespace df::server
