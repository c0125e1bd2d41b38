#include "tokenizer/special_tokens.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace df {

SpecialTokenSplitter::SpecialTokenSplitter(const Vocab& vocab) {
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    const auto type = static_cast<TokenType>(vocab.token_types[i]);
    const bool control = type == TokenType::Control || type == TokenType::Unknown;
    if (!control && type != TokenType::UserDefined) continue;
    if (vocab.tokens[i].empty()) continue;  // would match everywhere
    entries_.push_back({vocab.tokens[i], static_cast<int32_t>(i), control});
  }
  std::stable_sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) {
    return a.text.size() > b.text.size();
  });
}

void SpecialTokenSplitter::split(std::string_view text, bool parse_special,
                                 std::vector<TextFragment>& out) const {
  out.clear();
  if (text.empty()) return;
  out.push_back({0, text.size(), -1});
  std::vector<TextFragment> next;
  for (const Entry& e : entries_) {
    if (e.needs_parse_special && !parse_special) continue;
    next.clear();
    bool found = false;
    for (const TextFragment& f : out) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      const std::string_view piece = text.substr(f.offset, f.length);
      size_t start = 0;
      for (size_t hit = piece.find(e.text); hit != std::string_view::npos;
           hit = piece.find(e.text, start)) {
        found = true;
        if (hit > start) next.push_back({f.offset + start, hit - start, -1});
        next.push_back({f.offset + hit, e.text.size(), e.id});
        start = hit + e.text.size();
      }
      if (start < piece.size()) next.push_back({f.offset + start, piece.size() - start, -1});
    }
    if (found) out.swap(next);
  }
}

}  // namespace df
