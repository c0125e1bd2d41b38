// Unit tests of the server's text pipeline and request validation: stop sequences split across
// tokens, <think> splitting, tool-call parsing (XML and JSON forms, malformed blocks stay
// content), the 400s of request parsing, key order and tool-call arguments on their way into
// the chat template, and the per-token latency histogram.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/logprobs.h"
#include "engine/stop_matcher.h"
#include "server/api_error.h"
#include "server/chat_output.h"
#include "server/prompt_renderer.h"
#include "server/reasoning_splitter.h"
#include "server/metrics.h"
#include "server/requests.h"
#include "server/server_core.h"
#include "server/tool_calls.h"

namespace df::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// Feeds pieces one by one and concatenates what the matcher releases.
std::string run_stops(const std::vector<std::string>& stops, const std::vector<std::string>& pieces, bool* matched) {
  StopMatcher m(stops);
  std::string out;
  for (const std::string& p : pieces) {
    out += m.push(p);
    if (m.matched()) break;
  }
  out += m.flush();
  *matched = m.matched();
  return out;
}

TEST(StopMatcher, StopSplitAcrossTokensIsCaughtAndNeverEmitted) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("hello S"), "hello ");  // "S" could start the stop: held
  EXPECT_EQ(m.push("TO"), "");
  EXPECT_EQ(m.push("P and more"), "");
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(m.matched_stop(), "STOP");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, FalseStartIsReleased) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("a ST"), "a ");
  EXPECT_EQ(m.push("ONE"), "STONE");
  EXPECT_FALSE(m.matched());
  EXPECT_EQ(m.push("ST"), "");
  EXPECT_EQ(m.flush(), "ST");  // end of generation: the held prefix was text after all
}

TEST(StopMatcher, OverlappingPrefixes) {
  bool matched = false;
  // "abcabd": after "abcab" fails on "c", the suffix "abc" must still be considered.
  EXPECT_EQ(run_stops({"abcabd"}, {"ab", "cab", "cabd", "zz"}, &matched), "abc");
  EXPECT_TRUE(matched);
  // Each character separately.
  EXPECT_EQ(run_stops({"aab"}, {"a", "a", "a", "a", "b", "c"}, &matched), "aa");
  EXPECT_TRUE(matched);
  EXPECT_EQ(run_stops({"aab"}, {"a", "a", "a", "c"}, &matched), "aaac");
  EXPECT_FALSE(matched);
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  bool matched = false;
  EXPECT_EQ(run_stops({"world", "lo w"}, {"hello world"}, &matched), "hel");
  EXPECT_TRUE(matched);
  EXPECT_EQ(run_stops({"xyz", ""}, {"no stop here"}, &matched), "no stop here");  // empty stops ignored
  EXPECT_FALSE(matched);
}

TEST(StopMatcher, HoldsOnlyCompleteUtf8Characters) {
  // A stop starting with a multi-byte character: the held suffix is whole characters.
  StopMatcher m({"\xC3\xA9t\xC3\xA9"});  // "été"
  EXPECT_EQ(m.push("caf\xC3\xA9"), "caf");
  EXPECT_EQ(m.push("!"), "\xC3\xA9!");
}

std::string join(const std::vector<OutputPiece>& v, OutputPiece::Kind kind) {
  std::string s;
  for (const OutputPiece& p : v)
    if (p.kind == kind) s += p.text;
  return s;
}

std::vector<OutputPiece> split_chars(bool starts_in, const std::string& text) {
  ReasoningSplitter r(starts_in);
  std::vector<OutputPiece> out;
  for (char c : text) r.push(std::string(1, c), out);  // worst case: one byte per token
  r.flush(out);
  return out;
}

TEST(ReasoningSplitter, ThinkBlockGoesToReasoning) {
  const auto out = split_chars(false, "<think>\nlet me see\n</think>\n\nThe answer.");
  EXPECT_EQ(join(out, OutputPiece::Kind::Reasoning), "let me see\n");
  EXPECT_EQ(join(out, OutputPiece::Kind::Content), "The answer.");
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].kind, OutputPiece::Kind::Reasoning);  // order kept
}

TEST(ReasoningSplitter, PromptOpenedThinking) {
  const auto out = split_chars(true, "hmm</think>\n\nok");
  EXPECT_EQ(join(out, OutputPiece::Kind::Reasoning), "hmm");
  EXPECT_EQ(join(out, OutputPiece::Kind::Content), "ok");
}

