// deltaflash bench: prompt-processing and generation speed, median of several runs
// (the same measurement llama-bench makes: pp = one prefill of -p tokens, tg = -n decode steps),
// plus what the GPU work is measured against: the device's copy bandwidth, the weight bytes a
// decode step reads (so tok/s becomes GB/s and % of the copy bandwidth), the time of one forward
// of 1..32 rows that all want their greedy choice (the verify-width curve of greedy speculative
// decoding: the argmax runs on the device, as in a greedy verify step), and with
// --profile the per-op tables of a decode step and of a 16-row forward.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "backend/profiling_backend.h"
#include "cli/bench_draft.h"
#include "cli/bench_profile.h"
#include "cli/commands.h"
#include "cli/loaded_model.h"
#include "engine/generator.h"
#include "util/error.h"

namespace df::cli {

namespace {

constexpr int kVerifyWidths[] = {1, 2, 4, 8, 16, 32};
constexpr int kMaxVerifyRows = 32;

struct BenchArgs {
  std::string model;
  int n_prompt = 512, n_gen = 128, reps = 5, batch = kSingleRequestPromptChunk;
  int depth = 0;  // tokens of context before the timed generation (llama-bench's -d)
  LoadOptions load;
  bool json = false;
  std::string json_out;  // also write the JSON object here
  bool profile = false;
  std::string draft;  // --draft: also time drafter and verify steps of speculative decoding
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Device-to-device copy bandwidth, counting bytes read plus bytes written (how the GPU notes of
// this project state it: ~4.3 TB/s on an H200). Random contents, never zeros.
double copy_bandwidth_gb_s(Backend& be, bool gpu) {
  const size_t bytes = gpu ? size_t(1) << 30 : size_t(64) << 20, chunk = size_t(16) << 20;
  auto* a = static_cast<uint8_t*>(be.alloc(bytes));
  auto* b = static_cast<uint8_t*>(be.alloc(bytes));
  std::vector<uint32_t> pattern(chunk / 4);
  std::mt19937 rng(7);
  for (auto& w : pattern) w = rng();
  for (size_t off = 0; off < bytes; off += chunk) be.upload(a + off, pattern.data(), std::min(chunk, bytes - off));
  be.copy(b, a, bytes);  // warm-up
  be.synchronize();
  const int reps = gpu ? 20 : 4;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) be.copy(i % 2 ? a : b, i % 2 ? b : a, bytes);
  be.synchronize();
  const double dt = seconds_since(t0);
  be.release(b);
  be.release(a);
  return 2.0 * double(bytes) * reps / dt / 1e9;
}

struct VerifyPoint {
  int rows;
  double ms;
  double first_ms;  // the first forward of this shape: with CUDA graphs, its capture (or an op-by-op run)
};

void bench(const BenchArgs& a) {
  if (a.n_prompt < 1 || a.n_gen < 1 || a.reps < 1) fail("-p, -n and --reps must be at least 1");
  if (a.depth < 0) fail("--depth must not be negative");
  using Mode = ProfilingBackend::Mode;
  LoadOptions lo = a.load;
  lo.max_batch_rows = std::max(std::min(a.batch, std::max(a.n_prompt, a.depth)), kMaxVerifyRows);
  lo.progress = !a.json;
  lo.profile = true;  // counting weight bytes needs the wrapper; it forwards at no cost when off
  LoadedModel m = load_model(a.model, lo);
  auto& prof = dynamic_cast<ProfilingBackend&>(*m.backend);
  const std::string device = prof.inner().name();
  const double copy_gb_s = copy_bandwidth_gb_s(prof.inner(), device != "cpu");

  Generator gen(*m.model, m.tokenizer.get(), std::max(a.n_prompt, a.depth) + a.n_gen + 18);
  std::mt19937 rng(42);
  const int n_vocab = std::min(m.model->hparams().n_vocab, m.tokenizer->n_vocab());
  std::vector<int32_t> prompt(size_t(std::max({a.n_prompt, a.depth, kMaxVerifyRows})));
  for (auto& t : prompt) t = int32_t(rng() % uint32_t(n_vocab));
  std::vector<float> logits;
  // Two warm-up runs, not counted: page faults and caches, and with CUDA graphs a step's capture
  // (after an op-by-op run when a buffer must grow), so the timed runs replay as a long
  // generation does.
  std::vector<double> pp, tg;
  const std::vector<int32_t> pp_prompt(prompt.begin(), prompt.begin() + a.n_prompt);
  // The second warm-up is what a new prompt shape costs in a process already warm: with CUDA
  // graphs the first one runs op by op while the scratch buffers grow, the second is captured.
  double first_prefill_ms = 0;
  for (int w = 0; w < 2; ++w) {
    gen.reset();
    const auto t0 = std::chrono::steady_clock::now();
    gen.prefill(pp_prompt, a.batch, logits);
    if (w == 1) first_prefill_ms = seconds_since(t0) * 1e3;
  }
  for (int r = 0; r < a.reps; ++r) {
    gen.reset();
    auto t0 = std::chrono::steady_clock::now();
    gen.prefill(pp_prompt, a.batch, logits);
    pp.push_back(a.n_prompt / seconds_since(t0));
    // Generation from an empty context, like llama-bench's tg test, or after --depth tokens
    // of context (their prefill not timed).
    gen.reset();
    if (a.depth > 0) gen.prefill(std::vector<int32_t>(prompt.begin(), prompt.begin() + a.depth), a.batch, logits);
    // Two untimed steps first: with CUDA graphs a step at a new context length is captured (or
    // first run op by op, when a buffer must grow; the block table grows in powers of two,
    // cuda_graphs.h), which would otherwise land in a short timed run.
    int32_t tok = prompt[0];
    for (int i = 0; i < 2; ++i) tok = gen.decode_greedy(tok, n_vocab);
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < a.n_gen; ++i) tok = gen.decode_greedy(tok, n_vocab);  // greedy, as `run` decodes
    tg.push_back(a.n_gen / seconds_since(t0));
  }

