// Splits text into pre-tokens with the regex of a named pre-tokenizer (tokenizer.ggml.pre),
// the way llama.cpp does for byte-level BPE models. BPE then runs on each pre-token alone.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace df {

class PreTokenizer {
 public:
  // Known names: "qwen2" (Qwen2/Qwen3; also "deepseek-r1-qwen"), "qwen35" (Qwen3.5) and
  // "gpt-2". Throws df::Error naming an unknown name.
  explicit PreTokenizer(std::string_view name);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  static bool is_known(std::string_view name);
  const std::string& name() const { return name_; }

  // Appends the pre-tokens of `text` to `out`; they cover `text` exactly, in order. `text` must
  // be valid UTF-8 except that encoded surrogates are allowed (what utf8::repair_like_llama_cpp
  // returns); the views point into `text`. Safe to call from several threads at once.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  std::string name_;
  void* code_ = nullptr;  // pcre2_code_8*, compiled once (JIT when available)
};

}  // namespace df
