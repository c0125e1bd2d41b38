#include "modelgen/tokenizer_keys.h"

#include <filesystem>

#include "tokenizer/hf_tokenizer_json.h"
#include "util/error.h"

namespace df::modelgen {

namespace {

namespace fs = std::filesystem;
using gguf::Value;
using gguf::ValueType;

const Value* find_key(const TokenizerKeys& kv, std::string_view key) {
  for (const auto& [k, v] : kv)
    if (k == key) return &v;
  return nullptr;
}

Value* find_key(TokenizerKeys& kv, std::string_view key) {
  return const_cast<Value*>(find_key(static_cast<const TokenizerKeys&>(kv), key));
}

}  // namespace

TokenizerKeys tokenizer_keys(const Vocab& v) {
  TokenizerKeys kv;
  kv.emplace_back("tokenizer.ggml.model", Value::of_string(v.model));
  kv.emplace_back("tokenizer.ggml.pre", Value::of_string(v.pre));
  kv.emplace_back("tokenizer.ggml.tokens", Value::of_string_array(v.tokens));
  kv.emplace_back("tokenizer.ggml.token_type",
                  Value::of_int_array(ValueType::I32, std::vector<int64_t>(v.token_types.begin(), v.token_types.end())));
  kv.emplace_back("tokenizer.ggml.merges", Value::of_string_array(v.merges));
  auto id = [&](const char* key, int32_t value) {
    if (value >= 0) kv.emplace_back(key, Value::of_u32(uint32_t(value)));
  };
  id("tokenizer.ggml.eos_token_id", v.eos_id);
  id("tokenizer.ggml.padding_token_id", v.pad_id);
  id("tokenizer.ggml.bos_token_id", v.bos_id);
  id("tokenizer.ggml.eot_token_id", v.eot_id);
  kv.emplace_back("tokenizer.ggml.add_bos_token", Value::of_bool(v.add_bos));
  if (!v.chat_template.empty()) kv.emplace_back("tokenizer.chat_template", Value::of_string(v.chat_template));
  return kv;
}

TokenizerKeys tokenizer_keys_from_gguf(const std::string& path) {
  const std::unique_ptr<gguf::File> f = gguf::File::open(path);
  TokenizerKeys kv;
  for (const auto& [key, value] : f->metadata())
    if (key.rfind("tokenizer.", 0) == 0) kv.emplace_back(key, value);
  const Value* tokens = find_key(kv, "tokenizer.ggml.tokens");
  if (!tokens || !tokens->is_array() || tokens->elem_type != ValueType::STRING)
    fail("--vocab {}: no tokenizer.ggml.tokens string array to copy", path);
  return kv;
}

TokenizerKeys tokenizer_keys_from_hf_dir(const std::string& dir, Arch arch, int64_t min_vocab) {
  std::error_code ec;
  const fs::path json = fs::path(dir) / "tokenizer.json", config = fs::path(dir) / "tokenizer_config.json";
  if (!fs::is_regular_file(json, ec)) fail("{}: no tokenizer.json there", dir);
  const std::string pre = arch == Arch::Qwen35 ? "qwen35" : "qwen2";
  return tokenizer_keys(vocab_from_hf_tokenizer(json.string(), fs::is_regular_file(config, ec) ? config.string() : "",
                                                pre, size_t(std::max<int64_t>(min_vocab, 0))));
}

int64_t token_count(const TokenizerKeys& kv) {
  const Value* tokens = find_key(kv, "tokenizer.ggml.tokens");
  return tokens ? int64_t(tokens->strings.size()) : 0;
}

void pad_tokens(TokenizerKeys& kv, int64_t n_vocab) {
  Value* tokens = find_key(kv, "tokenizer.ggml.tokens");
  Value* types = find_key(kv, "tokenizer.ggml.token_type");
  if (tokens == nullptr) fail("internal: padding a vocabulary without tokenizer.ggml.tokens");
  for (int64_t i = int64_t(tokens->strings.size()); i < n_vocab; ++i) {
    tokens->strings.push_back(fmt::format("[PAD{}]", i));
    if (types) types->ints.push_back(int64_t(TokenType::Unused));
  }
}

}  // namespace df::modelgen
