// deltaflash bench: prompt-processing and generation speed, median of several runs
// (the same measurement llama-bench makes: pp = one prefill of -p tokens, tg = -n decode steps).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "cli/commands.h"
#include "cli/loaded_model.h"
#include "util/error.h"
#include "engine/generator.h"

namespace df::cli {

namespace {

struct BenchArgs {
  std::string model;
  int n_prompt = 512, n_gen = 128, reps = 5, batch = 512;
  LoadOptions load;
  bool json = false;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void bench(const BenchArgs& a) {
  if (a.n_prompt < 1 || a.n_gen < 1 || a.reps < 1) fail("-p, -n and --reps must be at least 1");
  LoadOptions lo = a.load;
  lo.max_batch_rows = std::min(a.batch, a.n_prompt);
  lo.progress = !a.json;
  LoadedModel m = load_model(a.model, lo);
  Generator gen(*m.model, m.tokenizer.get(), a.n_prompt + a.n_gen + 1);
  std::mt19937 rng(42);
  const int n_vocab = std::min(m.model->hparams().n_vocab, m.tokenizer->n_vocab());
  std::vector<int32_t> prompt(size_t(a.n_prompt));
  for (auto& t : prompt) t = int32_t(rng() % uint32_t(n_vocab));
  std::vector<float> logits;
  // Warm-up run (page faults, caches), not counted.
  gen.reset();
  gen.prefill(std::vector<int32_t>(prompt.begin(), prompt.begin() + std::min(a.n_prompt, 16)), a.batch, logits);
  std::vector<double> pp, tg;
  for (int r = 0; r < a.reps; ++r) {
    gen.reset();
    auto t0 = std::chrono::steady_clock::now();
    gen.prefill(prompt, a.batch, logits);
    pp.push_back(a.n_prompt / seconds_since(t0));
    // Generation from an empty context, like llama-bench's tg test.
    gen.reset();
    t0 = std::chrono::steady_clock::now();
    int32_t tok = prompt[0];
    for (int i = 0; i < a.n_gen; ++i) {
      gen.decode(tok, logits);
      tok = int32_t(std::max_element(logits.begin(), logits.begin() + n_vocab) - logits.begin());
    }
    tg.push_back(a.n_gen / seconds_since(t0));
  }
  const int threads = a.load.threads > 0 ? a.load.threads : int(std::thread::hardware_concurrency());
  const std::string device = m.backend->name();
  if (a.json) {
    nlohmann::json j = {{"model", a.model},   {"n_prompt", a.n_prompt},        {"n_gen", a.n_gen},
                        {"threads", threads}, {"device", device}, {"reps", a.reps},                {"prompt_tok_s", median(pp)},
                        {"gen_tok_s", median(tg)}, {"prompt_tok_s_all", pp}, {"gen_tok_s_all", tg}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("| model | threads | test | tok/s (median of %d) |\n|---|---|---|---|\n", a.reps);
    std::printf("| %s | %d | pp%d | %.2f |\n", a.model.c_str(), threads, a.n_prompt, median(pp));
    std::printf("| %s | %d | tg%d | %.2f |\n", a.model.c_str(), threads, a.n_gen, median(tg));
  }
}

}  // namespace

void register_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* c = app.add_subcommand("bench", "Measure prompt and generation speed (median of several runs)");
  c->add_option("-m,--model", a->model, "Model file (GGUF)")->required()->check(CLI::ExistingFile);
  c->add_option("-p,--n-prompt", a->n_prompt, "Prompt tokens")->capture_default_str();
  c->add_option("-n,--n-gen", a->n_gen, "Generated tokens")->capture_default_str();
  add_backend_flags(c, a->load);
  c->add_option("-r,--reps", a->reps, "Repetitions (the median is reported)")->capture_default_str();
  c->add_option("-b,--batch", a->batch, "Prefill chunk size")->capture_default_str();
  c->add_flag("--json", a->json, "Print one JSON object");
  c->callback([a] { bench(*a); });
}

}  // namespace df::cli