TEST(ReasoningSplitter, NoThinkIsAllContent) {
  const auto out = split_chars(false, "  plain <think> later is text");
  EXPECT_EQ(join(out, OutputPiece::Kind::Reasoning), "");
  EXPECT_EQ(join(out, OutputPiece::Kind::Content), "  plain <think> later is text");
}

TEST(ReasoningSplitter, UnclosedThinkingStaysReasoning) {
  const auto out = split_chars(true, "still thinking </thi");
  EXPECT_EQ(join(out, OutputPiece::Kind::Reasoning), "still thinking </thi");
  EXPECT_EQ(join(out, OutputPiece::Kind::Content), "");
}

TEST(ReasoningSplitter, PartialOpenTagThatIsNotATag) {
  const auto out = split_chars(false, "<thing>");
  EXPECT_EQ(join(out, OutputPiece::Kind::Content), "<thing>");
}

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
    "hours": {"type": "array"}, "where": {"type": ["number", "string"]}}}}}
])");

TEST(ToolCallParser, XmlFormWithSchemaCoercion) {
  const auto c = parse_tool_call(
      "\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
      "<parameter=metric>\ntrue\n</parameter>\n<parameter=hours>\n[1, 2]\n</parameter>\n"
      "<parameter=where>\nnear 5\n</parameter>\n</function>\n",
      kTools);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->name, "get_weather");
  EXPECT_EQ(c->id.rfind("call_", 0), 0u);
  EXPECT_EQ(c->id.size(), 5u + 24u);
  const json args = json::parse(c->arguments);
  EXPECT_EQ(args, json::parse(R"({"city": "New York", "days": 3, "metric": true, "hours": [1, 2], "where": "near 5"})"));
}

TEST(ToolCallParser, XmlValuesStayStringsWithoutSchema) {
  const auto c = parse_tool_call("<function=other>\n<parameter=n>\n42\n</parameter>\n</function>", kTools);
  ASSERT_TRUE(c);
  EXPECT_EQ(json::parse(c->arguments), json::parse(R"({"n": "42"})"));
  // Multi-line values keep their inner newlines.
  const auto m = parse_tool_call("<function=f>\n<parameter=code>\na\n\nb\n</parameter>\n</function>", nullptr);
  ASSERT_TRUE(m);
  EXPECT_EQ(json::parse(m->arguments)["code"], "a\n\nb");
}

TEST(ToolCallParser, JsonForm) {
  const auto c = parse_tool_call(R"(
{"name": "get_weather", "arguments": {"city": "Paris"}}
)",
                                 kTools);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->name, "get_weather");
  EXPECT_EQ(json::parse(c->arguments), json::parse(R"({"city": "Paris"})"));
  const auto s = parse_tool_call(R"({"name": "f", "arguments": "{\"a\": 1}"})", nullptr);
  ASSERT_TRUE(s);
  EXPECT_EQ(json::parse(s->arguments), json::parse(R"({"a": 1})"));
  const auto none = parse_tool_call(R"({"name": "f"})", nullptr);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->arguments, "{}");
}

TEST(ToolCallParser, MalformedBlocksAreRejected) {
  for (const char* body : {"", "{not json}", R"({"arguments": {}})", R"({"name": 3})", R"({"name": "f", "arguments": 5})",
                           "<function=f>\n<parameter=a>\n1\n</function>", "<function=f>", "<function=>\n</function>",
                           "<function=f>\n</function> trailing", "plain text"}) {
    EXPECT_FALSE(parse_tool_call(body, kTools)) << body;
  }
}

std::vector<OutputPiece> stream_tools(const std::string& text, size_t piece) {
  ToolCallStreamer s(kTools);
  std::vector<OutputPiece> out;
  for (size_t i = 0; i < text.size(); i += piece) s.push(text.substr(i, piece), out);
  s.flush(out);
  return out;
}

TEST(ToolCallStreamer, ContentThenCallNeverLeaksMarkup) {
  const std::string text =
      "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>\n";
  for (size_t piece : {1, 3, 7, 1000}) {
    const auto out = stream_tools(text, piece);
    ASSERT_EQ(out.size(), 3u) << piece;
    EXPECT_EQ(out[0].kind, OutputPiece::Kind::Content);
    EXPECT_EQ(out[0].text, "Let me check.");  // the newline before the call is framing
    EXPECT_EQ(out[1].kind, OutputPiece::Kind::ToolCall);
    EXPECT_EQ(json::parse(out[1].call.arguments)["city"], "Oslo");
    EXPECT_EQ(out[2].kind, OutputPiece::Kind::ToolCall);
    EXPECT_EQ(json::parse(out[2].call.arguments)["city"], "Rome");
    EXPECT_NE(out[1].call.id, out[2].call.id);
  }
}