  // Weight bytes one decode step reads (every matmul weight once, one embedding row).
  gen.reset();
  prof.reset();
  prof.set_mode(Mode::kCount);
  gen.decode(prompt[0], logits);
  prof.set_mode(Mode::kOff);
  const double step_bytes = prof.total_weight_bytes();
  prof.reset();
  const double weight_gb_s = step_bytes * median(tg) / 1e9;

  // Verify-width curve: one forward of R rows of a fresh sequence, each wanting its greedy choice.
  auto st = m.model->make_state(1, kMaxVerifyRows + 8);
  const int seq = st->create();
  ForwardOutput out;
  out.greedy_only = n_vocab;
  auto rows_batch = [&](int rows) {
    Batch b;
    for (int i = 0; i < rows; ++i) b.add(seq, i, prompt[size_t(i)], true);
    return b;
  };
  std::vector<VerifyPoint> curve;
  for (int rows : kVerifyWidths) {
    const Batch b = rows_batch(rows);
    std::vector<double> ms;
    double first_ms = 0;
    for (int r = -2; r < a.reps; ++r) {  // r < 0: warm-up (CUDA graphs: capture, or op by op first)
      st->reset(seq);
      prof.inner().synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      m.model->forward(b, *st, out);
      prof.inner().synchronize();
      if (r == -2) first_ms = seconds_since(t0) * 1e3;
      if (r >= 0) ms.push_back(seconds_since(t0) * 1e3);
    }
    curve.push_back({rows, median(ms), first_ms});
  }

