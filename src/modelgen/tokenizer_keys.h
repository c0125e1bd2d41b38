// The tokenizer.* metadata of a GGUF file as key/value pairs, from a Vocab, another GGUF file or
// a Hugging Face tokenizer.json; shared by make-model and convert.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "model/hparams.h"
#include "tokenizer/tokenizer.h"

namespace df::modelgen {

// In file order.
using TokenizerKeys = std::vector<std::pair<std::string, gguf::Value>>;

TokenizerKeys tokenizer_keys(const Vocab& v);
// Every tokenizer.* key of another GGUF file, verbatim (the --vocab FILE.gguf option).
TokenizerKeys tokenizer_keys_from_gguf(const std::string& path);
// dir/tokenizer.json (+ tokenizer_config.json when present), with the pre-tokenizer name of the
// architecture; ids below min_vocab that the tokenizer lacks become "[PAD<i>]".
TokenizerKeys tokenizer_keys_from_hf_dir(const std::string& dir, Arch arch, int64_t min_vocab);

int64_t token_count(const TokenizerKeys& kv);
// Pads the token list to n_vocab with "[PAD<i>]" tokens of type UNUSED, as llama.cpp's converter
// does for embedding rows past the tokenizer's last id.
void pad_tokens(TokenizerKeys& kv, int64_t n_vocab);

}  // namespace df::modelgen
