#include "server/tool_calls.h"

#include <random>

namespace df::server {

// Ordered: arguments keep the model's key order.
using json = nlohmann::ordered_json;

namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool consume(std::string_view& s, std::string_view prefix) {
  if (s.substr(0, prefix.size()) != prefix) return false;
  s.remove_prefix(prefix.size());
  return true;
}

// The JSON-schema types declared for one parameter of a named tool (empty when unknown).
std::vector<std::string> param_types(const json& tools, std::string_view fn, std::string_view param) {
  std::vector<std::string> types;
  if (!tools.is_array()) return types;
  for (const json& t : tools) {
    const json* f = t.is_object() && t.contains("function") ? &t["function"] : nullptr;
    if (!f || !f->is_object() || !f->contains("name") || (*f)["name"] != fn) continue;
    const json* props = f->contains("parameters") && (*f)["parameters"].is_object() &&
                                (*f)["parameters"].contains("properties")
                            ? &(*f)["parameters"]["properties"]
                            : nullptr;
    if (!props || !props->is_object() || !props->contains(std::string(param))) return types;
    const json& p = (*props)[std::string(param)];
    if (!p.is_object() || !p.contains("type")) return types;
    if (p["type"].is_string()) types.push_back(p["type"].get<std::string>());
    if (p["type"].is_array())
      for (const json& x : p["type"])
        if (x.is_string()) types.push_back(x.get<std::string>());
    return types;
  }
  return types;
}

// A parameter's raw text as the first schema type it fits; a string otherwise.
json coerce(const std::string& raw, const std::vector<std::string>& types) {
  for (const std::string& t : types) {
    if (t == "string") return raw;
    const json v = json::parse(trim(raw), nullptr, false);
    if (v.is_discarded()) continue;
    if ((t == "integer" && v.is_number_integer()) || (t == "number" && v.is_number()) ||
        (t == "boolean" && v.is_boolean()) || (t == "object" && v.is_object()) || (t == "array" && v.is_array()) ||
        (t == "null" && v.is_null()))
      return v;
  }
  return raw;
}

std::optional<ToolCall> parse_json_form(std::string_view body) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  ToolCall c;
  c.name = j["name"].get<std::string>();
  if (c.name.empty()) return std::nullopt;
  const json args = j.contains("arguments") ? j["arguments"] : json::object();
  if (args.is_object()) {
    c.arguments = args.dump();
  } else if (args.is_string() && json::parse(args.get<std::string>(), nullptr, false).is_object()) {
    c.arguments = args.get<std::string>();
  } else {
    return std::nullopt;
  }
  return c;
}

std::optional<ToolCall> parse_xml_form(std::string_view s, const json& tools) {
  if (!consume(s, "<function=")) return std::nullopt;
  const size_t gt = s.find('>');
  if (gt == std::string_view::npos) return std::nullopt;
  ToolCall c;
  c.name = std::string(trim(s.substr(0, gt)));
  if (c.name.empty() || c.name.find_first_of("<\n") != std::string::npos) return std::nullopt;
  s.remove_prefix(gt + 1);
  json args = json::object();
  for (;;) {
    s = trim(s);
    if (consume(s, "</function>")) break;
    if (!consume(s, "<parameter=")) return std::nullopt;
    const size_t pgt = s.find('>');
    if (pgt == std::string_view::npos) return std::nullopt;
    const std::string name(trim(s.substr(0, pgt)));
    if (name.empty()) return std::nullopt;
    s.remove_prefix(pgt + 1);
    const size_t end = s.find("</parameter>");
    if (end == std::string_view::npos) return std::nullopt;
    std::string_view value = s.substr(0, end);
    // The template writes the value on its own line(s): drop exactly that framing newline.
    if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
    if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
    args[name] = coerce(std::string(value), param_types(tools, c.name, name));
    s.remove_prefix(end + std::string_view("</parameter>").size());
  }
  if (!trim(s).empty()) return std::nullopt;
  c.arguments = args.dump();
  return c;
}

}  // namespace

std::string new_tool_call_id() {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlnum[rng() % (sizeof kAlnum - 1)];
  return id;
}

std::string forced_tool_call_opening(bool xml_form, const std::string& name) {
  std::string s(kOpen);
  s += '\n';
  if (name.empty()) return s;
  if (xml_form) return s + "<function=" + name + ">\n";
  return s + "{\"name\": " + json(name).dump() + ", \"arguments\": ";
}

std::optional<ToolCall> parse_tool_call(std::string_view body, const json& tools) {
  body = trim(body);
  std::optional<ToolCall> c;
  if (!body.empty() && body.front() == '{') c = parse_json_form(body);
  else c = parse_xml_form(body, tools);
  if (c) c->id = new_tool_call_id();
  return c;
}

void ToolCallStreamer::emit_content(std::string_view text, std::vector<OutputPiece>& out) {
  size_t end = text.size();
  while (end > 0 && is_space(text[end - 1])) --end;
  if (end == 0) {
    pending_space_ += text;
    return;
  }
  append_text(out, OutputPiece::Kind::Content, pending_space_);
  pending_space_.clear();
  append_text(out, OutputPiece::Kind::Content, text.substr(0, end));
  pending_space_ = std::string(text.substr(end));
}

void ToolCallStreamer::close_block(std::string_view body, bool closed, std::vector<OutputPiece>& out) {
  if (std::optional<ToolCall> c = parse_tool_call(body, tools_)) {
    pending_space_.clear();  // whitespace around calls is framing
    OutputPiece p;
    p.kind = OutputPiece::Kind::ToolCall;
    p.call = std::move(*c);
    out.push_back(std::move(p));
    ++calls_;
    return;
  }
  std::string raw(kOpen);
  raw += body;
  if (closed) raw += kClose;
  emit_content(raw, out);
}

void ToolCallStreamer::push(std::string_view content, std::vector<OutputPiece>& out) {
  held_ += content;
  for (;;) {
    if (in_block_) {
      const size_t at = held_.find(kClose, searched_);
      if (at == std::string::npos) {
        // The whole block is held until it closes; the next search starts where a tag could.
        searched_ = held_.size() >= kClose.size() ? held_.size() - kClose.size() + 1 : 0;
        return;
      }
      searched_ = 0;
      close_block(std::string_view(held_).substr(0, at), true, out);
      held_.erase(0, at + kClose.size());
      in_block_ = false;
      continue;
    }
    const size_t at = held_.find(kOpen);
    if (at != std::string::npos) {
      emit_content(std::string_view(held_).substr(0, at), out);
      held_.erase(0, at + kOpen.size());
      in_block_ = true;
      searched_ = 0;
      continue;
    }
    const size_t keep = partial_tag_suffix(held_, kOpen);
    emit_content(std::string_view(held_).substr(0, held_.size() - keep), out);
    held_.erase(0, held_.size() - keep);
    return;
  }
}

void ToolCallStreamer::flush(std::vector<OutputPiece>& out) {
  if (in_block_) {
    close_block(held_, false, out);  // an unclosed block still counts if its call is complete
  } else {
    emit_content(held_, out);
  }
  if (calls_ == 0) append_text(out, OutputPiece::Kind::Content, pending_space_);
  pending_space_.clear();
  held_.clear();
  in_block_ = false;
  searched_ = 0;
}

}  // namespace df::server
