#include "model/hparams.h"

#include "gguf/gguf.h"
#include "util/error.h"

namespace df {

const char* arch_name(Arch a) { return a == Arch::Qwen35 ? "qwen35" : "qwen3"; }

namespace {

std::string key(Arch a, const char* suffix) { return fmt::format("{}.{}", arch_name(a), suffix); }

}  // namespace

HParams HParams::from_gguf(const gguf::File& f) {
  HParams hp;
  const std::string arch = f.get_string("general.architecture");
  if (arch == "qwen35") {
    hp.arch = Arch::Qwen35;
  } else if (arch == "qwen3") {
    hp.arch = Arch::Qwen3;
  } else {
    fail("{}: general.architecture '{}' is not supported (qwen35 and qwen3 are)", f.path(), arch);
  }
  const Arch a = hp.arch;
  const int block_count = int(f.get_u32(key(a, "block_count")));
  hp.n_nextn = int(f.get_u32_or(key(a, "nextn_predict_layers"), 0));
  hp.n_layer = block_count - hp.n_nextn;
  hp.n_embd = int(f.get_u32(key(a, "embedding_length")));
  hp.n_ff = int(f.get_u32(key(a, "feed_forward_length")));
  hp.n_ctx_train = int(f.get_u32_or(key(a, "context_length"), 0));
  hp.n_head = int(f.get_u32(key(a, "attention.head_count")));
  hp.n_head_kv = int(f.get_u32_or(key(a, "attention.head_count_kv"), uint32_t(hp.n_head)));
  hp.head_dim = int(f.get_u32_or(key(a, "attention.key_length"), uint32_t(hp.n_embd / std::max(hp.n_head, 1))));
  const int value_length = int(f.get_u32_or(key(a, "attention.value_length"), uint32_t(hp.head_dim)));
  if (value_length != hp.head_dim)
    fail("{}: {} = {} differs from key_length {} (unsupported)", f.path(), key(a, "attention.value_length"),
         value_length, hp.head_dim);
  hp.n_rot = int(f.get_u32_or(key(a, "rope.dimension_count"), uint32_t(hp.head_dim)));
  hp.rope_theta = f.get_f32_or(key(a, "rope.freq_base"), a == Arch::Qwen35 ? 1e7f : 1e6f);
  hp.rms_eps = f.get_f32(key(a, "attention.layer_norm_rms_epsilon"));
  if (a == Arch::Qwen35) {
    if (f.has(key(a, "rope.dimension_sections"))) {
      for (int64_t s : f.get_int_array(key(a, "rope.dimension_sections"))) hp.rope_sections.push_back(int32_t(s));
    }
    hp.full_attn_interval = int(f.get_u32_or(key(a, "full_attention_interval"), 4));
    hp.ssm_conv_kernel = int(f.get_u32(key(a, "ssm.conv_kernel")));
    hp.ssm_d_state = int(f.get_u32(key(a, "ssm.state_size")));
    hp.ssm_n_group = int(f.get_u32(key(a, "ssm.group_count")));
    hp.ssm_dt_rank = int(f.get_u32(key(a, "ssm.time_step_rank")));
    hp.ssm_d_inner = int(f.get_u32(key(a, "ssm.inner_size")));
  }
  hp.validate(f.path());
  return hp;
}

void HParams::to_gguf(gguf::Writer& w) const {
  using gguf::Value;
  const Arch a = arch;
  w.set("general.architecture", Value::of_string(arch_name(a)));
  w.set(key(a, "block_count"), Value::of_u32(uint32_t(n_layer + n_nextn)));
  if (n_nextn > 0) w.set(key(a, "nextn_predict_layers"), Value::of_u32(uint32_t(n_nextn)));
  w.set(key(a, "context_length"), Value::of_u32(uint32_t(n_ctx_train)));
  w.set(key(a, "embedding_length"), Value::of_u32(uint32_t(n_embd)));
  w.set(key(a, "feed_forward_length"), Value::of_u32(uint32_t(n_ff)));
  w.set(key(a, "attention.head_count"), Value::of_u32(uint32_t(n_head)));
  w.set(key(a, "attention.head_count_kv"), Value::of_u32(uint32_t(n_head_kv)));
  w.set(key(a, "attention.key_length"), Value::of_u32(uint32_t(head_dim)));
  w.set(key(a, "attention.value_length"), Value::of_u32(uint32_t(head_dim)));
  w.set(key(a, "attention.layer_norm_rms_epsilon"), Value::of_f32(rms_eps));
  w.set(key(a, "rope.freq_base"), Value::of_f32(rope_theta));
  if (a == Arch::Qwen35) {
    w.set(key(a, "rope.dimension_count"), Value::of_u32(uint32_t(n_rot)));
    std::vector<int64_t> sections(rope_sections.begin(), rope_sections.end());
    w.set(key(a, "rope.dimension_sections"), Value::of_int_array(gguf::ValueType::I32, sections));
    w.set(key(a, "full_attention_interval"), Value::of_u32(uint32_t(full_attn_interval)));
    w.set(key(a, "ssm.conv_kernel"), Value::of_u32(uint32_t(ssm_conv_kernel)));
    w.set(key(a, "ssm.state_size"), Value::of_u32(uint32_t(ssm_d_state)));
    w.set(key(a, "ssm.group_count"), Value::of_u32(uint32_t(ssm_n_group)));
    w.set(key(a, "ssm.time_step_rank"), Value::of_u32(uint32_t(ssm_dt_rank)));
    w.set(key(a, "ssm.inner_size"), Value::of_u32(uint32_t(ssm_d_inner)));
  }
}

void HParams::validate(const std::string& where) const {
  auto positive = [&](int v, const char* what) {
    if (v <= 0 || v > (1 << 24)) fail("{}: {} = {} is out of range", where, what, v);
  };
  positive(n_layer, "block_count (main layers)");
  positive(n_embd, "embedding_length");
  positive(n_ff, "feed_forward_length");
  positive(n_head, "attention.head_count");
  positive(n_head_kv, "attention.head_count_kv");
  positive(head_dim, "attention.key_length");
  if (n_nextn < 0) fail("{}: nextn_predict_layers = {} is negative", where, n_nextn);
  if (n_head % n_head_kv != 0)
    fail("{}: head_count {} is not a multiple of head_count_kv {}", where, n_head, n_head_kv);
  if (n_rot <= 0 || n_rot > head_dim || n_rot % 2 != 0)
    fail("{}: rope.dimension_count = {} must be even and within key_length {}", where, n_rot, head_dim);
  if (!(rope_theta > 0)) fail("{}: rope.freq_base = {} must be positive", where, rope_theta);
  if (!(rms_eps > 0) || rms_eps > 1) fail("{}: layer_norm_rms_epsilon = {} is out of range", where, rms_eps);
  if (arch == Arch::Qwen35) {
    positive(full_attn_interval, "full_attention_interval");
    positive(ssm_d_state, "ssm.state_size");
    positive(ssm_n_group, "ssm.group_count");
    positive(ssm_dt_rank, "ssm.time_step_rank");
    positive(ssm_d_inner, "ssm.inner_size");
    if (ssm_conv_kernel < 1 || ssm_conv_kernel > 16)
      fail("{}: ssm.conv_kernel = {} is out of range", where, ssm_conv_kernel);
    if (ssm_d_inner % ssm_dt_rank != 0)
      fail("{}: ssm.inner_size {} is not a multiple of ssm.time_step_rank {}", where, ssm_d_inner, ssm_dt_rank);
    if (ssm_dt_rank % ssm_n_group != 0)
      fail("{}: ssm.time_step_rank {} (value heads) is not a multiple of ssm.group_count {} (key heads)", where,
           ssm_dt_rank, ssm_n_group);
    if (!rope_sections.empty()) {
      int sum = 0;
      for (int s : rope_sections) sum += s;
      if (2 * sum != n_rot)
        fail("{}: rope.dimension_sections sum {} does not match rope.dimension_count {} / 2", where, sum, n_rot);
    }
  }
}

}  // namespace df
