// Opening a model file for the CLI commands: the GGUF, its tokenizer, the backend and the
// target model, with a progress bar while the weights are paged in.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"
#include "gguf/gguf.h"
#include "model/target_model.h"
#include "tokenizer/tokenizer.h"

namespace df::cli {

struct LoadedModel {
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<TargetModel> model;
};

// threads: 0 = all cores. max_batch_rows bounds the prefill chunk.
// kv_type: "f16" (default) or "f32".
LoadedModel load_model(const std::string& path, int threads, int max_batch_rows, bool show_progress,
                       const std::string& kv_type = "f16");
// Only the file and tokenizer (tokenize/inspect need no weights).
LoadedModel load_tokenizer(const std::string& path);

// Parses "1,2,3" into token ids; throws df::Error on anything else.
std::vector<int32_t> parse_token_list(const std::string& s);

}  // namespace df::cli
