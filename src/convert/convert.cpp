// convert: maps every checkpoint tensor to its GGUF name (tensor_map), checks the result against
// the exact tensor list make-model plans for the same hyperparameters (so nothing is missing,
// extra or mis-shaped), picks per-tensor types with make-model's recipes, and streams the
// tensors through the GGUF writer.
#include "convert/convert.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>

#include "convert/convert_dflash.h"
#include "convert/convert_tensor.h"
#include <fstream>
#include "convert/hf_config.h"
#include "convert/safetensors.h"
#include "convert/tensor_map.h"
#include "gguf/gguf.h"
#include "modelgen/tensor_plan.h"
#include "modelgen/tokenizer_keys.h"
#include "modelgen/toy_vocab.h"
#include "modelgen/type_mix.h"
#include "quant/quantize.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace df {

namespace {

namespace fs = std::filesystem;
using convert::Checkpoint;
using convert::HfModelConfig;
using convert::StTensor;
using gguf::Value;
using modelgen::PlannedTensor;
using modelgen::TokenizerKeys;

using Log = std::function<void(const std::string&)>;

void default_log(const std::string& msg) { std::fprintf(stderr, "convert: %s\n", msg.c_str()); }

struct Source {
  const StTensor* tensor;
  convert::ValueOp op;
  convert::VHeadAxis v_heads;
};

struct Mapped {
  std::map<std::string, Source> by_gguf_name;
  int n_mtp_layers = 0;  // MTP decoder layers found (and kept)
};

Mapped map_checkpoint(const Checkpoint& ckpt, const HfModelConfig& cfg, bool keep_mtp, const Log& log) {
  Mapped m;
  std::map<std::string, int> skipped;
  bool any_mtp = false;
  for (const StTensor* t : ckpt.tensors()) {
    const convert::MappedTensor mt = convert::map_hf_tensor(t->name, cfg, keep_mtp);
    if (mt.skip) {
      ++skipped[mt.skip_reason];
      continue;
    }
    const auto [it, fresh] = m.by_gguf_name.emplace(mt.gguf_name, Source{t, mt.op, mt.v_heads});
    if (!fresh) fail("tensors '{}' and '{}' both map to {}", it->second.tensor->name, t->name, mt.gguf_name);
    if (mt.gguf_name.rfind(fmt::format("blk.{}.", cfg.hp.n_layer), 0) == 0) any_mtp = true;
    m.n_mtp_layers = std::max(m.n_mtp_layers, mt.mtp_layer + 1);
  }
  if (any_mtp) m.n_mtp_layers = std::max(m.n_mtp_layers, 1);
  for (const auto& [reason, n] : skipped) log(fmt::format("skipped {} tensor(s): {}", n, reason));
  return m;
}

// How many MTP blocks to write: what the checkpoint holds (the config may disagree, e.g. when
// a re-export dropped them).
int mtp_layers(const Mapped& m, const HfModelConfig& cfg, bool keep_mtp, const Log& log) {
  const int declared = cfg.hp.n_nextn;
  if (!keep_mtp) return 0;
  if (declared != m.n_mtp_layers)
    log(fmt::format("config.json declares {} MTP layer(s), the checkpoint holds {}; writing {}", declared,
                    m.n_mtp_layers, m.n_mtp_layers));
  return m.n_mtp_layers;
}

std::vector<int64_t> squeezed(std::vector<int64_t> dims) {
  dims.erase(std::remove(dims.begin(), dims.end(), int64_t(1)), dims.end());
  return dims;
}

std::string dims_string(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// The checkpoint tensor must have the planned GGUF shape read backwards (PyTorch lists the
// contiguous dim last, GGUF first). Size-1 dims are ignored: conv1d is [CD, 1, K] in HF and
// [K, CD] in GGUF.
void check_shape(const PlannedTensor& p, const StTensor& t) {
  std::vector<int64_t> want(p.ne.rbegin(), p.ne.rend());
  const int64_t ne0 = t.shape.empty() ? 1 : t.shape.back();
  if (squeezed(t.shape) != squeezed(want) || ne0 != p.ne[0])
    fail("{}: tensor '{}' has shape {}, but config.json implies {} for {}", t.file, t.name, t.shape_string(),
         dims_string(want), p.name);
  if (!convert::is_float_readable(t.dtype))
    fail("{}: tensor '{}' has dtype {}; only F32, F16, BF16 and F64 checkpoints can be converted", t.file, t.name,
         convert::dtype_name(t.dtype));
}

// The plan is the exact tensor list of a llama.cpp file with these hyperparameters: every entry
// needs a source of the right shape and dtype, and every source must be used.
void check_sources(const std::vector<PlannedTensor>& plan, const Mapped& mapped, const std::string& dir, Arch arch) {
  for (const PlannedTensor& p : plan) {
    const auto it = mapped.by_gguf_name.find(p.name);
    if (it == mapped.by_gguf_name.end()) fail("{}: the checkpoint has no tensor for {}", dir, p.name);
    check_shape(p, *it->second.tensor);
  }
  for (const auto& [name, src] : mapped.by_gguf_name)
    if (std::none_of(plan.begin(), plan.end(), [&](const PlannedTensor& p) { return p.name == name; }))
      fail("{}: tensor '{}' maps to {}, which a {} model with this config does not have", dir, src.tensor->name, name,
           arch_name(arch));
}

// llama.cpp's --outtype auto: the dtype of the first matrix decides (bf16 stays bf16, else f16).
std::string resolve_auto_type(const Checkpoint& ckpt) {
  for (const StTensor* t : ckpt.tensors())
    if (t->shape.size() >= 2) return t->dtype == convert::StDtype::BF16 ? "bf16" : "f16";
  return "f16";
}

modelgen::TypeSpec parse_type(const std::string& name) {
  std::string n = name;
  for (char& c : n) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (n.rfind("mix-", 0) != 0) {
    const std::optional<GgmlType> t = type_from_name(n);
    if (!t) fail("unknown --type '{}' (f32, f16, bf16, q8_0, q4_k, q6_k, iq4_xs, ..., mix-q4_k_m, mix-iq4_xs, auto)", name);
    if (!can_quantize(*t)) fail("--type {}: deltaflash has no quantizer for this type", name);
  }
  return modelgen::parse_type_spec(n);
}

TokenizerKeys load_vocab(const ConvertOptions& opt, Arch arch, int64_t n_vocab) {
  std::error_code ec;
  TokenizerKeys kv;
  if (opt.vocab == "toy") {
    kv = modelgen::tokenizer_keys(modelgen::make_toy_vocab(arch, size_t(n_vocab)));
  } else if (!opt.vocab.empty()) {
    if (!fs::is_regular_file(opt.vocab, ec)) fail("--vocab {}: not 'toy' or a .gguf file", opt.vocab);
    kv = modelgen::tokenizer_keys_from_gguf(opt.vocab);
  } else if (fs::is_regular_file(fs::path(opt.input_dir) / "tokenizer.json", ec)) {
    kv = modelgen::tokenizer_keys_from_hf_dir(opt.input_dir, arch, n_vocab);
  } else {
    fail("{}: no tokenizer.json. Pass --vocab FILE.gguf to copy the tokenizer of a GGUF with the same vocabulary, "
         "or --vocab toy for a toy vocabulary (tests only)",
         opt.input_dir);
  }
  const int64_t n_tokens = modelgen::token_count(kv);
  if (n_tokens > n_vocab)
    fail("the tokenizer has {} tokens, more than the {} rows of the embedding", n_tokens, n_vocab);
  modelgen::pad_tokens(kv, n_vocab);
  return kv;
}

// general.name: the checkpoint directory's name, as llama.cpp falls back to when the model card
// names nothing ("." and trailing slashes resolved).
std::string model_name(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(dir), ec);
  if (ec) p = fs::absolute(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

}  // namespace

void convert_hf(const ConvertOptions& opt) {
  if (opt.output.empty()) fail("convert: no output path (-o OUT.gguf)");
  const Log log = opt.log ? opt.log : Log(default_log);
  {  // DFlash drafters have their own layout
    const fs::path cfg_path = fs::path(opt.input_dir) / "config.json";
    std::ifstream in(cfg_path);
    if (!in) fail("{}: cannot open", cfg_path.string());
    nlohmann::json raw = nlohmann::json::parse(in, nullptr, false);
    if (raw.is_discarded()) fail("{}: not valid JSON", cfg_path.string());
    if (is_dflash_config(raw)) {
      ConvertOptions o = opt;
      o.log = log;
      return convert_dflash(o, raw);
    }
  }
  HfModelConfig cfg = convert::read_hf_config((fs::path(opt.input_dir) / "config.json").string());
  for (const std::string& note : cfg.notes) log(note);
  const std::unique_ptr<Checkpoint> ckpt = Checkpoint::open(opt.input_dir);

  const Mapped mapped = map_checkpoint(*ckpt, cfg, opt.keep_mtp, log);
  HParams hp = cfg.hp;
  hp.n_nextn = mtp_layers(mapped, cfg, opt.keep_mtp, log);
  const auto emb = mapped.by_gguf_name.find("token_embd.weight");
  if (emb == mapped.by_gguf_name.end()) fail("{}: no embedding tensor ({}embed_tokens.weight)", opt.input_dir, cfg.text_prefix);
  const int64_t n_vocab = emb->second.tensor->shape.empty() ? 0 : emb->second.tensor->shape.front();
  if (n_vocab != hp.n_vocab)
    fail("{}: vocab_size {} in config.json, but the embedding has {} rows", opt.input_dir, hp.n_vocab, n_vocab);
  const bool tied = mapped.by_gguf_name.count("output.weight") == 0;
  if (tied && !cfg.tie_word_embeddings)
    fail("{}: no lm_head.weight, and config.json does not tie the embeddings", opt.input_dir);

  std::vector<PlannedTensor> plan = modelgen::plan_tensors(hp, tied, n_vocab);
  check_sources(plan, mapped, opt.input_dir, hp.arch);

  const modelgen::TypeSpec spec = parse_type(opt.type == "auto" ? resolve_auto_type(*ckpt) : opt.type);
  modelgen::assign_types(plan, spec, hp, log);
  // Checked before writing: a failure inside the writer's worker threads could not be reported.
  for (const PlannedTensor& p : plan)
    if (!can_quantize(p.type))
      fail("--type {}: {} would be {}, which deltaflash cannot write", opt.type, p.name, type_name(p.type));
  const TokenizerKeys vocab = load_vocab(opt, hp.arch, n_vocab);

  gguf::Writer w;
  w.set("general.architecture", Value::of_string(arch_name(hp.arch)));
  w.set("general.type", Value::of_string("model"));
  w.set("general.name", Value::of_string(model_name(opt.input_dir)));
  hp.to_gguf(w);
  for (const auto& [key, value] : vocab) w.set(key, value);
  w.set("general.quantization_version", Value::of_u32(2));
  w.set("general.file_type", Value::of_u32(modelgen::file_type_of(spec)));

  ThreadPool pool(opt.threads);
  for (const PlannedTensor& p : plan) {
    const Source& s = mapped.by_gguf_name.at(p.name);
    const convert::TensorConversion job{s.tensor, s.op, s.v_heads, p.type};
    w.add_tensor(p.name, p.type, p.ne, [job, &hp, &pool](uint8_t* dst) { convert::convert_tensor(job, hp, dst, pool); });
  }
  w.write(opt.output, 32, opt.progress);
}

}  // namespace df