TEST(ToolCallStreamer, MalformedBlockStaysContent) {
  const std::string text = "a <tool_call>\n{broken\n</tool_call> b";
  const auto out = stream_tools(text, 2);
  EXPECT_EQ(join(out, OutputPiece::Kind::Content), text);
  // An unclosed block at the end of generation: content unless its call is complete.
  EXPECT_EQ(join(stream_tools("x <tool_call>\n<function=f>\n<param", 4), OutputPiece::Kind::Content),
            "x <tool_call>\n<function=f>\n<param");
  const auto done = stream_tools("<tool_call>\n<function=f>\n</function>\n", 4);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].kind, OutputPiece::Kind::ToolCall);
}

TEST(ChatOutput, StopThinkAndToolsTogether) {
  ChatOutputOptions o;
  o.stops = {"END"};
  o.parse_reasoning = true;
  o.starts_in_reasoning = true;
  o.parse_tools = true;
  o.tools = kTools;
  ChatOutput chat(o);
  const std::string text =
      "plan</think>\n\nCalling.<tool_call>\n<function=get_weather>\n<parameter=days>\n2\n</parameter>\n</function>\n"
      "</tool_call>EN";
  std::vector<OutputPiece> out;
  for (char ch : text) chat.push(std::string(1, ch), out);
  EXPECT_FALSE(chat.stopped());
  chat.push("D ignored", out);
  EXPECT_TRUE(chat.stopped());
  chat.finish(out);
  EXPECT_EQ(join(out, OutputPiece::Kind::Reasoning), "plan");
  EXPECT_EQ(join(out, OutputPiece::Kind::Content), "Calling.");
  ASSERT_EQ(chat.tool_calls(), 1);
  EXPECT_EQ(json::parse(out.back().call.arguments)["days"], 2);
}

TEST(ChatOutput, ToolsNotOfferedMeansPlainContent) {
  ChatOutputOptions o;
  o.parse_reasoning = true;
  ChatOutput chat(o);
  std::vector<OutputPiece> out;
  chat.push("<tool_call>\n{\"name\": \"f\"}\n</tool_call>", out);
  chat.finish(out);
  EXPECT_EQ(join(out, OutputPiece::Kind::Content), "<tool_call>\n{\"name\": \"f\"}\n</tool_call>");
}

TEST(Logprobs, LogSoftmaxOfRawLogits) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, 50.0f};
  const TokenLogprobs lp = compute_logprobs(logits, 4, 2, 3);  // id 4 is padding: excluded
  double z = 0;
  for (int i = 0; i < 4; ++i) z += std::exp(double(logits[size_t(i)]));
  EXPECT_NEAR(lp.logprob, 2.0 - std::log(z), 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].id, 1);  // tie with id 3: smaller id first
  EXPECT_EQ(lp.top[1].id, 3);
  EXPECT_EQ(lp.top[2].id, 2);
  EXPECT_NEAR(lp.top[0].logprob, 3.0 - std::log(z), 1e-6);
}

// Expects parse_chat_request to fail with 400 naming `param`.
void expect_bad_chat(const std::string& body, const std::string& param) {
  try {
    parse_chat_request(json::parse(body), 1000);
    ADD_FAILURE() << "accepted: " << body;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, param) << body << ": " << e.what();
  }
}

