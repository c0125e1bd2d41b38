// deltaflash serve: the OpenAI-compatible HTTP server. Listens first (so /health answers 503
// while the weights load), then attaches the model.
#include <CLI/CLI.hpp>

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "cli/draft_options.h"
#include "cli/loaded_model.h"
#include "server/http_server.h"
#include "util/error.h"

namespace df::cli {

namespace {

// Context used when --ctx is 0: the model's training context, capped so the KV cache of a
// long-context model does not take all memory by default.
constexpr int kDefaultCtxCap = 8192;

struct ServeArgs {
  std::string model, model_name, chat_template_file;
  LoadOptions load;
  server::ServerOptions server;
  int ctx = 0;
  int batch = 512;
  DraftArgs draft;
};

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read {}", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void serve(const ServeArgs& a) {
  const std::string path = a.model.empty() ? default_model_path() : a.model;
  if (!std::filesystem::is_regular_file(path)) fail("model file {} does not exist", path);
  const std::string template_override = a.chat_template_file.empty() ? "" : read_text_file(a.chat_template_file);
  if (a.ctx < 0) fail("--ctx must be 0 (automatic) or positive");
  if (a.server.max_queue < 0) fail("--max-queue must not be negative");
  if (a.server.parallel < 1) fail("--parallel must be at least 1");
  if (a.server.reasoning_budget < -1) fail("--reasoning-budget must be -1 (unlimited) or a token count");

  // Signals are taken by one thread with sigwait (set before any thread starts, so all inherit
  // the mask); a broken client connection must not kill the process.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  LoadedModel m;  // outlives the server (declared first, destroyed last)
  LoadedDraft draft;
  server::HttpServer http(a.server);
  const int port = http.bind();
  std::fprintf(stderr, "deltaflash serve: listening on http://%s:%d\n", a.server.host.c_str(), port);
  std::fflush(stderr);

  std::atomic<bool> exiting{false};
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    if (!exiting) {
      std::fprintf(stderr, "deltaflash serve: signal %d, shutting down\n", sig);
      http.stop();
    }
  });

  std::string load_error;
  std::thread loader([&] {
    try {
      LoadOptions lo = a.load;
      lo.max_batch_rows = a.batch;
      lo.progress = false;
      m = load_model(path, lo);
      server::ServedModel sm;
      sm.model = m.model.get();
      sm.tokenizer = m.tokenizer.get();
      sm.name = a.model_name.empty() ? std::filesystem::path(path).stem().string() : a.model_name;
      sm.chat_template = a.chat_template_file.empty() ? m.tokenizer->vocab().chat_template : template_override;
      const int trained = m.model->hparams().n_ctx_train;
      sm.ctx = a.ctx > 0 ? a.ctx : std::min(trained > 0 ? trained : kDefaultCtxCap, kDefaultCtxCap);
      if (!a.draft.path.empty()) {
        draft = load_draft(a.draft, *m.model, sm.ctx);
        sm.drafts = draft.sources(*m.model, a.server.parallel, sm.ctx);
        sm.spec = a.draft.spec_options();
      }
      http.attach(sm);
      std::fprintf(stderr, "deltaflash serve: model %s loaded (%s, context %d tokens)\n", sm.name.c_str(),
                   m.backend->name(), sm.ctx);
      std::fflush(stderr);
    } catch (const std::exception& e) {
      load_error = e.what();
      http.stop();
    }
  });

  const bool listened = http.serve();
  loader.join();
  exiting = true;
  pthread_kill(signal_thread.native_handle(), SIGUSR1);
  signal_thread.join();
  if (!load_error.empty()) fail("{}", load_error);
  if (!listened) fail("the server stopped unexpectedly");
}

}  // namespace

void register_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* c = app.add_subcommand("serve", "OpenAI-compatible HTTP server (chat/completions, completions, models)");
  c->add_option("-m,--model", a->model, "Model file (GGUF; default: the bundled demo model)");
  c->add_option("--host", a->server.host, "Address to listen on")->capture_default_str();
  c->add_option("--port", a->server.port, "Port (0: any free port, printed on stderr)")->capture_default_str();
  c->add_option("--api-key", a->server.api_key, "Require 'Authorization: Bearer KEY' (default: no key)");
  c->add_option("-c,--ctx", a->ctx, "Tokens per request, prompt + completion (0: the model's context, at most 8192)")
      ->capture_default_str();
  c->add_option("--model-name", a->model_name, "Model id reported by /v1/models (default: the file name)");
  c->add_option("--chat-template-file", a->chat_template_file,
                "Jinja chat template to use instead of the model's (tokenizer.chat_template; ChatML when absent)")
      ->check(CLI::ExistingFile);
  c->add_option("--reasoning-budget", a->server.reasoning_budget,
                "Thinking tokens before </think> is forced, for requests that set none (-1: unlimited)")
      ->capture_default_str();
  c->add_option("--parallel", a->server.parallel,
                "Requests generated together, one forward per step for all of them (with --draft, a request "
                "speculates while it runs alone)")
      ->capture_default_str();
  c->add_option("--max-queue", a->server.max_queue, "Requests that may wait for the engine; more get 503")
      ->capture_default_str();
  c->add_option("--max-body-bytes", a->server.max_body_bytes, "Largest request body; larger ones get 413")
      ->capture_default_str();
  c->add_option("--http-threads", a->server.http_threads, "Connections served at once")->capture_default_str();
  c->add_option("-b,--batch", a->batch, "Prefill chunk size in tokens")->capture_default_str();
  add_backend_flags(c, a->load);
  add_draft_flags(c, a->draft);
  c->callback([a] { serve(*a); });
}

}  // namespace df::cli
