// Byte-level BPE tokenizer built from GGUF metadata (tokenizer.ggml.*), with the qwen2 and
// qwen35 pre-tokenizers. Special/added tokens are matched as whole strings before
// pre-tokenization unless parse_special is false.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace df::gguf {
class File;
}

namespace df {

enum class TokenType : int32_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

// The vocabulary as GGUF stores it; also what make-model and the converter write.
struct Vocab {
  std::string model = "gpt2";           // tokenizer.ggml.model
  std::string pre = "qwen35";           // tokenizer.ggml.pre
  std::vector<std::string> tokens;      // GPT-2 byte-to-unicode form
  std::vector<int32_t> token_types;     // TokenType values
  std::vector<std::string> merges;      // "A B", rank = index
  int32_t eos_id = -1, bos_id = -1, pad_id = -1, eot_id = -1;
  bool add_bos = false;
  std::string chat_template;            // empty when absent

  // Reads tokenizer.ggml.* and tokenizer.chat_template; throws df::Error naming the problem.
  static Vocab from_gguf(const gguf::File& f);
};

class Tokenizer {
 public:
  // Throws df::Error for unsupported models ("gpt2" only) or unknown pre-tokenizer names.
  explicit Tokenizer(Vocab vocab);
  ~Tokenizer();

  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  // Raw bytes of the tokens concatenated (may split UTF-8 sequences between calls).
  std::string decode(std::span<const int32_t> ids) const;
  // Raw bytes of one token (control tokens give their text, e.g. "<|im_end|>").
  const std::string& token_bytes(int32_t id) const;

  int32_t n_vocab() const;
  const Vocab& vocab() const { return vocab_; }
  bool is_eog(int32_t id) const;  // end of generation: eos, eot, <|im_end|>, <|endoftext|>, ...
  std::optional<int32_t> find_token(std::string_view text) const;  // exact token string (decoded bytes)

 private:
  struct Impl;
  Vocab vocab_;
  std::unique_ptr<Impl> impl_;
};

// Turns a stream of token ids into text that never ends inside a UTF-8 sequence: bytes of an
// incomplete character are held until the next token completes them (or flush()).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(tok) {}
  std::string push(int32_t id);
  std::string flush();  // whatever is held, with invalid bytes replaced by U+FFFD

 private:
  const Tokenizer& tok_;
  std::string pending_;
};

}  // namespace df
