// deltaflash convert: a Hugging Face checkpoint directory -> GGUF, laid out as llama.cpp's
// converter writes it (qwen35 / qwen3).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "convert/convert.h"
#include "util/progress.h"

namespace df::cli {

namespace {

struct ConvertArgs {
  ConvertOptions opt;
  bool no_mtp = false;
  bool quiet = false;
};

void run(ConvertArgs& a) {
  a.opt.keep_mtp = !a.no_mtp;
  ProgressBar bar("convert", !a.quiet);
  a.opt.progress = [&bar](size_t done, size_t total) { bar.update(done, total); };
  const auto t0 = std::chrono::steady_clock::now();
  convert_hf(a.opt);
  bar.finish();
  if (!a.quiet)
    std::fprintf(stderr, "wrote %s in %.1f s\n", a.opt.output.c_str(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace

void register_convert(CLI::App& app) {
  auto a = std::make_shared<ConvertArgs>();
  CLI::App* c = app.add_subcommand(
      "convert",
      "Convert a Hugging Face checkpoint (Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration's text tower, "
      "Qwen3ForCausalLM; safetensors F32/F16/BF16, single or sharded) to GGUF with llama.cpp's names, layouts "
      "and transforms. The vision tower is not converted.");
  ConvertOptions& o = a->opt;
  c->add_option("HF_DIR", o.input_dir, "Checkpoint directory: config.json, model.safetensors[.index.json], tokenizer.json")
      ->required();
  c->add_option("-o,--output", o.output, "Output GGUF file")->required();
  c->add_option("--type", o.type,
                "auto (bf16 for a bf16 checkpoint, else f16, as llama.cpp), a type for every matrix (f32, f16, bf16, "
                "q8_0, q4_k, q5_k, q6_k, iq4_xs, ...) or a recipe: mix-q4_k_m (llama.cpp Q4_K_M), mix-iq4_xs. Norms, "
                "ssm_a, ssm_dt and ssm_conv1d stay F32")
      ->capture_default_str();
  c->add_option("--vocab", o.vocab,
                "Tokenizer instead of HF_DIR's tokenizer.json (required when there is none): FILE.gguf (copy its "
                "tokenizer.* keys) or toy (make-model's toy vocabulary, for tests). Ids up to the embedding rows that "
                "the tokenizer lacks become [PAD<i>]");
  c->add_flag("--no-mtp", a->no_mtp,
              "Drop the MTP (multi-token prediction) block. By default it is kept as blk.<n_layer>.nextn.* with "
              "nextn_predict_layers, as llama.cpp's current converter does; inference ignores it");
  c->add_option("-t,--threads", o.threads, "Threads (0 = all cores; the output does not depend on it)")
      ->capture_default_str();
  c->add_flag("-q,--quiet", a->quiet, "No progress bar or summary");
  c->callback([a] { run(*a); });
}

}  // namespace df::cli
