// Byte-level BPE on one pre-token: start from one symbol per byte (its GPT-2 stand-in token)
// and repeatedly merge the adjacent pair with the lowest merge rank, leftmost first on ties
// (the rule of HF tokenizers and llama.cpp). Symbols are token ids, so no strings are built
// while encoding.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace df {

// Per-call working memory, reused across the pre-tokens of one encode call.
struct BpeScratch {
  struct Candidate {
    int32_t rank, left, right, left_id, right_id, merged_id;
  };
  std::vector<int32_t> ids, prev, next;
  std::vector<Candidate> heap;
};

class BpeModel {
 public:
  // tokens: all token strings by id (GPT-2 form for byte-level tokens); merges: "A B", rank =
  // index, already validated to contain exactly one separating space.
  BpeModel(const std::vector<std::string>& tokens, const std::vector<std::string>& merges);

  // Appends the ids for the raw bytes of one pre-token. Throws df::Error when the vocabulary
  // lacks the stand-in token of a byte that occurs. Thread-safe (const, no shared state).
  void encode(std::string_view bytes, std::vector<int32_t>& out, BpeScratch& scratch) const;

  size_t n_merges() const { return merge_.size(); }

 private:
  struct MergeResult {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void append_symbol(int32_t id, std::vector<int32_t>& out) const;

  int32_t n_tokens_ = 0;
  int32_t byte_token_[256];
  std::unordered_map<uint64_t, MergeResult> merge_;
  // A merge may produce (or use) a string that is not a token. It gets a "virtual" id
  // n_tokens_ + k so later merges can build on it; if one survives to the output, it is
  // written as the two parts it was merged from.
  std::vector<std::pair<int32_t, int32_t>> virtual_parts_;
};

}  // namespace df
