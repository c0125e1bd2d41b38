// Each subcommand registers itself on the CLI11 app (one file per subcommand).
#pragma once

namespace CLI {
class App;
}

namespace df::cli {

void register_run(CLI::App& app);
void register_serve(CLI::App& app);
void register_inspect(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_logits(CLI::App& app);
void register_bench(CLI::App& app);
void register_make_model(CLI::App& app);
void register_convert(CLI::App& app);

}  // namespace df::cli
