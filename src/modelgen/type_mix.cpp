// The recipes follow llama.cpp's llama_tensor_get_type (src/llama-quant.cpp, ggml-org/llama.cpp
// at 007dbbf) for the parts that apply to qwen35/qwen3 without an importance matrix override,
// plus unsloth's published Qwen3.5 rule for the DeltaNet projections in mix-iq4_xs.
#include "modelgen/type_mix.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <numeric>
#include <tuple>

#include "modelgen/random_fill.h"
#include "util/error.h"

namespace df::modelgen {

namespace {

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = char(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// llama.cpp's "use more bits" layer pattern: the first and last eighth, and every third layer
// in between.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// llama.cpp treats the fused DeltaNet qkv projection like attn_v ("attention-v-like").
bool is_attn_v_like(TensorRole r) { return r == TensorRole::AttnV || r == TensorRole::AttnQkv; }

// llama.cpp quantizes the token embedding like the LM head when there is no output.weight.
bool is_lm_head(TensorRole r, bool tied) {
  return r == TensorRole::Output || (tied && r == TensorRole::TokenEmbd);
}

GgmlType lm_head_type(const PlannedTensor& t) {
  return t.ne[0] % 256 == 0 ? GgmlType::Q6_K : GgmlType::Q8_0;
}

// Position of each tensor in llama.cpp's quantization order (by block index, then by name):
// the attn_v-like and ffn_down counters of the recipes run in this order.
std::vector<size_t> llama_quant_order(const std::vector<PlannedTensor>& ts) {
  std::vector<size_t> idx(ts.size());
  std::iota(idx.begin(), idx.end(), size_t(0));
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    if (ts[a].layer != ts[b].layer) return ts[a].layer < ts[b].layer;
    return ts[a].name < ts[b].name;
  });
  return idx;
}

// Q4_K_M: Q4_K everywhere, Q6_K for the LM head and for attn_v-like / ffn_down tensors picked
// by use_more_bits over their running count.
void mix_q4_k_m(std::vector<PlannedTensor>& ts, bool tied, int n_blocks) {
  const std::vector<size_t> order = llama_quant_order(ts);
  const int n_attn_v = int(std::count_if(ts.begin(), ts.end(), [](const PlannedTensor& t) { return is_attn_v_like(t.role); }));
  int i_attn_v = 0, i_ffn_down = 0;
  for (size_t k : order) {
    PlannedTensor& t = ts[k];
    if (!is_quantizable(t.role)) continue;
    if (is_lm_head(t.role, tied)) {
      t.type = lm_head_type(t);
    } else if (is_attn_v_like(t.role)) {
      t.type = use_more_bits(i_attn_v++, n_attn_v) ? GgmlType::Q6_K : GgmlType::Q4_K;
    } else if (t.role == TensorRole::FfnDown) {
      t.type = use_more_bits(i_ffn_down++, n_blocks) ? GgmlType::Q6_K : GgmlType::Q4_K;
    } else {
      t.type = GgmlType::Q4_K;
    }
  }
}

// IQ4_XS as in unsloth's Qwen3.5 UD-IQ4_XS files, approximately: llama.cpp's IQ4_XS recipe with
// an importance matrix (IQ4_XS everywhere, Q6_K LM head, Q5_K attn_v-like tensors when
// n_head/n_head_kv >= 4), plus unsloth's rule that the small DeltaNet projections ssm_alpha /
// ssm_beta and the quantization-sensitive ssm_out stay Q8_0.
void mix_iq4_xs(std::vector<PlannedTensor>& ts, bool tied, const HParams& hp) {
  const bool wide_gqa = hp.n_head / hp.n_head_kv >= 4;
  for (PlannedTensor& t : ts) {
    if (!is_quantizable(t.role)) continue;
    if (is_lm_head(t.role, tied)) {
      t.type = lm_head_type(t);
    } else if (is_attn_v_like(t.role) && wide_gqa) {
      t.type = GgmlType::Q5_K;
    } else if (t.role == TensorRole::SsmAlpha || t.role == TensorRole::SsmBeta || t.role == TensorRole::SsmOut) {
      t.type = GgmlType::Q8_0;
    } else {
      t.type = GgmlType::IQ4_XS;
    }
  }
}

// llama.cpp falls back per block size; we fall back to the widely supported Q8_0, then F16.
// One notice per (row length, wanted type, fallback) lists the tensors affected.
void apply_fallbacks(std::vector<PlannedTensor>& ts, const std::function<void(const std::string&)>& log) {
  std::map<std::tuple<int64_t, GgmlType, GgmlType>, std::vector<std::string>> moved;
  for (PlannedTensor& t : ts) {
    const int bs = type_traits(t.type).block_size;
    if (t.ne[0] % bs == 0) continue;
    const GgmlType to = t.ne[0] % type_traits(GgmlType::Q8_0).block_size == 0 ? GgmlType::Q8_0 : GgmlType::F16;
    moved[{t.ne[0], t.type, to}].push_back(t.name);
    t.type = to;
  }
  if (!log) return;
  for (const auto& [key, names] : moved) {
    const auto& [ne0, from, to] = key;
    const size_t shown = std::min<size_t>(names.size(), 4);
    log(fmt::format("{} tensor(s) with rows of {} (not a multiple of {}'s block of {}) are written as {}: {}{}",
                    names.size(), ne0, type_name(from), type_traits(from).block_size, type_name(to),
                    fmt::join(names.begin(), names.begin() + ptrdiff_t(shown), ", "),
                    names.size() > shown ? ", ..." : ""));
  }
}

}  // namespace

