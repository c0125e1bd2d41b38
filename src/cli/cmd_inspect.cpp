// deltaflash inspect: what is in a GGUF file.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "gguf/gguf.h"
#include "model/hparams.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include <fmt/ranges.h>

namespace df::cli {

namespace {

std::string value_summary(const gguf::Value& v) {
  using gguf::ValueType;
  switch (v.type) {
    case ValueType::STRING: return v.s.size() > 80 ? fmt::format("\"{}...\" ({} bytes)", v.s.substr(0, 77), v.s.size()) : "\"" + v.s + "\"";
    case ValueType::F32:
    case ValueType::F64: return fmt::format("{}", v.f);
    case ValueType::BOOL: return v.u ? "true" : "false";
    case ValueType::I8:
    case ValueType::I16:
    case ValueType::I32:
    case ValueType::I64: return fmt::format("{}", v.i);
    case ValueType::ARRAY: {
      std::string s = fmt::format("[{} x {}]", v.array_size(), gguf::value_type_name(v.elem_type));
      if (v.array_size() <= 8 && !v.ints.empty()) s += " " + fmt::format("{}", fmt::join(v.ints, ", "));
      if (v.array_size() <= 8 && !v.floats.empty()) s += " " + fmt::format("{}", fmt::join(v.floats, ", "));
      return s;
    }
    default: return fmt::format("{}", v.u);
  }
}

void inspect(const std::string& path, bool all_metadata) {
  auto f = gguf::File::open(path);
  std::printf("file: %s (%.2f MiB, GGUF v%u, alignment %zu)\n", path.c_str(), double(f->file_size()) / (1 << 20),
              f->version(), f->alignment());
  std::printf("architecture: %s\n", f->get_string_or("general.architecture", "(missing)").c_str());
  std::printf("name: %s\n", f->get_string_or("general.name", "(none)").c_str());
  try {
    const HParams hp = HParams::from_gguf(*f);
    std::printf("layers: %d (+%d MTP)  hidden: %d  ffn: %d  heads: %d/%d x %d  rope: %d dims, theta %g  eps %g\n",
                hp.n_layer, hp.n_nextn, hp.n_embd, hp.n_ff, hp.n_head, hp.n_head_kv, hp.head_dim, hp.n_rot,
                hp.rope_theta, hp.rms_eps);
    if (hp.arch == Arch::Qwen35) {
      int n_rec = 0;
      for (int i = 0; i < hp.n_layer; ++i) n_rec += hp.is_recurrent(i);
      std::printf("deltanet: %d of %d layers, key heads %d x %d, value heads %d x %d, conv kernel %d\n", n_rec,
                  hp.n_layer, hp.ssm_n_group, hp.ssm_d_state, hp.ssm_dt_rank, hp.d_v(), hp.ssm_conv_kernel);
    }
  } catch (const Error& e) {
    std::printf("hyperparameters: not usable: %s\n", e.what());
  }
  try {
    const Vocab v = Vocab::from_gguf(*f);
    int n_special = 0;
    for (int32_t t : v.token_types) n_special += t == int32_t(TokenType::Control) || t == int32_t(TokenType::UserDefined);
    std::printf("tokenizer: %s/%s, %zu tokens (%d special), %zu merges, eos %d, bos %d, chat template: %s\n",
                v.model.c_str(), v.pre.c_str(), v.tokens.size(), n_special, v.merges.size(), v.eos_id, v.bos_id,
                v.chat_template.empty() ? "no" : fmt::format("yes ({} bytes)", v.chat_template.size()).c_str());
  } catch (const Error& e) {
    std::printf("tokenizer: not usable: %s\n", e.what());
  }
  std::printf("\nmetadata (%zu keys):\n", f->metadata().size());
  for (const auto& [k, v] : f->metadata()) {
    if (!all_metadata && k.rfind("tokenizer.ggml.", 0) == 0 && v.is_array()) {
      std::printf("  %-44s [%zu x %s]\n", k.c_str(), v.array_size(), gguf::value_type_name(v.elem_type));
      continue;
    }
    std::printf("  %-44s %s\n", k.c_str(), value_summary(v).c_str());
  }
  std::printf("\ntensors (%zu):\n", f->tensors().size());
  size_t total = 0;
  for (const auto& t : f->tensors()) {
    std::printf("  %-40s %-8s %-22s %12zu bytes\n", t.name.c_str(), type_name(t.type), t.shape_string().c_str(), t.nbytes);
    total += t.nbytes;
  }
  std::printf("total tensor bytes: %zu (%.2f GiB)\n", total, double(total) / (1ull << 30));
}

}  // namespace

void register_inspect(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto all = std::make_shared<bool>(false);
  CLI::App* c = app.add_subcommand("inspect", "Show a GGUF file's architecture, metadata, tokenizer and tensors");
  c->add_option("model", *path, "Model file (GGUF)")->required()->check(CLI::ExistingFile);
  c->add_flag("--all-metadata", *all, "Print array values of tokenizer keys too (summarised by default)");
  c->callback([path, all] { inspect(*path, *all); });
}

}  // namespace df::cli
