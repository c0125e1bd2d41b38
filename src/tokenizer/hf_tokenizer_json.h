// Builds the GGUF-style Vocab from a Hugging Face tokenizer.json (+ tokenizer_config.json), with
// the rules of llama.cpp's converter (get_vocab_base): model vocab tokens are NORMAL; added tokens
// are CONTROL when marked special or when they look special ("<|...|>"), else USER_DEFINED;
// ids missing below the vocabulary size become "[PAD<i>]" of type UNUSED.
// Used by make-model --vocab and the converter.
#pragma once
#include <cstddef>
#include <string>

#include "tokenizer/tokenizer.h"

namespace df {

// tokenizer_config_path may be empty (then no chat template and no eos/bos/pad ids).
// pre: the pre-tokenizer name to record, "qwen2" (Qwen2/Qwen3) or "qwen35" (Qwen3.5).
// min_vocab_size: the model's vocab_size (embedding rows) when larger than max id + 1, so the
// token list matches the embedding matrix as llama.cpp's converter makes it; 0 = max id + 1.
// The chat template comes from tokenizer_config.json's "chat_template" or, when that is
// absent, from a chat_template.jinja file next to it (newer HF layouts).
// Throws df::Error naming the file and the problem.
Vocab vocab_from_hf_tokenizer(const std::string& tokenizer_json_path,
                              const std::string& tokenizer_config_path, const std::string& pre,
                              size_t min_vocab_size = 0);

}  // namespace df
