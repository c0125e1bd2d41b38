// deltaflash run: generate text from a prompt, streaming to stdout.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>

#include "cli/commands.h"
#include "cli/draft_options.h"
#include "cli/loaded_model.h"
#include "util/error.h"
#include "engine/chat_prompt.h"
#include "engine/generator.h"

namespace df::cli {

namespace {

struct RunArgs {
  std::string model, prompt, prompt_file, system;
  int n_predict = 128;
  LoadOptions load;
  int ctx = 4096;
  int batch = kSingleRequestPromptChunk;
  bool chat = false, no_think = false, stats_json = false;
  int64_t seed = -1;
  std::vector<std::string> logit_bias;  // "ID=BIAS"
  SamplingParams sp;
  DraftArgs draft;
};

// --prompt-file: one prompt per line, each a JSON string (so prompts may hold newlines).
std::vector<std::string> read_prompt_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read the prompt file '{}'", path);
  std::vector<std::string> prompts;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      fail("{} line {}: not JSON ({})", path, n, e.what());
    }
    if (!j.is_string()) fail("{} line {}: expected a JSON string (the prompt)", path, n);
    prompts.push_back(j.get<std::string>());
  }
  if (prompts.empty()) fail("the prompt file '{}' holds no prompts", path);
  return prompts;
}

