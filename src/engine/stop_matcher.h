// Stop sequences over streamed text: text that could still be the start of a stop sequence is
// held back, so a stop split across tokens is caught and never emitted.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace df {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Appends generated text; returns the text that is now safe to emit. After a match, returns
  // the text before the earliest stop sequence and ignores everything afterwards.
  std::string push(std::string_view text);
  // End of generation: the held-back text is not a stop after all.
  std::string flush();
  bool matched() const { return matched_; }
  const std::string& matched_stop() const { return matched_stop_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool matched_ = false;
  std::string matched_stop_;
};

}  // namespace df
