#include "util/progress.h"

#include <unistd.h>

#include <cstdio>

namespace df {

ProgressBar::ProgressBar(std::string label, bool enabled)
    : label_(std::move(label)), enabled_(enabled && isatty(STDERR_FILENO)) {}

void ProgressBar::update(size_t done, size_t total) {
  if (!enabled_ || total == 0) return;
  const int pct = int(done * 100 / total);
  if (pct == last_percent_) return;
  last_percent_ = pct;
  const int width = 30, filled = pct * width / 100;
  std::fprintf(stderr, "\r%s [%.*s%*s] %3d%%", label_.c_str(), filled, "##############################",
               width - filled, "", pct);
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (!enabled_ || last_percent_ < 0) return;
  update(1, 1);
  std::fprintf(stderr, "\n");
}

}  // namespace df
