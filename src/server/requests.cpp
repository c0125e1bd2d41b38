#include <fmt/format.h>

#include "server/requests.h"

#include <charconv>
#include <cmath>
#include <random>

#include "server/api_error.h"

namespace df::server {

// Ordered: key order of the client's JSON reaches the template (see requests.h).
using json = nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& msg) { throw ApiError(400, msg, param); }

const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

double number_in(const json& body, const char* name, double lo, double hi, double dflt) {
  const json* v = field(body, name);
  if (!v) return dflt;
  if (!v->is_number()) bad(name, fmt::format("'{}' must be a number", name));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) bad(name, fmt::format("'{}' must be between {} and {}, got {}", name, lo, hi, x));
  return x;
}

int64_t integer_in(const json& body, const char* name, int64_t lo, int64_t hi, int64_t dflt) {
  const json* v = field(body, name);
  if (!v) return dflt;
  if (!v->is_number_integer()) bad(name, fmt::format("'{}' must be an integer", name));
  const int64_t x = v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX) ? INT64_MAX : v->get<int64_t>();
  if (x < lo || x > hi) bad(name, fmt::format("'{}' must be between {} and {}, got {}", name, lo, hi, x));
  return x;
}

bool boolean(const json& body, const char* name, bool dflt) {
  const json* v = field(body, name);
  if (!v) return dflt;
  if (!v->is_boolean()) bad(name, fmt::format("'{}' must be a boolean", name));
  return v->get<bool>();
}

void parse_generation(const json& body, int n_vocab, GenerationFields& g) {
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) bad("model", "'model' must be a string");
    g.model = m->get<std::string>();
  }
  if (integer_in(body, "n", 1, INT32_MAX, 1) != 1) bad("n", "only n = 1 is supported");
  const int64_t max_tokens = integer_in(body, "max_tokens", 1, INT32_MAX, -1);
  const int64_t max_completion = integer_in(body, "max_completion_tokens", 1, INT32_MAX, -1);
  g.max_tokens = int(max_completion > 0 ? max_completion : max_tokens);

  SamplingParams& s = g.sampling;
  s.temperature = float(number_in(body, "temperature", 0, 2, s.temperature));
  s.top_p = float(number_in(body, "top_p", 0, 1, s.top_p));
  if (field(body, "top_p") && s.top_p <= 0) bad("top_p", "'top_p' must be greater than 0");
  s.top_k = int(integer_in(body, "top_k", -1, INT32_MAX, s.top_k));
  s.min_p = float(number_in(body, "min_p", 0, 1, s.min_p));
  s.presence_penalty = float(number_in(body, "presence_penalty", -2, 2, s.presence_penalty));
  s.frequency_penalty = float(number_in(body, "frequency_penalty", -2, 2, s.frequency_penalty));
  s.repeat_penalty = float(number_in(body, "repetition_penalty", 0, 10, s.repeat_penalty));
  if (field(body, "repetition_penalty") && s.repeat_penalty <= 0)
    bad("repetition_penalty", "'repetition_penalty' must be greater than 0");
  if (const json* seed = field(body, "seed")) {
    if (!seed->is_number_integer()) bad("seed", "'seed' must be an integer");
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>() : uint64_t(seed->get<int64_t>());
  } else {
    s.seed = std::random_device{}() | (uint64_t(std::random_device{}()) << 32);
  }
  if (const json* lb = field(body, "logit_bias")) {
    if (!lb->is_object()) bad("logit_bias", "'logit_bias' must be an object mapping token ids to biases");
    for (const auto& [key, val] : lb->items()) {
      int32_t id = -1;
      auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (ec != std::errc() || end != key.data() + key.size() || id < 0 || id >= n_vocab)
        bad("logit_bias", fmt::format("logit_bias key '{}' is not a token id in [0, {})", key, n_vocab));
      if (!val.is_number() || !std::isfinite(val.get<double>()) || val.get<double>() < -100 || val.get<double>() > 100)
        bad("logit_bias", fmt::format("logit_bias value for token {} must be a number in [-100, 100]", id));
      s.logit_bias[id] = val.get<float>();
    }
  }
  if (const json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      g.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > 4) bad("stop", "'stop' takes at most 4 sequences");
      for (const json& x : *stop) {
        if (!x.is_string()) bad("stop", "'stop' must be a string or a list of strings");
        g.stop.push_back(x.get<std::string>());
      }
    } else {
      bad("stop", "'stop' must be a string or a list of strings");
    }
    // Matching holds back up to a stop's length and compares prefixes per token: keep it cheap.
    for (const std::string& s : g.stop)
      if (s.size() > kMaxStopBytes) bad("stop", fmt::format("stop sequences are limited to {} bytes", kMaxStopBytes));
  }
  g.stream = boolean(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "'stream_options' must be an object");
    g.include_usage = boolean(*so, "include_usage", false);
  }
  if (const json* user = field(body, "user"); user && !user->is_string()) bad("user", "'user' must be a string");
}

