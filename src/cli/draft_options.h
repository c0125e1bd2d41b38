// The speculative-decoding flags shared by run, bench and serve, and loading the drafter they name.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "model/draft_model.h"
#include "spec/draft_source.h"
#include "spec/spec_decoder.h"

namespace CLI {
class App;
}

namespace df::cli {

struct DraftArgs {
  std::string path;     // --draft: a DFlash drafter GGUF; empty = plain decoding
  int block = 0;        // --draft-block: 0 = the drafter's trained block size
  bool adaptive = true; // --draft-adaptive
  int reprobe = 64;     // --draft-reprobe
  int window = 4096;    // --draft-window: context rows the drafter attends to (0 = all)
  bool argmax = false;  // --draft-argmax
  SpecOptions spec_options() const { return SpecOptions{adaptive, reprobe, 0, argmax}; }
};

void add_draft_flags(CLI::App* cmd, DraftArgs& a);

struct LoadedDraft {
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<DraftModel> model;
  std::unique_ptr<DFlashSource> source;
  std::vector<std::unique_ptr<DFlashSource>> more;  // further sources over the same drafter (serve slots)
  // The first n sources (source, then more, made as needed): one per concurrent sequence.
  std::vector<DraftSource*> sources(TargetModel& target, int n, int ctx);
};

// Opens and validates the drafter against the target; its context matches ctx.
LoadedDraft load_draft(const DraftArgs& a, TargetModel& target, int ctx);

}  // namespace df::cli
