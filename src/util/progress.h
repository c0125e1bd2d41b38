// A one-line progress bar on stderr ("label [#####     ] 42%"), redrawn only when the
// percentage changes, and only when stderr is a terminal unless forced.
#pragma once
#include <cstddef>
#include <string>

namespace df {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label, bool enabled = true);
  void update(size_t done, size_t total);
  void finish();

 private:
  std::string label_;
  bool enabled_;
  int last_percent_ = -1;
};

}  // namespace df