// A message's text content: a string, or a list of {"type": "text", "text": ...} parts.
std::string message_text(const json& content, size_t index) {
  const std::string param = fmt::format("messages[{}].content", index);
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(param, "message content must be a string or a list of content parts");
  std::string text;
  for (const json& part : content) {
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      bad(param, "each content part must be an object with a 'type'");
    const std::string type = part["type"].get<std::string>();
    if (type != "text") bad(param, fmt::format("content parts of type '{}' are not supported (text only)", type));
    if (!part.contains("text") || !part["text"].is_string()) bad(param, "a text content part needs a string 'text'");
    text += part["text"].get<std::string>();
  }
  return text;
}

json normalize_tool_calls(const json& calls, size_t index) {
  const std::string param = fmt::format("messages[{}].tool_calls", index);
  if (!calls.is_array()) bad(param, "'tool_calls' must be a list");
  json out = json::array();
  for (const json& c : calls) {
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
      bad(param, "each tool call needs a 'function' object");
    json f = c["function"];
    if (!f.contains("name") || !f["name"].is_string()) bad(param, "each tool call needs a function name");
    // Templates iterate the arguments as a mapping; OpenAI sends them as a JSON string. A
    // string that is not a JSON object stays a string (templates that print it still work).
    if (f.contains("arguments") && f["arguments"].is_string()) {
      json parsed = json::parse(f["arguments"].get<std::string>(), nullptr, false);
      if (!parsed.is_discarded() && parsed.is_object()) f["arguments"] = std::move(parsed);
    } else if (!f.contains("arguments") || f["arguments"].is_null()) {
      f["arguments"] = json::object();
    }
    json nc = c;
    nc["function"] = std::move(f);
    if (!nc.contains("type")) nc["type"] = "function";
    out.push_back(std::move(nc));
  }
  return out;
}

json normalize_messages(const json& body) {
  const json* msgs = field(body, "messages");
  if (!msgs) bad("messages", "'messages' is required");
  if (!msgs->is_array()) bad("messages", "'messages' must be a list");
  if (msgs->empty()) bad("messages", "'messages' must not be empty");
  json out = json::array();
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string param = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad(param, "each message must be an object");
    if (!m.contains("role") || !m["role"].is_string()) bad(param + ".role", "each message needs a string 'role'");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool")
      bad(param + ".role", fmt::format("unknown role '{}'", role));
    json nm = m;
    const bool has_calls = role == "assistant" && m.contains("tool_calls") && !m["tool_calls"].is_null();
    if (!m.contains("content") || m["content"].is_null()) {
      if (!has_calls) bad(param + ".content", "message content is required");
      nm["content"] = "";
    } else {
      nm["content"] = message_text(m["content"], i);
    }
    if (has_calls) nm["tool_calls"] = normalize_tool_calls(m["tool_calls"], i);
    if (role == "tool" && m.contains("tool_call_id") && !m["tool_call_id"].is_string())
      bad(param + ".tool_call_id", "'tool_call_id' must be a string");
    out.push_back(std::move(nm));
  }
  return out;
}