  std::vector<OpProfile> profiles;
  if (a.profile) {
    const int steps = std::min(a.n_gen, 8);
    gen.reset();
    OpProfile dec = profile_forwards(
        prof, "decode step (1 row)", steps, [] {}, [&] { gen.decode_greedy(prompt[1], n_vocab); });
    dec.plain_wall_s = median(tg) > 0 ? 1.0 / median(tg) : 0;
    profiles.push_back(std::move(dec));
    const Batch b16 = rows_batch(16);
    OpProfile v16 = profile_forwards(
        prof, "16-row forward (greedy verify: argmax per row)", 3, [&] { st->reset(seq); },
        [&] { m.model->forward(b16, *st, out); });
    for (const auto& p : curve)
      if (p.rows == 16) v16.plain_wall_s = p.ms / 1e3;
    profiles.push_back(std::move(v16));
    // One prefill chunk (the prompt's first min(-p, -b) tokens, last row's logits): where prompt
    // processing spends its time. Its own state, sized for the chunk.
    const int chunk = std::min<int>(a.n_prompt, a.batch);
    if (chunk > 16) {
      auto pst = m.model->make_state(1, chunk + 8);
      const int pseq = pst->create();
      Batch bp;
      for (int i = 0; i < chunk; ++i) bp.add(pseq, i, pp_prompt[size_t(i)], i + 1 == chunk);
      OpProfile pre = profile_forwards(
          prof, "prefill chunk (" + std::to_string(chunk) + " rows)", 2, [&] { pst->reset(pseq); },
          [&] { m.model->forward(bp, *pst, out); });
      if (median(pp) > 0) pre.plain_wall_s = double(chunk) / median(pp);  // the prompt's rate, per chunk
      profiles.push_back(std::move(pre));
    }
  }

  nlohmann::json draft_rows;
  if (!a.draft.empty()) {
    DraftBenchInput in;
    in.draft_path = a.draft;
    in.prompt = pp_prompt;
    in.reps = a.reps;
    in.plain_step_ms = median(tg) > 0 ? 1e3 / median(tg) : 0;
    for (const auto& p : curve) in.verify_ms[p.rows] = p.ms;
    draft_rows = bench_draft(m, in);
  }

