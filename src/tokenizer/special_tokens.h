// Cuts text at occurrences of special-token strings before pre-tokenization, as llama.cpp does:
// tokens are tried longest first, each splitting every remaining text fragment at all of its
// occurrences. CONTROL (and UNKNOWN) tokens are only matched when parse_special is true;
// USER_DEFINED tokens are always matched (llama.cpp and HF agree: such added tokens are part
// of the ordinary vocabulary, e.g. Qwen's "<think>").
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace df {

struct Vocab;

struct TextFragment {
  size_t offset = 0, length = 0;  // raw text to pre-tokenize when token < 0
  int32_t token = -1;             // a special token matched as a whole
};

class SpecialTokenSplitter {
 public:
  explicit SpecialTokenSplitter(const Vocab& vocab);
  void split(std::string_view text, bool parse_special, std::vector<TextFragment>& out) const;

 private:
  struct Entry {
    std::string text;
    int32_t id;
    bool needs_parse_special;
  };
  std::vector<Entry> entries_;  // longest text first, then lowest id
};

}  // namespace df
