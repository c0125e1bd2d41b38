// StreamDecoder: emits only complete, valid UTF-8; holds a tail that could still become a
// valid character, and replaces everything else by U+FFFD (one per maximal ill-formed part).
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace df {

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_.token_bytes(id);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const utf8::Decoded d = utf8::decode_strict(pending_, i);
    if (d.valid) {
      out.append(pending_, i, d.length);
    } else if (d.incomplete) {
      break;  // a later token may complete it
    } else {
      out += utf8::kReplacement;
    }
    i += d.length;
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8::replace_invalid(pending_);
  pending_.clear();
  return out;
}

}  // namespace df