void parse_tools(const json& body, ChatRequest& r) {
  if (const json* tools = field(body, "tools")) {
    if (!tools->is_array()) bad("tools", "'tools' must be a list");
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string param = fmt::format("tools[{}]", i);
      if (!t.is_object() || !t.contains("type") || t["type"] != "function")
        bad(param, "each tool must be an object with type 'function'");
      if (!t.contains("function") || !t["function"].is_object() || !t["function"].contains("name") ||
          !t["function"]["name"].is_string() || t["function"]["name"].get<std::string>().empty())
        bad(param + ".function", "each tool needs a function with a non-empty 'name'");
      if (t["function"].contains("parameters") && !t["function"]["parameters"].is_object() &&
          !t["function"]["parameters"].is_null())
        bad(param + ".function.parameters", "'parameters' must be a JSON schema object");
    }
    if (!tools->empty()) r.tools = *tools;
  }
  if (const json* tc = field(body, "tool_choice")) {
    if (tc->is_string()) {
      const std::string s = tc->get<std::string>();
      if (s == "auto") r.tool_choice = ToolChoice::Auto;
      else if (s == "none") r.tool_choice = ToolChoice::None;
      else if (s == "required") {
        if (r.tools.is_null()) bad("tool_choice", "'tool_choice' requires 'tools'");
        r.tool_choice = ToolChoice::Required;
      } else {
        bad("tool_choice", "'tool_choice' must be 'auto', 'none', 'required' or a named function");
      }
    } else if (tc->is_object() && tc->contains("function") && (*tc)["function"].is_object() &&
               (*tc)["function"].contains("name") && (*tc)["function"]["name"].is_string()) {
      const std::string name = (*tc)["function"]["name"].get<std::string>();
      if (r.tools.is_null()) bad("tool_choice", "'tool_choice' requires 'tools'");
      bool found = false;
      for (const json& t : r.tools) found = found || t["function"]["name"] == name;
      if (!found) bad("tool_choice", fmt::format("tool_choice names '{}', which is not in 'tools'", name));
      r.tool_choice = ToolChoice::Named;
      r.tool_choice_name = name;
    } else {
      bad("tool_choice", "'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
  }
}

void refuse_unsupported(const json& body) {
  if (const json* rf = field(body, "response_format")) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      bad("response_format", "'response_format' must be an object with a 'type'");
    if ((*rf)["type"] != "text")
      bad("response_format", fmt::format("response_format type '{}' is not supported (only 'text')",
                                         (*rf)["type"].get<std::string>()));
  }
  if (field(body, "functions") || field(body, "function_call"))
    bad("functions", "'functions' / 'function_call' are not supported; use 'tools'");
  if (field(body, "prediction")) bad("prediction", "predicted outputs are not supported");
  if (field(body, "audio")) bad("audio", "audio output is not supported");
}

}  // namespace

ChatRequest parse_chat_request(const json& body, int n_vocab) {
  if (!body.is_object()) bad("", "the request body must be a JSON object");
  refuse_unsupported(body);
  ChatRequest r;
  parse_generation(body, n_vocab, r.gen);
  r.messages = normalize_messages(body);
  if (boolean(body, "logprobs", false)) {
    r.gen.top_logprobs = int(integer_in(body, "top_logprobs", 0, 20, 0));
  } else if (field(body, "top_logprobs")) {
    bad("top_logprobs", "'top_logprobs' requires 'logprobs': true");
  }
  parse_tools(body, r);
  if (const json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    r.template_kwargs = *kw;
  }
  if (const json* e = field(body, "reasoning_effort")) {
    const std::string s = e->is_string() ? e->get<std::string>() : "";
    if (s == "low") r.reasoning_budget = kEffortLow;
    else if (s == "medium") r.reasoning_budget = kEffortMedium;
    else if (s == "high") r.reasoning_budget = kEffortHigh;
    else bad("reasoning_effort", "'reasoning_effort' must be 'low', 'medium' or 'high'");
  }
  if (field(body, "reasoning_budget"))
    r.reasoning_budget = int(integer_in(body, "reasoning_budget", -1, INT32_MAX, -1));
  return r;
}

CompletionRequest parse_completion_request(const json& body, int n_vocab) {
  if (!body.is_object()) bad("", "the request body must be a JSON object");
  refuse_unsupported(body);
  CompletionRequest r;
  parse_generation(body, n_vocab, r.gen);
  const json* p = field(body, "prompt");
  if (!p) bad("prompt", "'prompt' is required");
  auto token_list = [&](const json& a) {
    for (const json& t : a) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab)
        bad("prompt", fmt::format("prompt token ids must be integers in [0, {})", n_vocab));
      r.prompt_tokens.push_back(t.get<int32_t>());
    }
    r.prompt_is_tokens = true;
  };
  if (p->is_string()) {
    r.prompt = p->get<std::string>();
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
    token_list(*p);
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
    r.prompt = (*p)[0].get<std::string>();
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_array()) {
    token_list((*p)[0]);
  } else if (p->is_array() && p->size() > 1) {
    bad("prompt", "only one prompt per request is supported");
  } else {
    bad("prompt", "'prompt' must be a string, a list of token ids, or a list with one of those");
  }
  if (r.prompt_is_tokens ? r.prompt_tokens.empty() : r.prompt.empty()) bad("prompt", "'prompt' must not be empty");
  if (boolean(body, "echo", false)) bad("echo", "'echo' is not supported");
  if (const json* s = field(body, "suffix"); s && (!s->is_string() || !s->get<std::string>().empty()))
    bad("suffix", "'suffix' is not supported");
  if (integer_in(body, "best_of", 1, INT32_MAX, 1) != 1) bad("best_of", "only best_of = 1 is supported");
  if (field(body, "logprobs")) r.gen.top_logprobs = int(integer_in(body, "logprobs", 0, 5, 0));
  return r;
}

json template_tools(const ChatRequest& r) {
  if (r.tools.is_null() || r.tool_choice == ToolChoice::None) return nullptr;
  return r.tools;
}

}  // namespace df::server
