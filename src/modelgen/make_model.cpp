// make-model: resolves shape, vocabulary and per-tensor types, then streams random tensors
// through the GGUF writer.
#include "modelgen/make_model.h"

#include <cstdio>
#include <filesystem>

#include "gguf/gguf.h"
#include "modelgen/random_fill.h"
#include "modelgen/shapes.h"
#include "modelgen/tensor_plan.h"
#include "modelgen/tokenizer_keys.h"
#include "modelgen/toy_vocab.h"
#include "modelgen/type_mix.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace df {

namespace {

namespace fs = std::filesystem;
using gguf::Value;
using gguf::ValueType;
using modelgen::PlannedTensor;
using modelgen::TokenizerKeys;

TokenizerKeys load_vocab(const std::string& source, Arch arch, int64_t min_vocab) {
  if (source == "toy") return modelgen::tokenizer_keys(modelgen::make_toy_vocab(arch));
  const fs::path p(source);
  std::error_code ec;
  if (fs::is_directory(p, ec) || p.filename() == "tokenizer.json") {
    const fs::path dir = fs::is_directory(p, ec) ? p : p.parent_path();
    if (!fs::is_regular_file(dir / "tokenizer.json", ec)) fail("--vocab {}: no tokenizer.json there", source);
    return modelgen::tokenizer_keys_from_hf_dir(dir.string(), arch, min_vocab);
  }
  if (fs::is_regular_file(p, ec)) return modelgen::tokenizer_keys_from_gguf(source);
  fail("--vocab {}: not 'toy', a .gguf file, or a directory with tokenizer.json", source);
}

struct Resolved {
  modelgen::ModelShape shape;
  modelgen::TypeSpec type;
  TokenizerKeys vocab;
  std::vector<PlannedTensor> tensors;
};

void default_log(const std::string& msg) { std::fprintf(stderr, "make-model: %s\n", msg.c_str()); }

Resolved resolve(const MakeModelOptions& opt) {
  const auto log = opt.log ? opt.log : default_log;
  Resolved r;
  const Arch arch = modelgen::parse_arch(opt.arch);
  r.shape = modelgen::named_shape(arch, opt.shape);
  modelgen::apply_overrides(r.shape, opt.overrides);
  r.type = modelgen::parse_type_spec(opt.type);
  HParams& hp = r.shape.hp;
  if (arch == Arch::Qwen35 && hp.ssm_d_state != hp.d_v())
    log(fmt::format("state size {} differs from the value head size {}; llama.cpp requires them equal",
                    hp.ssm_d_state, hp.d_v()));

  r.vocab = load_vocab(opt.vocab, arch, hp.n_vocab);
  const int64_t n_tokens = modelgen::token_count(r.vocab);
  if (hp.n_vocab == 0) hp.n_vocab = int(n_tokens);
  if (hp.n_vocab < n_tokens)
    fail("vocabulary size {} is smaller than the {} tokens of --vocab {}", hp.n_vocab, n_tokens, opt.vocab);
  modelgen::pad_tokens(r.vocab, hp.n_vocab);

  r.tensors = modelgen::plan_tensors(hp, r.shape.tied, hp.n_vocab);
  modelgen::assign_types(r.tensors, r.type, hp, log);
  return r;
}

void set_metadata(gguf::Writer& w, const MakeModelOptions& opt, const Resolved& r) {
  const HParams& hp = r.shape.hp;
  w.set("general.architecture", Value::of_string(arch_name(hp.arch)));
  w.set("general.type", Value::of_string("model"));
  w.set("general.name", Value::of_string(fmt::format("{} {} (random weights, seed {})", arch_name(hp.arch),
                                                     opt.shape, opt.seed)));
  hp.to_gguf(w);
  for (const auto& [key, value] : r.vocab) w.set(key, value);
  w.set("general.quantization_version", Value::of_u32(2));
  w.set("general.file_type", Value::of_u32(modelgen::file_type_of(r.type)));
}

}  // namespace

ModelPlan plan_model(const MakeModelOptions& opt) {
  const Resolved r = resolve(opt);
  ModelPlan plan;
  plan.hparams = r.shape.hp;
  plan.tied = r.shape.tied;
  plan.n_vocab = r.shape.hp.n_vocab;
  for (const PlannedTensor& t : r.tensors) plan.tensors.push_back({t.name, t.type, t.ne});
  return plan;
}

void make_model(const MakeModelOptions& opt) {
  if (opt.output.empty()) fail("make-model: no output path (-o OUT.gguf)");
  const Resolved r = resolve(opt);
  gguf::Writer w;
  set_metadata(w, opt, r);
  ThreadPool pool(opt.threads);
  for (const PlannedTensor& t : r.tensors)
    w.add_tensor(t.name, t.type, t.ne, [&t, &opt, &pool](uint8_t* dst) { modelgen::fill_tensor(t, opt.seed, dst, pool); });
  w.write(opt.output, 32, opt.progress);
}

}  // namespace df