// One prompt: tokenized (as a chat turn with --chat), its continuation streamed to stdout, the
// stats to stderr.
void generate_one(const RunArgs& a, const LoadedModel& m, SpecDecoder* spec, Generator* gen, GenerateOptions& opt,
                  const nlohmann::ordered_json& kwargs, const std::string& user_prompt) {
  const std::string text = a.chat ? chat_prompt(*m.tokenizer, a.system, user_prompt, kwargs) : user_prompt;
  const std::vector<int32_t> prompt = m.tokenizer->encode(text, true);
  if (prompt.empty()) fail("the prompt is empty after tokenization");
  if (int(prompt.size()) + 1 > a.ctx)
    fail("prompt has {} tokens but the context is {} (raise --ctx)", prompt.size(), a.ctx);
  opt.max_new_tokens = std::min(a.n_predict, a.ctx - int(prompt.size()));
  StreamDecoder dec(*m.tokenizer);
  if (!a.chat) {
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  auto on_token = [&](int32_t tok) {
    if (m.tokenizer->is_eog(tok)) return true;
    const std::string piece = dec.push(tok);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  if (gen) gen->reset();  // each prompt on its own (Generator::generate continues the sequence)
  const GenerateStats st = spec ? spec->generate(prompt, opt, on_token) : gen->generate(prompt, opt, on_token);
  const std::string tail = dec.flush();
  std::fwrite(tail.data(), 1, tail.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (a.stats_json) {
    nlohmann::json j = {{"prompt_tokens", st.prompt_tokens},       {"generated_tokens", st.generated_tokens},
                        {"prefill_tok_s", st.prefill_tok_s()},      {"decode_tok_s", st.decode_tok_s()},
                        {"prefill_seconds", st.prefill_seconds},    {"decode_seconds", st.decode_seconds},
                        {"finish_reason", st.finish_reason},        {"seed", opt.sampling.seed},
                        {"device", m.backend->name()}};
    if (const Backend::StepReplayCounts sc = m.backend->step_replay_counts(); sc.direct + sc.captured + sc.replayed > 0)
      j["cuda_graphs"] = {{"direct", sc.direct}, {"captured", sc.captured}, {"replayed", sc.replayed}};
    if (spec) {
      j["draft_steps"] = st.draft_steps;
      j["plain_steps"] = st.plain_steps;
      j["drafted_tokens"] = st.drafted_tokens;
      j["accepted_tokens"] = st.accepted_tokens;
      j["mean_accept_len"] = st.mean_accept_len();
      j["draft_step_seconds"] = st.step_seconds(true);
      j["plain_step_seconds"] = st.step_seconds(false);
      nlohmann::json steps = nlohmann::json::array();
      for (const GenerateStats::Step& s : st.steps) steps.push_back({s.drafts, s.committed, s.ms});
      j["steps"] = std::move(steps);  // [drafts (0: plain), committed, ms] per decode step
    }
    std::fprintf(stderr, "%s\n", j.dump().c_str());
  } else {
    std::fprintf(stderr, "[prompt %d tokens, %.1f tok/s | generated %d tokens, %.1f tok/s | %s | seed %llu]\n",
                 st.prompt_tokens, st.prefill_tok_s(), st.generated_tokens, st.decode_tok_s(),
                 st.finish_reason.c_str(), static_cast<unsigned long long>(opt.sampling.seed));
    if (spec)
      std::fprintf(stderr, "[draft: %d steps, %d drafted, %d accepted, tau %.2f, %d plain steps]\n", st.draft_steps,
                   st.drafted_tokens, st.accepted_tokens, st.mean_accept_len(), st.plain_steps);
  }
}

void run(const RunArgs& a) {
  if (a.prompt.empty() == a.prompt_file.empty()) fail("give either -p/--prompt or --prompt-file");
  const std::vector<std::string> prompts = a.prompt_file.empty() ? std::vector<std::string>{a.prompt}
                                                                 : read_prompt_file(a.prompt_file);
  LoadOptions lo = a.load;
  lo.max_batch_rows = a.batch;
  LoadedModel m = load_model(a.model.empty() ? default_model_path() : a.model, lo);
  GenerateOptions opt;
  opt.prefill_chunk = a.batch;
  opt.sampling = a.sp;
  opt.sampling.seed = a.seed >= 0 ? uint64_t(a.seed) : std::random_device{}();
  for (const std::string& b : a.logit_bias) {
    const size_t eq = b.find('=');
    const std::vector<int32_t> id = eq == std::string::npos ? std::vector<int32_t>{} : parse_token_list(b.substr(0, eq));
    char* end = nullptr;
    const float bias = eq == std::string::npos ? 0 : std::strtof(b.c_str() + eq + 1, &end);
    if (id.size() != 1 || end == nullptr || *end != '\0' || id[0] >= m.model->hparams().n_vocab)
      fail("--logit-bias '{}': expected TOKEN_ID=BIAS with a token id inside the vocabulary", b);
    opt.sampling.logit_bias[id[0]] = bias;
  }
  LoadedDraft draft;
  std::unique_ptr<SpecDecoder> spec;
  std::unique_ptr<Generator> gen;
  if (!a.draft.path.empty()) {
    draft = load_draft(a.draft, *m.model, a.ctx);
    spec = std::make_unique<SpecDecoder>(*m.model, *draft.source, m.tokenizer.get(), a.ctx, a.draft.spec_options());
  } else {
    gen = std::make_unique<Generator>(*m.model, m.tokenizer.get(), a.ctx);
  }
  // One model and decoder for every prompt: CUDA graphs and the speculation policy's measured
  // step costs carry over from one prompt to the next, as in a server.
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  if (a.no_think) kwargs["enable_thinking"] = false;
  for (const std::string& p : prompts) generate_one(a, m, spec.get(), gen.get(), opt, kwargs, p);
}

}  // namespace

void register_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  CLI::App* c = app.add_subcommand("run", "Generate text from a prompt (streams to stdout)");
  c->add_option("-m,--model", a->model, "Model file (GGUF; default: the bundled demo model)")->check(CLI::ExistingFile);
  c->add_option("-p,--prompt", a->prompt, "Prompt text");
  c->add_option("--prompt-file", a->prompt_file,
                "Generate for each prompt of FILE in turn, one model load for all (one prompt per line, each a "
                "JSON string; with --stats-json one stats line each)")
      ->check(CLI::ExistingFile);
  c->add_option("-n,--n-predict", a->n_predict, "Maximum tokens to generate")->capture_default_str();
  c->add_option("--temp", a->sp.temperature, "Sampling temperature (0 = greedy)")->capture_default_str();
  c->add_option("--top-k", a->sp.top_k, "Keep the k most likely tokens (0 = off)")->capture_default_str();
  c->add_option("--top-p", a->sp.top_p, "Nucleus sampling mass (1 = off)")->capture_default_str();
  c->add_option("--min-p", a->sp.min_p, "Drop tokens below min-p times the top probability (0 = off)")
      ->capture_default_str();
  c->add_option("--repeat-penalty", a->sp.repeat_penalty, "Repetition penalty (1 = off)")->capture_default_str();
  c->add_option("--presence-penalty", a->sp.presence_penalty, "Presence penalty")->capture_default_str();
  c->add_option("--frequency-penalty", a->sp.frequency_penalty, "Frequency penalty")->capture_default_str();
  c->add_option("--seed", a->seed, "Random seed (-1 = random)")->capture_default_str();
  c->add_option("--logit-bias", a->logit_bias, "Add BIAS to a token's logit, as TOKEN_ID=BIAS (repeatable)");
  c->add_option("--penalty-last-n", a->sp.penalty_last_n, "Recent tokens the penalties look at")->capture_default_str();
  c->add_flag("--chat", a->chat, "Wrap the prompt as a chat turn with the model's chat template (ChatML when it has none)");
  c->add_flag("--no-think", a->no_think, "With --chat: render the template with enable_thinking = false");
  c->add_option("--system", a->system, "System prompt (with --chat)");
  add_backend_flags(c, a->load);
  add_draft_flags(c, a->draft);
  c->add_option("-c,--ctx", a->ctx, "Context size in tokens")->capture_default_str();
  c->add_option("-b,--batch", a->batch, "Prefill chunk size in tokens")->capture_default_str();
  c->add_flag("--stats-json", a->stats_json, "Print the closing stats as one JSON object on stderr");
  c->callback([a] { run(*a); });
}

}  // namespace df::cli
