// deltaflash make-model: a GGUF file with random weights in the exact layout of a real qwen35 or
// qwen3 file (names, shapes, metadata, quant types), for tests and benchmarks.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>

#include "cli/commands.h"
#include "model/draft_hparams.h"
#include "modelgen/make_draft.h"
#include "modelgen/make_model.h"
#include "util/error.h"

namespace df::cli {

namespace {

// An integer flag that may be absent: the override keeps the shape's value unless given.
struct IntFlag {
  int value = 0;
  CLI::Option* opt = nullptr;
  std::optional<int> get() const { return opt && opt->count() ? std::optional<int>(value) : std::nullopt; }
};

struct MakeModelArgs {
  MakeModelOptions opt;
  IntFlag layers, hidden, ffn, heads, kv_heads, head_dim, rot_dims, k_heads, v_heads, state_size,
      value_dim, conv_kernel, attn_interval, nextn, block, target_layers;
  std::string target;  // drafters: the target they are for
  int64_t vocab_size = 0;
  CLI::Option* vocab_size_opt = nullptr;
  bool tied = false, untied = false;
  bool quiet = false;
};

// "[########............]  42%  3.1 / 7.4 GiB  12 s" on stderr, redrawn when the percentage moves.
class ProgressBar {
 public:
  void operator()(size_t done, size_t total) {
    if (total == 0) return;
    const int pct = int(100.0 * double(done) / double(total));
    if (pct == last_pct_ && done != total) return;
    last_pct_ = pct;
    const int width = 30, filled = pct * width / 100;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    std::fprintf(stderr, "\r[%s%s] %3d%%  %.2f / %.2f GiB  %.0f s", std::string(size_t(filled), '#').c_str(),
                 std::string(size_t(width - filled), '.').c_str(), pct, double(done) / (1 << 30),
                 double(total) / (1 << 30), secs);
    if (done == total) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  int last_pct_ = -1;
};

void run_draft(MakeModelArgs& a) {
  MakeDraftOptions d;
  d.target = a.target;
  d.output = a.opt.output;
  d.type = a.opt.type;
  d.seed = a.opt.seed;
  d.threads = a.opt.threads;
  d.n_layer = a.layers.get();
  d.n_head = a.heads.get();
  d.n_head_kv = a.kv_heads.get();
  d.head_dim = a.head_dim.get();
  d.n_ff = a.ffn.get();
  d.block_size = a.block.get();
  d.n_target_layers = a.target_layers.get();
  if (!a.quiet && ::isatty(::fileno(stderr))) d.progress = ProgressBar();
  make_draft_model(d);
  if (!a.quiet) std::fprintf(stderr, "wrote %s\n", d.output.c_str());
}

void run(MakeModelArgs& a) {
  if (a.opt.arch == kDraftArch) return run_draft(a);
  if (!a.target.empty()) fail("--target is only for --arch {}", kDraftArch);
  if (a.tied && a.untied) fail("--tied and --untied exclude each other");
  ShapeOverrides& o = a.opt.overrides;
  o.n_layer = a.layers.get();
  o.n_embd = a.hidden.get();
  o.n_ff = a.ffn.get();
  o.n_head = a.heads.get();
  o.n_head_kv = a.kv_heads.get();
  o.head_dim = a.head_dim.get();
  o.n_rot = a.rot_dims.get();
  o.n_k_heads = a.k_heads.get();
  o.n_v_heads = a.v_heads.get();
  o.d_k = a.state_size.get();
  o.d_v = a.value_dim.get();
  o.conv_kernel = a.conv_kernel.get();
  o.full_attn_interval = a.attn_interval.get();
  o.n_nextn = a.nextn.get();
  if (a.tied || a.untied) o.tied = a.tied;
  if (a.vocab_size_opt->count()) o.vocab_size = a.vocab_size;
  // The bar redraws one line; in logs (stderr not a terminal) only the final summary is useful.
  if (!a.quiet && ::isatty(::fileno(stderr))) a.opt.progress = ProgressBar();
  const auto t0 = std::chrono::steady_clock::now();
  make_model(a.opt);
  if (!a.quiet)
    std::fprintf(stderr, "wrote %s in %.1f s\n", a.opt.output.c_str(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

void add_int(CLI::App* c, const char* name, IntFlag& f, const char* help) { f.opt = c->add_option(name, f.value, help); }

}  // namespace

void register_make_model(CLI::App& app) {
  auto a = std::make_shared<MakeModelArgs>();
  CLI::App* c = app.add_subcommand("make-model", "Write a GGUF model with random weights (tests, benchmarks)");
  MakeModelOptions& o = a->opt;
  c->add_option("--arch", o.arch, "qwen35 | qwen3 | qwen35-dflash-draft (a drafter for --target)")
      ->capture_default_str();
  c->add_option("--target", a->target, "Drafters: the target GGUF the drafter is shaped for");
  add_int(c, "--block", a->block, "Drafters: block size (default 16)");
  add_int(c, "--target-layers", a->target_layers, "Drafters: how many target layers are fused (default up to 5)");
  c->add_option("--shape", o.shape, "qwen35: tiny | 0.8b | 27b; qwen3: tiny | 0.6b")->capture_default_str();
  c->add_option("--type", o.type,
                "Type of every matrix (f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, iq4_xs, ...) or a recipe: "
                "mix-q4_k_m (llama.cpp Q4_K_M), mix-iq4_xs (unsloth-style IQ4_XS)")
      ->capture_default_str();
  c->add_option("--vocab", o.vocab, "toy | FILE.gguf (copy its tokenizer) | DIR with tokenizer.json")
      ->capture_default_str();
  a->vocab_size_opt = c->add_option("--vocab-size", a->vocab_size,
                                    "Embedding rows; tokens beyond the vocabulary become [PAD<i>] "
                                    "(default: 248320 for 0.8b/27b, 151936 for 0.6b, else the vocabulary's size)");
  c->add_option("--seed", o.seed, "Random seed (same seed, same bytes)")->capture_default_str();
  c->add_option("-o,--output", o.output, "Output file")->required();
  c->add_option("-t,--threads", o.threads, "Threads (0 = all cores; the output does not depend on it)")
      ->capture_default_str();
  c->add_flag("-q,--quiet", a->quiet, "No progress bar");
  add_int(c, "--layers", a->layers, "Main layers (MTP layers come on top)");
  add_int(c, "--hidden", a->hidden, "Embedding size");
  add_int(c, "--ffn", a->ffn, "Feed-forward size");
  add_int(c, "--heads", a->heads, "Attention heads");
  add_int(c, "--kv-heads", a->kv_heads, "Attention KV heads");
  add_int(c, "--head-dim", a->head_dim, "Attention head size");
  add_int(c, "--rot-dims", a->rot_dims, "Rotary dims per head (qwen35)");
  add_int(c, "--k-heads", a->k_heads, "DeltaNet key heads (qwen35)");
  add_int(c, "--v-heads", a->v_heads, "DeltaNet value heads (qwen35)");
  add_int(c, "--state-size", a->state_size, "DeltaNet key head size d_k (qwen35)");
  add_int(c, "--value-dim", a->value_dim, "DeltaNet value head size d_v (qwen35)");
  add_int(c, "--conv-kernel", a->conv_kernel, "DeltaNet conv kernel (qwen35)");
  add_int(c, "--attn-interval", a->attn_interval, "Every Nth layer is full attention (qwen35)");
  add_int(c, "--nextn", a->nextn, "MTP blocks to append (qwen35)");
  c->add_flag("--tied", a->tied, "No output.weight: the LM head is token_embd");
  c->add_flag("--untied", a->untied, "Write a separate output.weight");
  c->callback([a] { run(*a); });
}

}  // namespace df::cli
