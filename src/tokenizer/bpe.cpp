#include "tokenizer/bpe.h"

#include <algorithm>

#include "tokenizer/byte_unicode.h"
#include "util/error.h"

namespace df {

BpeModel::BpeModel(const std::vector<std::string>& tokens, const std::vector<std::string>& merges)
    : n_tokens_(static_cast<int32_t>(tokens.size())) {
  // Later ids win on duplicate strings, as in llama.cpp's token_to_id.
  std::unordered_map<std::string_view, int32_t> id_of;
  id_of.reserve(tokens.size() * 2);
  for (int32_t i = 0; i < n_tokens_; ++i) id_of[tokens[i]] = i;

  for (int b = 0; b < 256; ++b) {
    auto it = id_of.find(byte_unicode::utf8_of_byte(static_cast<uint8_t>(b)));
    byte_token_[b] = it == id_of.end() ? -1 : it->second;
  }

  std::unordered_map<std::string, int32_t> virtual_id_of;
  auto lookup = [&](const std::string& s) -> int32_t {
    if (auto it = id_of.find(s); it != id_of.end()) return it->second;
    auto [it, inserted] = virtual_id_of.try_emplace(s, n_tokens_ + static_cast<int32_t>(virtual_parts_.size()));
    if (inserted) virtual_parts_.emplace_back(-1, -1);
    return it->second;
  };

  merge_.reserve(merges.size() * 2);
  std::string left, right;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& m = merges[rank];
    const size_t sp = m.find(' ');
    left.assign(m, 0, sp);
    right.assign(m, sp + 1);
    const int32_t a = lookup(left);
    const int32_t b = lookup(right);
    const int32_t ab = lookup(left + right);
    if (ab >= n_tokens_ && virtual_parts_[ab - n_tokens_].first < 0) virtual_parts_[ab - n_tokens_] = {a, b};
    // The first (lowest-rank) occurrence of a pair wins, as in llama.cpp and HF.
    merge_.try_emplace(key(a, b), MergeResult{static_cast<int32_t>(rank), ab});
  }
}

void BpeModel::append_symbol(int32_t id, std::vector<int32_t>& out) const {
  if (id < n_tokens_) {
    out.push_back(id);
    return;
  }
  const auto [a, b] = virtual_parts_[id - n_tokens_];
  append_symbol(a, out);
  append_symbol(b, out);
}

void BpeModel::encode(std::string_view bytes, std::vector<int32_t>& out, BpeScratch& s) const {
  const int32_t n = static_cast<int32_t>(bytes.size());
  if (n == 0) return;
  s.ids.resize(n);
  s.prev.resize(n);
  s.next.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    const uint8_t b = static_cast<uint8_t>(bytes[i]);
    const int32_t id = byte_token_[b];
    if (id < 0) fail("tokenizer: the vocabulary has no token for byte 0x{:02X}", b);
    s.ids[i] = id;
    s.prev[i] = i - 1;
    s.next[i] = i + 1 < n ? i + 1 : -1;
  }
  if (n == 1) {
    out.push_back(s.ids[0]);
    return;
  }

  // Min-heap on (rank, left position): the lowest rank merges first, the leftmost on ties.
  const auto later = [](const BpeScratch::Candidate& x, const BpeScratch::Candidate& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.left > y.left;
  };
  s.heap.clear();
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    auto it = merge_.find(key(s.ids[left], s.ids[right]));
    if (it == merge_.end()) return;
    s.heap.push_back({it->second.rank, left, right, s.ids[left], s.ids[right], it->second.merged_id});
    std::push_heap(s.heap.begin(), s.heap.end(), later);
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i, i + 1);

  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), later);
    const BpeScratch::Candidate c = s.heap.back();
    s.heap.pop_back();
    // Skip candidates made stale by an earlier merge (a symbol died or changed).
    if (s.ids[c.right] < 0 || s.next[c.left] != c.right || s.ids[c.left] != c.left_id ||
        s.ids[c.right] != c.right_id) {
      continue;
    }
    s.ids[c.left] = c.merged_id;
    s.ids[c.right] = -1;
    const int32_t after = s.next[c.right];
    s.next[c.left] = after;
    if (after >= 0) s.prev[after] = c.left;
    consider(s.prev[c.left], c.left);
    consider(c.left, after);
  }

  for (int32_t i = 0; i >= 0; i = s.next[i]) append_symbol(s.ids[i], out);
}

}  // namespace df
