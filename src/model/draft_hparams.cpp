#include "model/draft_hparams.h"

#include "gguf/gguf.h"
#include "model/hparams.h"
#include "util/error.h"

namespace df {

namespace {
std::string key(const char* name) { return std::string(kDraftArch) + "." + name; }
// The mask token of the published Qwen3.5/3.6 drafters, used when a file does not say.
constexpr int32_t kQwen35MaskToken = 248070;
constexpr int64_t kQwen35Vocab = 248320;
}  // namespace

DraftHParams DraftHParams::from_gguf(const gguf::File& f) {
  const std::string arch = f.get_string("general.architecture");
  if (arch != kDraftArch && arch != "dflash-draft")
    fail("{}: architecture '{}' is not a DFlash drafter ({})", f.path(), arch, kDraftArch);
  DraftHParams h;
  h.n_layer = int(f.get_u32(key("block_count")));
  h.n_embd = int(f.get_u32(key("embedding_length")));
  h.n_ff = int(f.get_u32(key("feed_forward_length")));
  h.n_head = int(f.get_u32(key("attention.head_count")));
  h.n_head_kv = int(f.get_u32(key("attention.head_count_kv")));
  h.head_dim = int(f.get_u32_or(key("attention.key_length"), h.n_head ? uint32_t(h.n_embd / h.n_head) : 0));
  if (int(f.get_u32_or(key("attention.value_length"), uint32_t(h.head_dim))) != h.head_dim)
    fail("{}: drafter key and value head sizes differ", f.path());
  h.n_ctx_train = int(f.get_u32_or(key("context_length"), 32768));
  h.rms_eps = f.get_f32_or(key("attention.layer_norm_rms_epsilon"), 1e-6f);
  h.rope_theta = f.get_f32_or(key("rope.freq_base"), 1e6f);
  h.n_vocab = f.get_u32_or(key("vocab_size"), 0);
  h.block_size = int(f.get_u32_or(key("dflash.block_size"), 16));
  const int n_target = int(f.get_u32(key("dflash.n_target_layers")));
  if (f.has(key("dflash.mask_token_id"))) {
    h.mask_token_id = int32_t(f.get_u32(key("dflash.mask_token_id")));
  } else if (h.n_vocab == kQwen35Vocab) {
    h.mask_token_id = kQwen35MaskToken;
  } else {
    fail("{}: no {} and no known default for a vocabulary of {}", f.path(), key("dflash.mask_token_id"), h.n_vocab);
  }
  if (f.has(key("dflash.target_layer_ids"))) {
    for (int64_t id : f.get_int_array(key("dflash.target_layer_ids"))) h.target_layer_ids.push_back(int(id));
    if (h.n_target_layers() != n_target)
      fail("{}: {} target layer ids but dflash.n_target_layers = {}", f.path(), h.n_target_layers(), n_target);
  } else {
    h.target_layer_ids.assign(size_t(n_target), -1);  // resolved against the target (validate_against)
  }
  h.validate(f.path());
  return h;
}

void DraftHParams::to_gguf(gguf::Writer& w) const {
  using gguf::Value;
  w.set("general.architecture", Value::of_string(kDraftArch));
  w.set(key("context_length"), Value::of_u32(uint32_t(n_ctx_train)));
  w.set(key("embedding_length"), Value::of_u32(uint32_t(n_embd)));
  w.set(key("block_count"), Value::of_u32(uint32_t(n_layer)));
  w.set(key("feed_forward_length"), Value::of_u32(uint32_t(n_ff)));
  w.set(key("attention.head_count"), Value::of_u32(uint32_t(n_head)));
  w.set(key("attention.head_count_kv"), Value::of_u32(uint32_t(n_head_kv)));
  w.set(key("attention.key_length"), Value::of_u32(uint32_t(head_dim)));
  w.set(key("attention.value_length"), Value::of_u32(uint32_t(head_dim)));
  w.set(key("vocab_size"), Value::of_u32(uint32_t(n_vocab)));
  w.set(key("attention.layer_norm_rms_epsilon"), Value::of_f32(rms_eps));
  w.set(key("rope.freq_base"), Value::of_f32(rope_theta));
  w.set(key("dflash.n_target_layers"), Value::of_u32(uint32_t(n_target_layers())));
  w.set(key("dflash.block_size"), Value::of_u32(uint32_t(block_size)));
  w.set(key("dflash.mask_token_id"), Value::of_u32(uint32_t(mask_token_id)));
  std::vector<int64_t> ids(target_layer_ids.begin(), target_layer_ids.end());
  w.set(key("dflash.target_layer_ids"), Value::of_int_array(gguf::ValueType::I32, ids));
}

void DraftHParams::validate(const std::string& where) const {
  auto in_range = [&](int v, int hi, const char* what) {
    if (v <= 0 || v > hi) fail("{}: drafter {} = {} is out of range (1..{})", where, what, v, hi);
  };
  in_range(n_layer, 1024, "block_count");
  in_range(n_embd, 131072, "embedding_length");
  in_range(n_ff, 524288, "feed_forward_length");
  in_range(n_head, 1024, "attention.head_count");
  in_range(n_head_kv, 1024, "attention.head_count_kv");
  in_range(head_dim, 512, "attention.key_length");
  in_range(block_size, 64, "dflash.block_size");
  in_range(n_target_layers(), 64, "dflash.n_target_layers");
  if (block_size < 2) fail("{}: drafter block size {} < 2", where, block_size);
  if (n_head % n_head_kv != 0) fail("{}: drafter head count {} is not a multiple of {}", where, n_head, n_head_kv);
  if (mask_token_id < 0) fail("{}: drafter mask token id {} is negative", where, mask_token_id);
}

void DraftHParams::validate_against(const HParams& t, const std::string& where) const {
  if (n_embd != t.n_embd)
    fail("{}: drafter hidden size {} does not match the target's {}", where, n_embd, t.n_embd);
  if (n_vocab != 0 && n_vocab != t.n_vocab)
    fail("{}: drafter vocabulary {} does not match the target's {}", where, n_vocab, t.n_vocab);
  if (mask_token_id >= t.n_vocab)
    fail("{}: drafter mask token {} is outside the target's vocabulary of {}", where, mask_token_id, t.n_vocab);
  for (int id : target_layer_ids)
    if (id != -1 && (id < 0 || id >= t.n_layer))
      fail("{}: drafter target layer {} is outside the target's {} layers", where, id, t.n_layer);
}

std::vector<int> DraftHParams::default_layer_ids(int n_target_layer, int n) {
  std::vector<int> ids;
  if (n == 1) return {1};
  const int step = (n_target_layer - 2) / (n - 1);
  for (int k = 0; k < n; ++k) ids.push_back(1 + k * step);
  return ids;
}

}  // namespace df
