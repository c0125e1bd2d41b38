#include "cli/draft_options.h"

#include <CLI/CLI.hpp>

namespace df::cli {

void add_draft_flags(CLI::App* cmd, DraftArgs& a) {
  cmd->add_option("--draft", a.path, "DFlash drafter GGUF: speculative decoding (same output, faster)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--draft-block", a.block,
                  "Verify block size, 2..the drafter's trained size (0 = the trained size)")
      ->capture_default_str();
  cmd->add_option("--draft-adaptive", a.adaptive,
                  "Pick the verify width (n, n/2, n/4 drafts) with the lowest measured cost per token, and "
                  "turn speculation off while it measures slower than plain decoding (true|false)")
      ->capture_default_str();
  cmd->add_option("--draft-window", a.window,
                  "Context tokens the drafter attends to, the most recent (0 = the whole context)")
      ->capture_default_str();
  cmd->add_option("--draft-reprobe", a.reprobe, "Plain tokens before speculation is tried again after turning off")
      ->capture_default_str();
  cmd->add_flag("--draft-argmax", a.argmax,
                "With sampling, take the drafter's argmax as the drafts instead of drawing them from its "
                "distribution (both keep the output distribution exact)");
}

LoadedDraft load_draft(const DraftArgs& a, TargetModel& target, int ctx) {
  LoadedDraft d;
  d.file = gguf::File::open(a.path);
  d.model = std::make_unique<DraftModel>(*d.file, target, a.block, a.window);
  d.source = std::make_unique<DFlashSource>(*d.model, target, ctx);
  return d;
}

std::vector<DraftSource*> LoadedDraft::sources(TargetModel& target, int n, int ctx) {
  std::vector<DraftSource*> out{source.get()};
  while (int(more.size()) + 1 < n) more.push_back(std::make_unique<DFlashSource>(*model, target, ctx));
  for (int i = 0; i + 1 < n; ++i) out.push_back(more[size_t(i)].get());
  return out;
}

}  // namespace df::cli