TEST(Requests, ChatValidation) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
  expect_bad_chat("{}", "messages");
  expect_bad_chat(R"({"messages": []})", "messages");
  expect_bad_chat(R"({"messages": "hi"})", "messages");
  expect_bad_chat(R"({"messages": [{"role": "user"}]})", "messages[0].content");
  expect_bad_chat(R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role");
  expect_bad_chat(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
                  "messages[0].content");
  expect_bad_chat("{" + msgs + R"(, "n": 2})", "n");
  expect_bad_chat("{" + msgs + R"(, "temperature": "hot"})", "temperature");
  expect_bad_chat("{" + msgs + R"(, "temperature": 3})", "temperature");
  expect_bad_chat("{" + msgs + R"(, "max_tokens": 0})", "max_tokens");
  expect_bad_chat("{" + msgs + R"(, "max_tokens": 1.5})", "max_tokens");
  expect_bad_chat("{" + msgs + R"(, "stop": ["a", "b", "c", "d", "e"]})", "stop");
  expect_bad_chat("{" + msgs + R"(, "stop": 5})", "stop");
  expect_bad_chat("{" + msgs + R"(, "stop": ")" + std::string(513, 'x') + R"("})", "stop");
  expect_bad_chat("{" + msgs + R"(, "logprobs": true, "top_logprobs": 21})", "top_logprobs");
  expect_bad_chat("{" + msgs + R"(, "top_logprobs": 2})", "top_logprobs");
  expect_bad_chat("{" + msgs + R"(, "response_format": {"type": "json_object"}})", "response_format");
  expect_bad_chat("{" + msgs + R"(, "response_format": {"type": "json_schema", "json_schema": {}}})", "response_format");
  expect_bad_chat("{" + msgs + R"(, "logit_bias": {"1000": 1}})", "logit_bias");
  expect_bad_chat("{" + msgs + R"(, "logit_bias": {"x": 1}})", "logit_bias");
  expect_bad_chat("{" + msgs + R"(, "logit_bias": {"5": 101}})", "logit_bias");
  expect_bad_chat("{" + msgs + R"(, "tool_choice": "required"})", "tool_choice");
  expect_bad_chat("{" + msgs + R"(, "tools": [{"type": "function", "function": {"name": "a"}}],
                                    "tool_choice": {"type": "function", "function": {"name": "b"}}})",
                  "tool_choice");
  expect_bad_chat("{" + msgs + R"(, "tools": [{"type": "retrieval"}]})", "tools[0]");
  expect_bad_chat("{" + msgs + R"(, "reasoning_effort": "extreme"})", "reasoning_effort");
  expect_bad_chat("{" + msgs + R"(, "stream": "yes"})", "stream");
}

TEST(Requests, ChatFieldsAreRead) {
  const ChatRequest r = parse_chat_request(json::parse(R"({
    "model": "anything", "messages": [
      {"role": "system", "content": "s"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "42"}],
    "max_completion_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": 3, "min_p": 0.1, "seed": 9,
    "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "stop": "x",
    "logprobs": true, "top_logprobs": 4, "logit_bias": {"12": -5},
    "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none",
    "chat_template_kwargs": {"enable_thinking": false}, "reasoning_effort": "medium",
    "stream": true, "stream_options": {"include_usage": true}, "user": "u", "unknown_field": [1, 2]
  })"),
                                           1000);
  EXPECT_EQ(r.gen.model, "anything");
  EXPECT_EQ(r.gen.max_tokens, 7);
  EXPECT_EQ(r.gen.sampling.temperature, 0.0f);
  EXPECT_EQ(r.gen.sampling.top_k, 3);
  EXPECT_EQ(r.gen.sampling.seed, 9u);
  EXPECT_FLOAT_EQ(r.gen.sampling.repeat_penalty, 1.1f);
  EXPECT_EQ(r.gen.sampling.logit_bias.at(12), -5.0f);
  EXPECT_EQ(r.gen.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.gen.top_logprobs, 4);
  EXPECT_TRUE(r.gen.stream);
  EXPECT_TRUE(r.gen.include_usage);
  EXPECT_EQ(r.messages[1]["content"], "ab");
  EXPECT_EQ(r.messages[2]["content"], "");
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["function"]["arguments"], ordered_json::parse(R"({"x": 1})"));
  EXPECT_EQ(r.tool_choice, ToolChoice::None);
  EXPECT_TRUE(template_tools(r).is_null());  // "none": the template sees no tools
  EXPECT_EQ(r.template_kwargs["enable_thinking"], false);
  EXPECT_EQ(r.reasoning_budget, kEffortMedium);
}

TEST(Requests, CompletionValidation) {
  auto bad = [](const std::string& body, const std::string& param) {
    try {
      parse_completion_request(json::parse(body), 1000);
      ADD_FAILURE() << "accepted: " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param, param) << body;
    }
  };
  bad("{}", "prompt");
  bad(R"({"prompt": ""})", "prompt");
  bad(R"({"prompt": ["a", "b"]})", "prompt");
  bad(R"({"prompt": [1, 5000]})", "prompt");
  bad(R"({"prompt": "a", "echo": true})", "echo");
  bad(R"({"prompt": "a", "best_of": 2})", "best_of");
  bad(R"({"prompt": "a", "logprobs": 6})", "logprobs");
  const CompletionRequest t = parse_completion_request(json::parse(R"({"prompt": [[1, 2, 3]], "logprobs": 2})"), 1000);
  EXPECT_TRUE(t.prompt_is_tokens);
  EXPECT_EQ(t.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(t.gen.top_logprobs, 2);
}

