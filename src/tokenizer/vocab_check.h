// Consistency checks shared by Vocab::from_gguf, the HF loader and the Tokenizer constructor.
#pragma once
#include <string_view>

namespace df {

struct Vocab;

// Throws df::Error starting with `where` (a file name or "vocab") when: there are no tokens,
// token_types and tokens differ in length, a type is not 1..6, a merge is not "A B" (exactly
// one space, both sides non-empty), or a special id (eos/bos/pad/eot) is neither -1 nor a
// valid token id.
void check_vocab(const Vocab& v, std::string_view where);

}  // namespace df
