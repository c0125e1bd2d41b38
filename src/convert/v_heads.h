// The DeltaNet value-head permutation between Hugging Face and GGUF.
//
// With n_v = r * n_k value heads, HF groups them by key head: value head j = kh * r + m uses
// q/k head kh. GGUF (llama.cpp, for ggml's broadcasting) tiles them: value head j' = m * n_k + kh
// uses q/k head j' % n_k. Every tensor that is indexed by value head is reordered the same way,
// so the layer computes exactly what HF computes. With n_v == n_k the permutation is the identity.
#pragma once
#include <cstdint>
#include <vector>

namespace df::convert {

// For an axis of `length` entries whose entries [offset, offset + n_v * block) are n_v value
// heads of `block` consecutive entries each (in HF order), returns for every GGUF position the
// HF position it takes its entry from. Entries outside that range keep their place.
std::vector<int64_t> v_head_source_index(int64_t length, int64_t offset, int64_t block, int n_k, int n_v);

}  // namespace df::convert