ChatRequest chat_of(const std::string& body) { return parse_chat_request(json::parse(body), 1000); }

TEST(PromptRenderer, ChatMlWhenTheModelHasNoTemplate) {
  const PromptRenderer r("", "", "<|im_end|>");
  const RenderedPrompt p = r.render(chat_of(R"({"messages": [{"role": "system", "content": "S"},
                                                          {"role": "user", "content": "U"}]})"));
  EXPECT_EQ(p.text, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(p.starts_in_reasoning);
}

TEST(PromptRenderer, TemplateInputsAndErrors) {
  // Tools, kwargs and the generation prompt reach the template; raise_exception is a 400.
  const PromptRenderer r(
      "{% if messages[0].role != 'user' %}{{ raise_exception('first message must be from the user') }}{% endif %}"
      "{{ messages[0].content }}|{{ tools | length if tools else 0 }}|{{ flag }}|"
      "{% if add_generation_prompt %}<think>\n{% endif %}",
      "", "");
  const RenderedPrompt p = r.render(chat_of(R"({"messages": [{"role": "user", "content": "hi"}],
      "tools": [{"type": "function", "function": {"name": "f"}}], "chat_template_kwargs": {"flag": "on"}})"));
  EXPECT_EQ(p.text, "hi|1|on|<think>\n");
  EXPECT_TRUE(p.starts_in_reasoning);
  try {
    r.render(chat_of(R"({"messages": [{"role": "system", "content": "x"}]})"));
    ADD_FAILURE() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("first message must be from the user"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(ends_inside_think("<think>\nx</think>\n\n"));
  EXPECT_TRUE(ends_inside_think("<think>a</think> b <think>\n"));
}

// tool_choice "required" and a named function are read (the server then forces the call's
// opening); both need tools, and a named one must be among them.
TEST(Requests, ForcedToolChoiceIsRead) {
  const std::string base = R"("messages": [{"role": "user", "content": "hi"}],
      "tools": [{"type": "function", "function": {"name": "a"}}])";
  const ChatRequest req = parse_chat_request(json::parse("{" + base + R"(, "tool_choice": "required"})"), 1000);
  EXPECT_EQ(req.tool_choice, ToolChoice::Required);
  const ChatRequest named =
      parse_chat_request(json::parse("{" + base + R"(, "tool_choice": {"type": "function", "function": {"name": "a"}}})"), 1000);
  EXPECT_EQ(named.tool_choice, ToolChoice::Named);
  EXPECT_EQ(named.tool_choice_name, "a");
  EXPECT_FALSE(template_tools(named).is_null());
  for (const char* choice : {R"("auto")", R"("none")"})
    EXPECT_NO_THROW(parse_chat_request(json::parse("{" + base + R"(, "tool_choice": )" + choice + "}"), 1000));
}

// The forced opening in either form; a name that needs JSON escaping is escaped.
TEST(ToolCalls, ForcedOpening) {
  EXPECT_EQ(forced_tool_call_opening(true, ""), "<tool_call>\n");
  EXPECT_EQ(forced_tool_call_opening(false, ""), "<tool_call>\n");
  EXPECT_EQ(forced_tool_call_opening(true, "get_weather"), "<tool_call>\n<function=get_weather>\n");
  EXPECT_EQ(forced_tool_call_opening(false, "get_weather"), "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ");
  EXPECT_EQ(forced_tool_call_opening(false, "a\"b"), "<tool_call>\n{\"name\": \"a\\\"b\", \"arguments\": ");
  // What the model writes after the opening completes a call the parser reads back.
  const auto xml = parse_tool_call(forced_tool_call_opening(true, "f").substr(11) +
                                       "<parameter=x>\n3\n</parameter>\n</function>",
                                   nullptr);
  ASSERT_TRUE(xml.has_value());
  EXPECT_EQ(xml->name, "f");
  const auto js = parse_tool_call(forced_tool_call_opening(false, "f").substr(11) + "{\"x\": 3}}", nullptr);
  ASSERT_TRUE(js.has_value());
  EXPECT_EQ(js->name, "f");
  EXPECT_EQ(js->arguments, "{\"x\":3}");
}

// The request body keeps the client's key order all the way into the template's tojson.
TEST(Requests, ClientKeyOrderReachesTheTemplate) {
  httplib::Request req;
  req.body = R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "required": ["z"], "properties": {"z": {"type": "string"}, "a": {"type": "integer"}}}}}],
    "messages": [{"role": "user", "content": "q"},
      {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "id": "c1",
        "function": {"name": "f", "arguments": "{\"z\": \"x\", \"a\": 1}"}}]}],
    "chat_template_kwargs": {"opts": {"zeta": 1, "alpha": 2}}})";
  const ChatRequest r = parse_chat_request(parse_body(req), 1000);
  const PromptRenderer renderer(
      "{{ tools[0] | tojson }}\n{{ messages[1].tool_calls[0] | tojson }}\n{{ opts | tojson }}", "", "");
  EXPECT_EQ(renderer.render(r).text,
            R"({"type": "function", "function": {"name": "f", "parameters": {"type": "object", "required": ["z"], )"
            R"("properties": {"z": {"type": "string"}, "a": {"type": "integer"}}}}})"
            "\n"
            R"({"type": "function", "id": "c1", "function": {"name": "f", "arguments": {"z": "x", "a": 1}}})"
            "\n"
            R"({"zeta": 1, "alpha": 2})");
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// OpenAI clients send tool-call arguments as a JSON string; a Qwen3.5-style template iterates
// them as a mapping (and raises on a string), so a string holding a JSON object is parsed.
TEST(PromptRenderer, ToolCallArgumentsStringBecomesAnObject) {
  const PromptRenderer r(read_text(std::string(DELTAFLASH_TEST_DATA) + "/jinja/qwen35_style.jinja"), "", "<|im_end|>");
  const std::string history = R"({"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\", \"days\": 3}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"})";
  const std::string text = r.render(chat_of(R"({"messages": [)" + history + "]}")).text;
  EXPECT_NE(text.find("<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
                      "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"),
            std::string::npos)
      << text;

  // A string that is not a JSON object stays a string: templates that print it still work, and
  // this one's own error reaches the client as a 400.
  const ChatRequest raw = chat_of(R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant",
      "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "not json"}}]}]})");
  EXPECT_EQ(raw.messages[1]["tool_calls"][0]["function"]["arguments"], "not json");
  const PromptRenderer printing("{% for m in messages %}{% for c in m.tool_calls %}{{ c.function.arguments }}{% endfor %}{% endfor %}",
                                "", "");
  EXPECT_EQ(printing.render(raw).text, "not json");
  try {
    r.render(raw);
    ADD_FAILURE() << "no error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("Tool call arguments must be an object"), std::string::npos) << e.what();
  }
}

