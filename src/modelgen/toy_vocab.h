// A small, deterministic byte-level BPE vocabulary in the layout of Qwen's (internal to modelgen):
// the 256 GPT-2 byte tokens, merges learned from a built-in English/code text, then Qwen's
// special tokens, with a ChatML chat template.
#pragma once
#include <cstddef>
#include <cstdint>

#include "model/hparams.h"
#include "tokenizer/tokenizer.h"

namespace df::modelgen {

// pre is "qwen35" for qwen35 and "qwen2" for qwen3. eos = <|im_end|>, pad = bos = <|endoftext|>,
// add_bos false, as in the real files. max_tokens caps the size by keeping only the first merges
// (convert fits the toy vocabulary into small checkpoints' embeddings); throws df::Error when it
// is below the 256 byte tokens plus the special tokens.
Vocab make_toy_vocab(Arch arch, size_t max_tokens = SIZE_MAX);

}  // namespace df::modelgen
