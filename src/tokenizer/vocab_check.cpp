#include "tokenizer/vocab_check.h"

#include <cstdint>
#include <limits>

#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace df {

void check_vocab(const Vocab& v, std::string_view where) {
  if (v.tokens.empty()) fail("{}: the vocabulary has no tokens", where);
  if (v.tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    fail("{}: {} tokens is more than int32 ids can address", where, v.tokens.size());
  }
  if (v.token_types.size() != v.tokens.size()) {
    fail("{}: {} token types for {} tokens (tokenizer.ggml.token_type and tokenizer.ggml.tokens "
         "must have the same length)",
         where, v.token_types.size(), v.tokens.size());
  }
  for (size_t i = 0; i < v.token_types.size(); ++i) {
    const int32_t t = v.token_types[i];
    if (t < static_cast<int32_t>(TokenType::Normal) || t > static_cast<int32_t>(TokenType::Byte)) {
      fail("{}: token {} ('{}') has type {}, expected 1..6 (normal, unknown, control, "
           "user-defined, unused, byte)",
           where, i, v.tokens[i], t);
    }
  }
  for (size_t i = 0; i < v.merges.size(); ++i) {
    const std::string& m = v.merges[i];
    const size_t sp = m.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == m.size() ||
        m.find(' ', sp + 1) != std::string::npos) {
      fail("{}: merge {} is '{}', expected two non-empty parts separated by one space", where, i, m);
    }
  }
  const auto n = static_cast<int64_t>(v.tokens.size());
  const std::pair<const char*, int32_t> ids[] = {
      {"eos", v.eos_id}, {"bos", v.bos_id}, {"padding", v.pad_id}, {"eot", v.eot_id}};
  for (const auto& [what, id] : ids) {
    if (id != -1 && (id < 0 || id >= n)) {
      fail("{}: {} token id {} is out of range (vocabulary has {} tokens)", where, what, id, n);
    }
  }
}

}  // namespace df