// Tool calls the model writes keep its argument order.
TEST(ToolCalls, ArgumentsKeepTheModelsOrder) {
  const auto x = parse_tool_call("<function=f>\n<parameter=z>\n1\n</parameter>\n<parameter=a>\n2\n</parameter>\n</function>",
                                 nullptr);
  ASSERT_TRUE(x);
  EXPECT_EQ(x->arguments, R"({"z":"1","a":"2"})");
  const auto j = parse_tool_call(R"({"name": "f", "arguments": {"z": 1, "a": 2}})", nullptr);
  ASSERT_TRUE(j);
  EXPECT_EQ(j->arguments, R"({"z":1,"a":2})");
}

// Each interval is one observation.
TEST(Metrics, SpeculationCountersAddUp) {
  Metrics m;
  m.count_speculation(3, 45, 7);
  m.count_speculation(2, 30, 4);
  const std::string text = m.render(0, 0);
  for (const char* line : {"deltaflash_spec_draft_steps_total 5\n", "deltaflash_spec_drafted_tokens_total 75\n",
                           "deltaflash_spec_accepted_tokens_total 11\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
}

TEST(Metrics, TokenIntervalsAreObservedOneByOne) {
  Metrics m;
  m.observe_token_intervals({0.0005, 0.02, 0.02, 3.0});
  const std::string text = m.render(0, 0);
  for (const char* line : {"deltaflash_time_per_output_token_seconds_bucket{le=\"0.001\"} 1\n",
                           "deltaflash_time_per_output_token_seconds_bucket{le=\"0.025\"} 3\n",
                           "deltaflash_time_per_output_token_seconds_bucket{le=\"1\"} 3\n",
                           "deltaflash_time_per_output_token_seconds_bucket{le=\"+Inf\"} 4\n",
                           "deltaflash_time_per_output_token_seconds_count 4\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
}

}  // namespace
}  // namespace df::server
