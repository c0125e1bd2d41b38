// deltaflash logits: raw float32 logits of every position (n_tokens rows of n_vocab), with
// the tokens fed in chunks of --batch so prefill and decode paths can be compared.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "cli/loaded_model.h"
#include "util/error.h"

namespace df::cli {

namespace {

struct LogitsArgs {
  std::string model, tokens, prompt, out;
  int batch = 512;
  LoadOptions load;
};

void logits(const LogitsArgs& a) {
  LoadOptions lo = a.load;
  lo.max_batch_rows = std::max(1, a.batch);
  lo.progress = false;
  LoadedModel m = load_model(a.model, lo);
  const std::vector<int32_t> toks = a.tokens.empty() ? m.tokenizer->encode(a.prompt, true) : parse_token_list(a.tokens);
  if (toks.empty()) fail("no tokens to evaluate");
  if (a.batch < 1) fail("--batch must be at least 1");
  auto state = m.model->make_state(1, int(toks.size()));
  const int seq = state->create();
  FILE* f = std::fopen(a.out.c_str(), "wb");
  if (f == nullptr) fail("{}: cannot open for writing", a.out);
  Batch batch;
  ForwardOutput out;
  for (size_t i0 = 0; i0 < toks.size(); i0 += size_t(a.batch)) {
    const size_t n = std::min(toks.size() - i0, size_t(a.batch));
    batch.clear();
    for (size_t i = 0; i < n; ++i) batch.add(seq, int(i0 + i), toks[i0 + i], true);
    m.model->forward(batch, *state, out);
    if (std::fwrite(out.logits.data(), sizeof(float), out.logits.size(), f) != out.logits.size()) {
      std::fclose(f);
      fail("{}: write failed", a.out);
    }
  }
  if (std::fclose(f) != 0) fail("{}: write failed", a.out);
  std::fprintf(stderr, "wrote %zu x %d logits to %s\n", toks.size(), m.model->hparams().n_vocab, a.out.c_str());
}

}  // namespace

void register_logits(CLI::App& app) {
  auto a = std::make_shared<LogitsArgs>();
  CLI::App* c = app.add_subcommand("logits", "Write the logits of every position as raw little-endian float32");
  c->add_option("-m,--model", a->model, "Model file (GGUF)")->required()->check(CLI::ExistingFile);
  auto* t = c->add_option("--tokens", a->tokens, "Comma-separated token ids");
  auto* p = c->add_option("-p,--prompt", a->prompt, "Text to tokenize (special tokens parsed)");
  t->excludes(p);
  c->add_option("--batch", a->batch, "Tokens per forward (1 = pure incremental decode)")->capture_default_str();
  add_backend_flags(c, a->load);
  c->add_option("--out", a->out, "Output file")->required();
  c->callback([a] {
    if (a->tokens.empty() && a->prompt.empty()) throw CLI::ValidationError("logits", "give --tokens or -p");
    logits(*a);
  });
}

}  // namespace df::cli
