// deltaflash tokenize: text -> ids (JSON array), or --decode ids -> text.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "cli/loaded_model.h"
#include "util/error.h"
#include <fmt/ranges.h>

namespace df::cli {

namespace {

struct TokenizeArgs {
  std::string model, text, decode;
  bool no_special = false;
};

void tokenize(const TokenizeArgs& a) {
  LoadedModel m = load_tokenizer(a.model);
  if (!a.decode.empty()) {
    const std::vector<int32_t> ids = parse_token_list(a.decode);
    for (int32_t id : ids)
      if (id >= m.tokenizer->n_vocab()) fail("token id {} is outside the vocabulary (0..{})", id, m.tokenizer->n_vocab() - 1);
    const std::string text = m.tokenizer->decode(ids);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    return;
  }
  const std::vector<int32_t> ids = m.tokenizer->encode(a.text, !a.no_special);
  std::printf("[%s]\n", fmt::format("{}", fmt::join(ids, ",")).c_str());
}

}  // namespace

void register_tokenize(CLI::App& app) {
  auto a = std::make_shared<TokenizeArgs>();
  CLI::App* c = app.add_subcommand("tokenize", "Print the token ids of a text as a JSON array (or decode ids)");
  c->add_option("-m,--model", a->model, "Model file (GGUF)")->required()->check(CLI::ExistingFile);
  c->add_option("text", a->text, "Text to tokenize");
  c->add_flag("--no-special", a->no_special, "Treat special-token text as plain text");
  c->add_option("--decode", a->decode, "Comma-separated ids to turn back into text");
  c->callback([a] {
    if (a->decode.empty() && a->text.empty()) throw CLI::ValidationError("tokenize", "give TEXT or --decode IDS");
    tokenize(*a);
  });
}

}  // namespace df::cli
