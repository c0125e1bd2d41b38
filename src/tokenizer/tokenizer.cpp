// Tokenizer: special-token split -> UTF-8 repair -> regex pre-tokens -> byte-level BPE; and the
// reverse mapping from ids to raw bytes. All members are read-only after construction, so
// encode/decode may run concurrently from any number of threads.
#include "tokenizer/tokenizer.h"

#include <string_view>
#include <unordered_map>

#include "tokenizer/bpe.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab_check.h"
#include "util/error.h"

namespace df {
namespace {

bool is_special_type(TokenType t) {
  return t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown;
}

// Token texts that end generation when they are special tokens (llama.cpp's list, the part
// that concerns Qwen and ChatML-style models).
bool ends_generation(std::string_view text) {
  return text == "<|im_end|>" || text == "<|endoftext|>" || text == "<|fim_pad|>" ||
         text == "<|repo_name|>" || text == "<|file_sep|>" || text == "<|eot_id|>";
}

}  // namespace

struct Tokenizer::Impl {
  PreTokenizer pre;
  BpeModel bpe;
  SpecialTokenSplitter specials;
  std::vector<std::string> bytes;                     // raw bytes of each token
  std::unordered_map<std::string_view, int32_t> id_of_bytes;  // views into `bytes`
  std::vector<uint8_t> eog;

  explicit Impl(const Vocab& v) : pre(v.pre), bpe(v.tokens, v.merges), specials(v) {
    const size_t n = v.tokens.size();
    bytes.resize(n);
    eog.assign(n, 0);
    id_of_bytes.reserve(n * 2);
    for (size_t i = 0; i < n; ++i) {
      const auto type = static_cast<TokenType>(v.token_types[i]);
      if (type == TokenType::Normal || type == TokenType::Byte) {
        bytes[i] = byte_unicode::decode(v.tokens[i]);
      } else if (type != TokenType::Unused) {
        bytes[i] = v.tokens[i];  // special tokens are stored as plain text
      }  // unused ("[PAD123]") tokens decode to nothing, as in llama.cpp
      if (type != TokenType::Unused) {
        // Prefer a special token over a normal one with the same bytes; else the lowest id.
        auto [it, inserted] = id_of_bytes.try_emplace(bytes[i], static_cast<int32_t>(i));
        if (!inserted && is_special_type(type) &&
            !is_special_type(static_cast<TokenType>(v.token_types[it->second]))) {
          it->second = static_cast<int32_t>(i);
        }
      }
      if ((type == TokenType::Control || type == TokenType::UserDefined) &&
          ends_generation(v.tokens[i])) {
        eog[i] = 1;
      }
    }
    for (int32_t id : {v.eos_id, v.eot_id}) {
      if (id >= 0) eog[id] = 1;
    }
  }
};

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {
  if (vocab_.model != "gpt2") {
    fail("unsupported tokenizer model '{}' (tokenizer.ggml.model); only 'gpt2' (byte-level BPE) "
         "is supported",
         vocab_.model);
  }
  if (vocab_.token_types.empty()) {
    vocab_.token_types.assign(vocab_.tokens.size(), static_cast<int32_t>(TokenType::Normal));
  }
  check_vocab(vocab_, "vocab");
  impl_ = std::make_unique<Impl>(vocab_);
}

Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  std::vector<TextFragment> fragments;
  impl_->specials.split(text, parse_special, fragments);

  std::vector<std::string_view> words;
  BpeScratch scratch;
  std::string repaired;
  for (const TextFragment& f : fragments) {
    if (f.token >= 0) {
      out.push_back(f.token);
      continue;
    }
    std::string_view piece = text.substr(f.offset, f.length);
    if (!utf8::is_valid(piece)) {
      // Invalid UTF-8: same repair as llama.cpp (bad bytes become U+FFFD), per fragment as
      // llama.cpp does it after the special-token split.
      repaired = utf8::repair_like_llama_cpp(piece);
      piece = repaired;
    }
    words.clear();
    impl_->pre.split(piece, words);
    for (std::string_view w : words) impl_->bpe.encode(w, out, scratch);
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= n_vocab()) {
    fail("token id {} is out of range (the vocabulary has {} tokens)", id, n_vocab());
  }
  return impl_->bytes[id];
}

int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(vocab_.tokens.size()); }

bool Tokenizer::is_eog(int32_t id) const {
  return id >= 0 && id < n_vocab() && impl_->eog[id] != 0;
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  auto it = impl_->id_of_bytes.find(text);
  if (it == impl_->id_of_bytes.end()) return std::nullopt;
  return it->second;
}

}  // namespace df
