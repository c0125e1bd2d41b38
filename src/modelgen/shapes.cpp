#include "modelgen/shapes.h"

#include <algorithm>

#include "util/error.h"

namespace df::modelgen {

namespace {

// Interleaved-MRoPE sections for n_rot rotated dims, in the published [11, 11, 10, 0] proportion
// (text-only positions make the split irrelevant to the math, but llama.cpp requires the key).
std::vector<int32_t> rope_sections_for(int n_rot) {
  const int pairs = n_rot / 2;
  const int per_axis = (pairs * 11 + 31) / 32;
  const int s0 = std::min(pairs, per_axis);
  const int s1 = std::min(pairs - s0, per_axis);
  return {s0, s1, pairs - s0 - s1, 0};
}

// A partial-RoPE default for a head size: Qwen3.5 rotates a quarter of each head.
int qwen35_rot_dims(int head_dim) { return std::max(2, (head_dim / 4) & ~1); }

HParams qwen35_base() {
  HParams hp;
  hp.arch = Arch::Qwen35;
  hp.rope_theta = 1e7f;
  hp.rms_eps = 1e-6f;
  hp.full_attn_interval = 4;
  hp.ssm_conv_kernel = 4;
  return hp;
}

HParams qwen3_base() {
  HParams hp;
  hp.arch = Arch::Qwen3;
  hp.rope_theta = 1e6f;
  hp.rms_eps = 1e-6f;
  hp.full_attn_interval = 1;  // every layer is attention; not written for qwen3
  hp.ssm_conv_kernel = 0;
  hp.ssm_d_state = 0;
  return hp;
}

ModelShape qwen35_tiny() {
  // Small but structurally complete: 6 GDN + 2 attention layers (two of each kind catch
  // per-layer indexing bugs), H*D != n_embd like the real sizes, 2 KV heads so the GQA
  // grouping is visible, n_v > n_k so the tiled V-head mapping matters. Every matrix row length
  // is a multiple of 256, so K-quants and IQ4_XS apply without fallbacks.
  ModelShape s{qwen35_base(), true};
  HParams& hp = s.hp;
  hp.n_layer = 8;
  hp.n_embd = 256;
  hp.n_ff = 512;
  hp.n_ctx_train = 4096;
  hp.n_head = 8;
  hp.n_head_kv = 2;
  hp.head_dim = 64;
  hp.n_rot = 16;
  hp.ssm_n_group = 2;
  hp.ssm_dt_rank = 4;
  hp.ssm_d_state = 64;
  hp.ssm_d_inner = 4 * 64;
  return s;
}

// Published sizes (docs/qwen35-architecture.md §1.2, §8.4).
ModelShape qwen35_0_8b() {
  ModelShape s{qwen35_base(), true};
  HParams& hp = s.hp;
  hp.n_layer = 24;
  hp.n_embd = 1024;
  hp.n_ff = 3584;
  hp.n_ctx_train = 262144;
  hp.n_head = 8;
  hp.n_head_kv = 2;
  hp.head_dim = 256;
  hp.n_rot = 64;
  hp.ssm_n_group = 16;
  hp.ssm_dt_rank = 16;
  hp.ssm_d_state = 128;
  hp.ssm_d_inner = 16 * 128;
  hp.n_vocab = 248320;
  return s;
}

ModelShape qwen35_27b() {
  ModelShape s{qwen35_base(), false};
  HParams& hp = s.hp;
  hp.n_layer = 64;
  hp.n_embd = 5120;
  hp.n_ff = 17408;
  hp.n_ctx_train = 262144;
  hp.n_head = 24;
  hp.n_head_kv = 4;
  hp.head_dim = 256;
  hp.n_rot = 64;
  hp.ssm_n_group = 16;
  hp.ssm_dt_rank = 48;
  hp.ssm_d_state = 128;
  hp.ssm_d_inner = 48 * 128;
  hp.n_vocab = 248320;
  return s;
}

ModelShape qwen3_tiny() {
  ModelShape s{qwen3_base(), true};
  HParams& hp = s.hp;
  hp.n_layer = 4;
  hp.n_embd = 256;
  hp.n_ff = 512;
  hp.n_ctx_train = 4096;
  hp.n_head = 8;
  hp.n_head_kv = 2;
  hp.head_dim = 64;
  hp.n_rot = 64;
  return s;
}

// Qwen3-0.6B (docs/qwen35-architecture.md §10).
ModelShape qwen3_0_6b() {
  ModelShape s{qwen3_base(), true};
  HParams& hp = s.hp;
  hp.n_layer = 28;
  hp.n_embd = 1024;
  hp.n_ff = 3072;
  hp.n_ctx_train = 40960;
  hp.n_head = 16;
  hp.n_head_kv = 8;
  hp.head_dim = 128;
  hp.n_rot = 128;
  hp.n_vocab = 151936;
  return s;
}

void reject_for_qwen3(const std::optional<int>& v, const char* flag) {
  if (v) fail("{} does not apply to qwen3 (no Gated DeltaNet layers, full RoPE, no MTP)", flag);
}

}  // namespace

Arch parse_arch(std::string_view name) {
  if (name == "qwen35") return Arch::Qwen35;
  if (name == "qwen3") return Arch::Qwen3;
  fail("unknown arch '{}' (qwen35 or qwen3)", name);
}

ModelShape named_shape(Arch arch, std::string_view name) {
  ModelShape s;
  if (arch == Arch::Qwen35) {
    if (name == "tiny") s = qwen35_tiny();
    else if (name == "0.8b") s = qwen35_0_8b();
    else if (name == "27b") s = qwen35_27b();
    else if (name == "0.6b") fail("shape '0.6b' is a qwen3 shape; qwen35 shapes are tiny, 0.8b, 27b");
    else fail("unknown qwen35 shape '{}' (tiny, 0.8b, 27b)", name);
  } else {
    if (name == "tiny") s = qwen3_tiny();
    else if (name == "0.6b") s = qwen3_0_6b();
    else if (name == "0.8b" || name == "27b")
      fail("shape '{}' is a qwen35 shape; qwen3 shapes are tiny, 0.6b (override dimensions for other sizes)",
           name);
    else fail("unknown qwen3 shape '{}' (tiny, 0.6b)", name);
  }
  if (s.hp.arch == Arch::Qwen35) s.hp.rope_sections = rope_sections_for(s.hp.n_rot);
  return s;
}

void apply_overrides(ModelShape& s, const ShapeOverrides& ov) {
  HParams& hp = s.hp;
  const bool qwen35 = hp.arch == Arch::Qwen35;
  if (!qwen35) {
    reject_for_qwen3(ov.n_rot, "--rot-dims");
    reject_for_qwen3(ov.n_k_heads, "--k-heads");
    reject_for_qwen3(ov.n_v_heads, "--v-heads");
    reject_for_qwen3(ov.d_k, "--state-size");
    reject_for_qwen3(ov.d_v, "--value-dim");
    reject_for_qwen3(ov.conv_kernel, "--conv-kernel");
    reject_for_qwen3(ov.full_attn_interval, "--attn-interval");
    if (ov.n_nextn && *ov.n_nextn != 0) reject_for_qwen3(ov.n_nextn, "--nextn");
  }
  const int old_d_v = hp.d_v();
  if (ov.n_layer) hp.n_layer = *ov.n_layer;
  if (ov.n_embd) hp.n_embd = *ov.n_embd;
  if (ov.n_ff) hp.n_ff = *ov.n_ff;
  if (ov.n_head) hp.n_head = *ov.n_head;
  if (ov.n_head_kv) hp.n_head_kv = *ov.n_head_kv;
  if (ov.head_dim) {
    hp.head_dim = *ov.head_dim;
    hp.n_rot = qwen35 ? qwen35_rot_dims(hp.head_dim) : hp.head_dim;
  }
  if (ov.n_rot) hp.n_rot = *ov.n_rot;
  if (ov.n_k_heads) hp.ssm_n_group = *ov.n_k_heads;
  if (ov.n_v_heads) hp.ssm_dt_rank = *ov.n_v_heads;
  if (ov.d_k) hp.ssm_d_state = *ov.d_k;
  // llama.cpp requires d_v == d_k, so --state-size sets both unless --value-dim says otherwise.
  if (qwen35) hp.ssm_d_inner = hp.ssm_dt_rank * (ov.d_v ? *ov.d_v : ov.d_k ? *ov.d_k : old_d_v);
  if (ov.conv_kernel) hp.ssm_conv_kernel = *ov.conv_kernel;
  if (ov.full_attn_interval) hp.full_attn_interval = *ov.full_attn_interval;
  if (ov.n_nextn) hp.n_nextn = *ov.n_nextn;
  if (ov.tied) s.tied = *ov.tied;
  if (ov.vocab_size) {
    if (*ov.vocab_size <= 0 || *ov.vocab_size > (int64_t(1) << 31))
      fail("--vocab-size {} is out of range", *ov.vocab_size);
    hp.n_vocab = *ov.vocab_size;
  }
  if (qwen35) {
    if (hp.n_rot % 2 != 0 || hp.n_rot <= 0)
      fail("--rot-dims {} must be a positive even number", hp.n_rot);
    hp.rope_sections = rope_sections_for(hp.n_rot);
  }
  hp.validate("make-model");
}

}  // namespace df::modelgen
