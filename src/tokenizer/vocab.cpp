// Vocab::from_gguf: the tokenizer.ggml.* keys (see docs: qwen35-architecture.md section 7.4).
// Kept apart from the tokenizer so that only code which reads GGUF files links the reader.
#include <cstdint>
#include <string>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab_check.h"
#include "util/error.h"

namespace df {
namespace {

// Optional token id: -1 when absent; range-checked against the vocabulary size.
int32_t optional_id(const gguf::File& f, const char* key, size_t n_tokens) {
  if (!f.has(key)) return -1;
  const uint32_t id = f.get_u32(key);
  if (id >= n_tokens) {
    fail("{}: {} = {} is out of range (the vocabulary has {} tokens)", f.path(), key, id, n_tokens);
  }
  return static_cast<int32_t>(id);
}

}  // namespace

Vocab Vocab::from_gguf(const gguf::File& f) {
  Vocab v;
  v.model = f.get_string("tokenizer.ggml.model");
  // llama.cpp reads a missing pre-tokenizer name as "default"; the Tokenizer rejects it by name.
  v.pre = f.get_string_or("tokenizer.ggml.pre", "default");
  v.tokens = f.get_string_array("tokenizer.ggml.tokens");
  const size_t n = v.tokens.size();

  if (f.has("tokenizer.ggml.token_type")) {
    const std::vector<int64_t>& types = f.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != n) {
      fail("{}: tokenizer.ggml.token_type has {} entries but tokenizer.ggml.tokens has {}", f.path(),
           types.size(), n);
    }
    v.token_types.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      if (types[i] < 1 || types[i] > 6) {
        fail("{}: tokenizer.ggml.token_type[{}] = {} (token '{}'), expected 1..6", f.path(), i,
             types[i], v.tokens[i]);
      }
      v.token_types.push_back(static_cast<int32_t>(types[i]));
    }
  } else {
    // As in llama.cpp: without types every token is a normal one.
    v.token_types.assign(n, static_cast<int32_t>(TokenType::Normal));
  }

  if (f.has("tokenizer.ggml.merges")) {
    v.merges = f.get_string_array("tokenizer.ggml.merges");
  } else if (v.model == "gpt2") {
    fail("{}: tokenizer.ggml.merges is missing (required for the 'gpt2' BPE model)", f.path());
  }

  v.eos_id = optional_id(f, "tokenizer.ggml.eos_token_id", n);
  v.bos_id = optional_id(f, "tokenizer.ggml.bos_token_id", n);
  v.pad_id = optional_id(f, "tokenizer.ggml.padding_token_id", n);
  v.eot_id = optional_id(f, "tokenizer.ggml.eot_token_id", n);
  v.add_bos = f.get_bool_or("tokenizer.ggml.add_bos_token", false);
  v.chat_template = f.get_string_or("tokenizer.chat_template", "");

  check_vocab(v, f.path());
  return v;
}

}  // namespace df
