// deltaflash: run | serve | bench | convert | make-model | inspect | tokenize | logits
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "util/error.h"

int main(int argc, char** argv) {
  CLI::App app{"deltaflash: fast inference for Qwen3.5-family hybrid models (GGUF arch qwen35)"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for all subcommands");
  df::cli::register_run(app);
  df::cli::register_serve(app);
  df::cli::register_bench(app);
  df::cli::register_make_model(app);
  df::cli::register_convert(app);
  df::cli::register_inspect(app);
  df::cli::register_tokenize(app);
  df::cli::register_logits(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const df::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
