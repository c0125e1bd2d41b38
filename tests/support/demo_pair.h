// The bundled demo target and drafter (models/demo/), loaded on a backend the test chooses (the
// CPU backend, or a wrapper around it that watches the ops).
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"
#include "gguf/gguf.h"
#include "model/draft_model.h"
#include "model/target_model.h"
#include "tokenizer/tokenizer.h"

namespace df::test {

std::string demo_model_path(const std::string& name);  // models/demo/<name>

struct DemoPair {
  explicit DemoPair(Backend& be);
  std::unique_ptr<gguf::File> target_file, draft_file;
  TargetModel target;
  DraftModel draft;
  Tokenizer tok;
};

}  // namespace df::test