TypeSpec parse_type_spec(std::string_view name) {
  const std::string n = lower(name);
  if (n == "mix-q4_k_m") return {Recipe::MixQ4KM, GgmlType::Q4_K};
  if (n == "mix-iq4_xs") return {Recipe::MixIQ4XS, GgmlType::IQ4_XS};
  const std::optional<GgmlType> t = type_from_name(n);
  if (!t) fail("unknown --type '{}' (a ggml type such as f16, q8_0, q4_k, q6_k, iq4_xs, or mix-q4_k_m, mix-iq4_xs)", name);
  if (*t == GgmlType::Q8_1 || *t == GgmlType::Q8_K)
    fail("--type {}: an activation format (the dot-product side), not a weight type", name);
  if (!can_generate(*t)) fail("--type {}: make-model cannot write this type (no generator or quantizer)", name);
  return {Recipe::Pure, *t};
}

void assign_types(std::vector<PlannedTensor>& ts, const TypeSpec& spec, const HParams& hp,
                  const std::function<void(const std::string&)>& log) {
  const bool tied = std::none_of(ts.begin(), ts.end(), [](const PlannedTensor& t) { return t.role == TensorRole::Output; });
  for (PlannedTensor& t : ts) t.type = is_quantizable(t.role) ? spec.type : GgmlType::F32;
  if (spec.recipe == Recipe::MixQ4KM) mix_q4_k_m(ts, tied, hp.n_layer + hp.n_nextn);
  if (spec.recipe == Recipe::MixIQ4XS) mix_iq4_xs(ts, tied, hp);
  apply_fallbacks(ts, log);
}

uint32_t file_type_of(const TypeSpec& spec) {
  if (spec.recipe == Recipe::MixQ4KM) return 15;   // LLAMA_FTYPE_MOSTLY_Q4_K_M
  if (spec.recipe == Recipe::MixIQ4XS) return 30;  // LLAMA_FTYPE_MOSTLY_IQ4_XS
  switch (spec.type) {  // llama_ftype ids; K-quants map to their "_S" file types
    case GgmlType::F32: return 0;
    case GgmlType::F16: return 1;
    case GgmlType::Q4_0: return 2;
    case GgmlType::Q4_1: return 3;
    case GgmlType::Q8_0: return 7;
    case GgmlType::Q5_0: return 8;
    case GgmlType::Q5_1: return 9;
    case GgmlType::Q2_K: return 10;
    case GgmlType::Q3_K: return 11;
    case GgmlType::Q4_K: return 14;
    case GgmlType::Q5_K: return 16;
    case GgmlType::Q6_K: return 18;
    case GgmlType::IQ2_XXS: return 19;
    case GgmlType::IQ2_XS: return 20;
    case GgmlType::IQ3_XXS: return 23;
    case GgmlType::IQ1_S: return 24;
    case GgmlType::IQ4_NL: return 25;
    case GgmlType::IQ3_S: return 26;
    case GgmlType::IQ2_S: return 28;
    case GgmlType::IQ4_XS: return 30;
    case GgmlType::IQ1_M: return 31;
    case GgmlType::BF16: return 32;
    case GgmlType::TQ1_0: return 36;
    case GgmlType::TQ2_0: return 37;
    case GgmlType::MXFP4: return 38;
    default: return 1024;  // LLAMA_FTYPE_GUESSED
  }
}

}  // namespace df::modelgen
