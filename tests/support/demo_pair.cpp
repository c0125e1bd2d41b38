#include "support/demo_pair.h"

namespace df::test {

std::string demo_model_path(const std::string& name) {
  return std::string(DELTAFLASH_SOURCE_DIR) + "/models/demo/" + name;
}

DemoPair::DemoPair(Backend& be)
    : target_file(gguf::File::open(demo_model_path("qwen35-demo-target-q8_0.gguf"))),
      draft_file(gguf::File::open(demo_model_path("qwen35-demo-drafter-q8_0.gguf"))),
      target(*target_file, be, ModelOptions{}),
      draft(*draft_file, target),
      tok(Vocab::from_gguf(*target_file)) {}

}  // namespace df::test