  const int threads = a.load.threads > 0 ? a.load.threads : int(std::thread::hardware_concurrency());
  const double t1 = curve.empty() ? 0 : curve.front().ms;
  if (a.json || !a.json_out.empty()) {
    nlohmann::json verify = nlohmann::json::array();
    for (const auto& p : curve)
      verify.push_back({{"rows", p.rows}, {"ms", p.ms}, {"vs_1_row", t1 > 0 ? p.ms / t1 : 0}, {"first_ms", p.first_ms}});
    nlohmann::json j = {{"model", a.model},
                        {"n_prompt", a.n_prompt},
                        {"n_gen", a.n_gen},
                        {"depth", a.depth},
                        {"threads", threads},
                        {"device", device},
                        {"reps", a.reps},
                        {"prompt_tok_s", median(pp)},
                        {"gen_tok_s", median(tg)},
                        {"prompt_tok_s_all", pp},
                        {"prompt_first_ms", first_prefill_ms},
                        {"gen_tok_s_all", tg},
                        {"copy_gb_s", copy_gb_s},
                        {"decode_weight_bytes", step_bytes},
                        {"decode_weight_gb_s", weight_gb_s},
                        {"decode_pct_of_copy_bw", copy_gb_s > 0 ? 100 * weight_gb_s / copy_gb_s : 0},
                        {"verify", verify}};
    if (!draft_rows.is_null()) j["draft"] = draft_rows;
    if (!profiles.empty()) {
      nlohmann::json pj = nlohmann::json::array();
      for (const auto& p : profiles) pj.push_back(profile_json(p));
      j["profile"] = pj;
    }
    if (!a.json_out.empty()) {
      std::FILE* f = std::fopen(a.json_out.c_str(), "w");
      if (f == nullptr) fail("cannot write {}", a.json_out);
      std::fprintf(f, "%s\n", j.dump(1).c_str());
      std::fclose(f);
    }
    if (a.json) {
      std::printf("%s\n", j.dump().c_str());
      return;
    }
  }
  std::printf("| model | threads | test | tok/s (median of %d) |\n|---|---|---|---|\n", a.reps);
  std::printf("| %s | %d | pp%d | %.2f |\n", a.model.c_str(), threads, a.n_prompt, median(pp));
  if (a.depth > 0)
    std::printf("| %s | %d | tg%d @ d%d | %.2f |\n", a.model.c_str(), threads, a.n_gen, a.depth, median(tg));
  else
    std::printf("| %s | %d | tg%d | %.2f |\n", a.model.c_str(), threads, a.n_gen, median(tg));
  std::printf("\nprefill of %d tokens: %.3f ms a run, %.3f ms as a new prompt shape in a warm process (with CUDA "
              "graphs: its capture)\n",
              a.n_prompt, median(pp) > 0 ? 1e3 * a.n_prompt / median(pp) : 0.0, first_prefill_ms);
  std::printf("\ndevice %s: copy bandwidth %.0f GB/s (bytes read + written)\n", device.c_str(), copy_gb_s);
  std::printf("decode: %.2f tok/s x %.3f GB of weights a step = %.0f GB/s, %.1f%% of the copy bandwidth\n", median(tg),
              step_bytes / 1e9, weight_gb_s, copy_gb_s > 0 ? 100 * weight_gb_s / copy_gb_s : 0.0);
  // The first forward of each shape: with CUDA graphs it is captured (or run op by op where a
  // buffer must grow), so its excess over the median is what a new step shape costs once.
  std::printf("\n| rows in one forward (greedy: argmax per row) | ms (median of %d) | ms per row | vs 1 row | first "
              "forward of the shape ms |\n|---|---|---|---|---|\n",
              a.reps);
  for (const auto& p : curve)
    std::printf("| %d | %.3f | %.3f | %.2f | %.3f |\n", p.rows, p.ms, p.ms / p.rows, t1 > 0 ? p.ms / t1 : 0.0,
                p.first_ms);
  if (!draft_rows.is_null()) {
    std::printf("\n| block | draft ms | verify step ms (kept inputs, commit, ingest) | plain forward of the block ms | "
                "plain step ms | (draft + verify) / plain | speedup at tau 3 / 5 / 7 (projection) | sampled step ms, "
                "full logits / top 40 |\n"
                "|---|---|---|---|---|---|---|---|\n");
    for (const auto& r : draft_rows)
      std::printf("| %d | %.3f | %.3f | %.3f | %.3f | %.2f | %.2fx / %.2fx / %.2fx | %.3f / %.3f |\n", r["block"].get<int>(),
                  r["draft_ms"].get<double>(), r["verify_ms"].get<double>(), r["plain_forward_ms"].get<double>(),
                  r["plain_step_ms"].get<double>(),
                  r["cost_vs_plain"].get<double>(), r["projected_speedup_at_tau"]["3"].get<double>(),
                  r["projected_speedup_at_tau"]["5"].get<double>(), r["projected_speedup_at_tau"]["7"].get<double>(),
                  r["sampled_step_ms"].get<double>(), r["sampled_top_step_ms"].get<double>());
  }
  for (const auto& p : profiles) print_profile(p);
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
  c->add_option("-d,--depth", a->depth, "Context tokens before the timed generation (their prefill is not timed)")
      ->capture_default_str();
  c->add_flag("--json", a->json, "Print one JSON object");
  c->add_option("--json-out", a->json_out, "Also write the JSON object to this file");
  c->add_option("--draft", a->draft,
                 "DFlash drafter: also time a draft step and a verify step at blocks 8 and 16 against a plain step")
      ->check(CLI::ExistingFile);
  c->add_flag("--profile", a->profile,
              "Also time every op of a decode step and of a 16-row forward (per-op table: share, us per call, "
              "weight GB/s of matmuls)");
  c->callback([a] { bench(*a); });
}

}  // namespace df::cli
