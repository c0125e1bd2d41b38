// Methods called on values: Python's str methods, dict.get/items/keys/values, list.append.
#include <optional>

#include "jinja/builtins.h"
#include "jinja/error.h"
#include "jinja/interpreter.h"
#include "jinja/string_ops.h"
#include "jinja/text.h"

namespace df::jinja {
namespace {

using Method = Value (*)(const Value& self, CallArgs& args, CallContext& ctx);

const std::string& string_arg(const CallArgs& a, size_t pos, const char* name, const char* method) {
  const Value* v = a.get(pos, name);
  if (!v || !v->is_string()) value_error("{}() needs a string argument '{}'", method, name);
  return v->as_string();
}

std::optional<std::string> optional_string(const CallArgs& a, size_t pos, const char* name, const char* method) {
  const Value* v = a.get(pos, name);
  if (!v || v->is_none() || v->is_undefined()) return std::nullopt;
  if (!v->is_string()) value_error("{}() argument '{}' must be a string or none", method, name);
  return v->as_string();
}

int64_t int_arg(const CallArgs& a, size_t pos, const char* name, int64_t dflt, const char* method) {
  const Value* v = a.get(pos, name);
  if (!v || v->is_none()) return dflt;
  if (!v->is_int()) value_error("{}() argument '{}' must be an integer", method, name);
  return v->as_int();
}

Value strings_to_list(std::vector<std::string> parts) {
  Array a;
  a.reserve(parts.size());
  for (auto& p : parts) a.emplace_back(std::move(p));
  return Value(std::move(a));
}

bool affix_match(const Value& self, CallArgs& args, bool prefix) {
  const char* method = prefix ? "startswith" : "endswith";
  const Value* arg = args.get(0, "prefix");
  if (!arg) value_error("{}() needs an argument", method);
  const std::string& s = self.as_string();
  auto one = [&](const Value& v) {
    if (!v.is_string()) value_error("{}() arguments must be strings", method);
    const std::string& p = v.as_string();
    if (p.size() > s.size()) return false;
    return prefix ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (arg->is_array()) {
    for (const Value& v : arg->as_array())
      if (one(v)) return true;
    return false;
  }
  return one(*arg);
}

// str.format with {}, {0} and {name} fields; format specifications are not supported.
Value format(const Value& self, CallArgs& args, CallContext&) {
  const std::string& f = self.as_string();
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if ((c == '{' || c == '}') && i + 1 < f.size() && f[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c == '}') value_error("format(): single '}}' in the format string");
    if (c != '{') {
      out += c;
      continue;
    }
    const size_t close = f.find('}', i);
    if (close == std::string::npos) value_error("format(): '{{' without a closing '}}'");
    const std::string field = f.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!") != std::string::npos) value_error("format(): format specifications are not supported");
    const Value* v = nullptr;
    if (field.empty()) {
      v = auto_index < args.positional.size() ? &args.positional[auto_index] : nullptr;
      ++auto_index;
    } else if (field.find_first_not_of("0123456789") == std::string::npos) {
      const size_t k = std::stoul(field);
      v = k < args.positional.size() ? &args.positional[k] : nullptr;
    } else {
      v = args.kwarg(field);
    }
    if (!v) value_error("format(): no argument for field '{{{}}}'", field);
    out += python_str(*v);
    i = close;
  }
  return Value(std::move(out));
}

Value string_method(const Value& self, const std::string& name) {
  static const std::unordered_map<std::string, Method> kMethods = {
      {"upper", [](const Value& s, CallArgs&, CallContext&) { return Value(text::upper(s.as_string())); }},
      {"lower", [](const Value& s, CallArgs&, CallContext&) { return Value(text::lower(s.as_string())); }},
      {"title", [](const Value& s, CallArgs&, CallContext&) { return Value(strings::title(s.as_string())); }},
      {"capitalize", [](const Value& s, CallArgs&, CallContext&) { return Value(strings::capitalize(s.as_string())); }},
      {"strip", [](const Value& s, CallArgs& a, CallContext&) {
         return Value(strings::strip(s.as_string(), optional_string(a, 0, "chars", "strip"), true, true));
       }},
      {"lstrip", [](const Value& s, CallArgs& a, CallContext&) {
         return Value(strings::strip(s.as_string(), optional_string(a, 0, "chars", "lstrip"), true, false));
       }},
      {"rstrip", [](const Value& s, CallArgs& a, CallContext&) {
         return Value(strings::strip(s.as_string(), optional_string(a, 0, "chars", "rstrip"), false, true));
       }},
      {"startswith", [](const Value& s, CallArgs& a, CallContext&) { return Value(affix_match(s, a, true)); }},
      {"endswith", [](const Value& s, CallArgs& a, CallContext&) { return Value(affix_match(s, a, false)); }},
      {"split", [](const Value& s, CallArgs& a, CallContext&) {
         return strings_to_list(strings::split(s.as_string(), optional_string(a, 0, "sep", "split"),
                                               int_arg(a, 1, "maxsplit", -1, "split")));
       }},
      {"rsplit", [](const Value& s, CallArgs& a, CallContext&) {
         return strings_to_list(strings::rsplit(s.as_string(), optional_string(a, 0, "sep", "rsplit"),
                                                int_arg(a, 1, "maxsplit", -1, "rsplit")));
       }},
      {"splitlines", [](const Value& s, CallArgs&, CallContext&) {
         std::vector<std::string> lines = strings::split(s.as_string(), std::string("\n"), -1);
         if (!lines.empty() && lines.back().empty()) lines.pop_back();
         for (auto& l : lines)
           if (!l.empty() && l.back() == '\r') l.pop_back();
         return strings_to_list(std::move(lines));
       }},
      {"replace", [](const Value& s, CallArgs& a, CallContext&) {
         return Value(strings::replace(s.as_string(), string_arg(a, 0, "old", "replace"),
                                       string_arg(a, 1, "new", "replace"), int_arg(a, 2, "count", -1, "replace")));
       }},
      {"find", [](const Value& s, CallArgs& a, CallContext&) {
         return Value(strings::find(s.as_string(), string_arg(a, 0, "sub", "find")));
       }},
      {"count", [](const Value& s, CallArgs& a, CallContext&) {
         return Value(strings::count(s.as_string(), string_arg(a, 0, "sub", "count")));
       }},
      {"join", [](const Value& s, CallArgs& a, CallContext&) {
         const Value* items = a.get(0, "iterable");
         if (!items) value_error("join() needs an iterable");
         std::string out;
         bool first = true;
         for (const Value& v : iterate(*items, "join")) {
           if (!v.is_string()) value_error("join(): expected string items, got {}", v.type_name());
           if (!first) out += s.as_string();
           out += v.as_string();
           first = false;
         }
         return Value(std::move(out));
       }},
      {"format", format},
      {"isdigit", [](const Value& s, CallArgs&, CallContext&) {
         const std::string& v = s.as_string();
         return Value(!v.empty() && v.find_first_not_of("0123456789") == std::string::npos);
       }},
      {"isspace", [](const Value& s, CallArgs&, CallContext&) {
         const std::string& v = s.as_string();
         return Value(!v.empty() && text::space_prefix(v, 0) == v.size());
       }},
  };
  if (name == "length") return Value(int64_t(text::code_point_count(self.as_string())));
  auto it = kMethods.find(name);
  if (it == kMethods.end()) return Value::undefined(name);
  const Method m = it->second;
  return Value::function(name, [self, m](CallArgs& args, CallContext& ctx) { return m(self, args, ctx); });
}

Value dict_method(const Value& self, const std::string& name) {
  static const std::unordered_map<std::string, Method> kMethods = {
      {"get", [](const Value& d, CallArgs& a, CallContext&) {
         const Value* key = a.get(0, "key");
         if (!key) value_error("get() needs a key");
         if (key->is_string())
           if (const Value* v = d.as_object().find(key->as_string())) return *v;
         const Value* dflt = a.get(1, "default");
         return dflt ? *dflt : Value::none();
       }},
      {"items", [](const Value& d, CallArgs&, CallContext&) {
         Array out;
         for (const auto& [k, v] : d.as_object().entries()) out.emplace_back(Array{Value(k), v});
         return Value(std::move(out));
       }},
      {"keys", [](const Value& d, CallArgs&, CallContext&) {
         Array out;
         for (const auto& [k, v] : d.as_object().entries()) out.emplace_back(k);
         return Value(std::move(out));
       }},
      {"values", [](const Value& d, CallArgs&, CallContext&) {
         Array out;
         for (const auto& [k, v] : d.as_object().entries()) out.push_back(v);
         return Value(std::move(out));
       }},
  };
  auto it = kMethods.find(name);
  if (it == kMethods.end()) return Value::undefined(name);
  const Method m = it->second;
  return Value::function(name, [self, m](CallArgs& args, CallContext& ctx) { return m(self, args, ctx); });
}

constexpr size_t kMaxListLength = 1'000'000;

Value list_method(const Value& self, const std::string& name) {
  if (name == "length") return Value(int64_t(self.as_array().size()));
  if (name == "append" || name == "extend") {
    const bool extend = name == "extend";
    return Value::function(name, [self, extend](CallArgs& args, CallContext& ctx) -> Value {
      const Value* v = args.get(0, "item");
      if (!v) value_error("{}() needs an argument", extend ? "extend" : "append");
      Array& a = self.as_array();
      const std::vector<Value> added = extend ? iterate(*v, "extend") : std::vector<Value>{*v};
      if (a.size() + added.size() > kMaxListLength) value_error("list longer than {} items", kMaxListLength);
      ctx.interp.track(self);
      a.insert(a.end(), added.begin(), added.end());
      return Value::none();
    });
  }
  if (name == "pop") {
    return Value::function(name, [self](CallArgs& args, CallContext&) -> Value {
      Array& a = self.as_array();
      if (a.empty()) value_error("pop() from an empty list");
      int64_t i = int_arg(args, 0, "index", -1, "pop");
      if (i < 0) i += int64_t(a.size());
      if (i < 0 || i >= int64_t(a.size())) value_error("pop() index out of range");
      Value v = a[size_t(i)];
      a.erase(a.begin() + i);
      return v;
    });
  }
  if (name == "index" || name == "count") {
    const bool count = name == "count";
    return Value::function(name, [self, count](CallArgs& args, CallContext&) -> Value {
      const Value* x = args.get(0, "value");
      if (!x) value_error("{}() needs an argument", count ? "count" : "index");
      int64_t n = 0;
      const Array& a = self.as_array();
      for (size_t i = 0; i < a.size(); ++i) {
        if (!values_equal(a[i], *x)) continue;
        if (!count) return Value(int64_t(i));
        ++n;
      }
      if (!count) value_error("index(): value is not in the list");
      return Value(n);
    });
  }
  return Value::undefined(name);
}

}  // namespace

Value get_method(const Value& object, const std::string& name) {
  switch (object.kind()) {
    case Value::Kind::String: return string_method(object, name);
    case Value::Kind::Object: return dict_method(object, name);
    case Value::Kind::Array: return list_method(object, name);
    default: return Value::undefined(name);
  }
}

}  // namespace df::jinja
