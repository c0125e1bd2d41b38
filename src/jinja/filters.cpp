// Jinja filters (`x | name(args)`). Results match @huggingface/jinja where it defines the
// filter; the others follow Python Jinja (select, map with a filter name, sum, batch, ...).
#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <unordered_map>

#include "jinja/builtins.h"
#include "jinja/error.h"
#include "jinja/interpreter.h"
#include "jinja/json_format.h"
#include "jinja/number_format.h"
#include "jinja/string_ops.h"
#include "jinja/text.h"

namespace df::jinja {

std::string python_str(const Value& v) {
  if (v.is_none()) return "None";
  return to_output(v);
}

Value attribute_path(const Value& item, const std::string& path) {
  Value cur = item;
  size_t start = 0;
  for (;;) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (cur.has_attributes()) {
      const Value* v = cur.as_object().find(part);
      cur = v ? *v : Value::undefined(part);
    } else if (cur.is_array() && !part.empty() && part.find_first_not_of("0123456789") == std::string::npos &&
               part.size() < 10) {
      const size_t i = std::stoul(part);
      cur = i < cur.as_array().size() ? cur.as_array()[i] : Value::undefined(part);
    } else {
      return Value::undefined(part);
    }
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

namespace {

using Filter = Value (*)(const Value& v, CallArgs& a, CallContext& ctx);

bool bool_arg(const CallArgs& a, size_t pos, const char* name, bool dflt, const char* filter) {
  const Value* v = a.get(pos, name);
  if (!v || v->is_none()) return dflt;
  if (!v->is_bool()) value_error("{}: '{}' must be a boolean", filter, name);
  return v->as_bool();
}

std::optional<std::string> attribute_arg(const CallArgs& a, size_t pos, const char* filter) {
  const Value* v = a.get(pos, "attribute");
  if (!v || v->is_none()) return std::nullopt;
  if (v->is_int()) return std::to_string(v->as_int());
  if (!v->is_string()) value_error("{}: 'attribute' must be a string", filter);
  return v->as_string();
}

const std::string& need_string(const Value& v, const char* filter) {
  if (!v.is_string()) value_error("filter '{}' needs a string, got {}", filter, v.type_name());
  return v.as_string();
}

std::vector<Value> items_of(const Value& v, const char* filter) { return iterate(v, filter); }

// parseInt / parseFloat as @huggingface/jinja converts strings: the longest numeric prefix.
std::optional<int64_t> parse_int_prefix(const std::string& s) {
  std::string_view t = text::trim_start(s);
  size_t i = 0;
  bool neg = false;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) neg = t[i++] == '-';
  const size_t digits = i;
  int64_t v = 0;
  while (i < t.size() && text::is_ascii_digit(t[i])) {
    if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, t[i] - '0', &v)) return std::nullopt;
    ++i;
  }
  if (i == digits) return std::nullopt;
  return neg ? -v : v;
}

std::optional<double> parse_float_prefix(const std::string& s) {
  std::string t(text::trim_start(s));
  size_t i = 0;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
  if (t.compare(i, 8, "Infinity") == 0) return (t[0] == '-' ? -1 : 1) * HUGE_VAL;
  size_t end = i;
  bool digits = false;
  while (end < t.size() && text::is_ascii_digit(t[end])) ++end, digits = true;
  if (end < t.size() && t[end] == '.') {
    ++end;
    while (end < t.size() && text::is_ascii_digit(t[end])) ++end, digits = true;
  }
  if (!digits) return std::nullopt;
  if (end < t.size() && (t[end] == 'e' || t[end] == 'E')) {
    size_t e = end + 1;
    if (e < t.size() && (t[e] == '+' || t[e] == '-')) ++e;
    if (e < t.size() && text::is_ascii_digit(t[e])) {
      while (e < t.size() && text::is_ascii_digit(t[e])) ++e;
      end = e;
    }
  }
  return std::strtod(t.substr(0, end).c_str(), nullptr);
}

Value to_int(const Value& v, CallArgs& a, CallContext&) {
  const Value* dflt = a.get(0, "default");
  const Value fallback = dflt ? *dflt : Value(0);
  switch (v.kind()) {
    case Value::Kind::Int: return v;
    case Value::Kind::Bool: return Value(v.as_bool() ? 1 : 0);
    case Value::Kind::Float: {
      const double f = std::floor(v.as_float());  // @huggingface/jinja floors
      if (!std::isfinite(f) || std::fabs(f) > 9.2e18) return fallback;
      return Value(int64_t(f));
    }
    case Value::Kind::String: {
      auto r = parse_int_prefix(v.as_string());
      return r ? Value(*r) : fallback;
    }
    default: return fallback;
  }
}

Value to_float(const Value& v, CallArgs& a, CallContext&) {
  const Value* dflt = a.get(0, "default");
  const Value fallback = dflt ? *dflt : Value(0.0);
  switch (v.kind()) {
    case Value::Kind::Int:
    case Value::Kind::Bool:
    case Value::Kind::Float: return Value(v.as_number());
    case Value::Kind::String: {
      auto r = parse_float_prefix(v.as_string());
      return r ? Value(*r) : fallback;
    }
    default: return fallback;
  }
}

Value tojson(const Value& v, CallArgs& a, CallContext&) {
  JsonOptions opt;
  if (const Value* indent = a.get(0, "indent"); indent && !indent->is_none()) {
    if (!indent->is_int() || indent->as_int() < 0 || indent->as_int() > 64)
      value_error("tojson: indent must be an integer from 0 to 64");
    opt.indent = int(indent->as_int());
  }
  opt.ensure_ascii = bool_arg(a, 99, "ensure_ascii", false, "tojson");
  opt.sort_keys = bool_arg(a, 99, "sort_keys", false, "tojson");
  if (const Value* sep = a.kwarg("separators"); sep && !sep->is_none()) {
    if (!sep->is_array() || sep->as_array().size() != 2 || !sep->as_array()[0].is_string() ||
        !sep->as_array()[1].is_string())
      value_error("tojson: separators must be a pair of strings");
    opt.separators = std::make_pair(sep->as_array()[0].as_string(), sep->as_array()[1].as_string());
  }
  return Value(to_json(v, opt));
}

Value join(const Value& v, CallArgs& a, CallContext&) {
  const Value* sep_v = a.get(0, "d");
  if (!sep_v) sep_v = a.kwarg("separator");
  std::string sep;
  if (sep_v && !sep_v->is_undefined()) sep = need_string(*sep_v, "join");
  const auto attr = attribute_arg(a, 1, "join");
  std::string out;
  bool first = true;
  for (const Value& item : items_of(v, "join")) {
    const Value x = attr ? attribute_path(item, *attr) : item;
    if (!first) out += sep;
    first = false;
    if (!x.is_none() && !x.is_undefined()) out += to_concat(x);  // JavaScript joins null as ""
  }
  return Value(std::move(out));
}

Value default_filter(const Value& v, CallArgs& a, CallContext&) {
  const Value* dflt = a.get(0, "default_value");
  const bool boolean = bool_arg(a, 1, "boolean", false, "default");
  if (v.is_undefined() || (boolean && !v.truthy())) return dflt ? *dflt : Value("");
  return v;
}

Value length(const Value& v, CallArgs&, CallContext&) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return Value(0);
    case Value::Kind::String: return Value(int64_t(text::code_point_count(v.as_string())));
    case Value::Kind::Array: return Value(int64_t(v.as_array().size()));
    case Value::Kind::Object:
    case Value::Kind::Namespace: return Value(int64_t(v.as_object().size()));
    default: value_error("filter 'length': a value of type {} has no length", v.type_name());
  }
}

Value first_or_last(const Value& v, bool first) {
  if (v.is_undefined()) return Value::undefined();
  std::vector<Value> items = items_of(v, first ? "first" : "last");
  if (items.empty()) return Value::undefined(first ? "first item" : "last item");
  return first ? items.front() : items.back();
}

Value sort(const Value& v, CallArgs& a, CallContext&) {
  std::vector<Value> items = items_of(v, "sort");
  const bool reverse = bool_arg(a, 0, "reverse", false, "sort");
  const bool cs = bool_arg(a, 1, "case_sensitive", false, "sort");
  const auto attr = attribute_arg(a, 2, "sort");
  auto key = [&](const Value& x) { return attr ? attribute_path(x, *attr) : x; };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const int c = compare_values(key(x), key(y), cs);
    return reverse ? c > 0 : c < 0;
  });
  return Value(Array(std::move(items)));
}

Value unique(const Value& v, CallArgs& a, CallContext&) {
  const auto attr = attribute_arg(a, 1, "unique");
  Array out;
  std::vector<Value> keys;
  for (const Value& item : items_of(v, "unique")) {
    const Value k = attr ? attribute_path(item, *attr) : item;
    bool seen = false;
    for (const Value& s : keys)
      if (s.kind() == k.kind() && values_equal(s, k)) seen = true;
    if (seen) continue;
    keys.push_back(k);
    out.push_back(item);
  }
  return Value(std::move(out));
}

Value dictsort(const Value& v, CallArgs& a, CallContext&) {
  if (!v.is_object()) value_error("filter 'dictsort' needs a dict, got {}", v.type_name());
  const bool cs = bool_arg(a, 0, "case_sensitive", false, "dictsort");
  const Value* by_v = a.get(1, "by");
  const std::string by = by_v ? need_string(*by_v, "dictsort") : "key";
  if (by != "key" && by != "value") value_error("dictsort: 'by' must be 'key' or 'value'");
  const bool reverse = bool_arg(a, 2, "reverse", false, "dictsort");
  Array pairs;
  for (const auto& [k, x] : v.as_object().entries()) pairs.emplace_back(Array{Value(k), x});
  const size_t idx = by == "key" ? 0 : 1;
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    const int c = compare_values(x.as_array()[idx], y.as_array()[idx], cs);
    return reverse ? c > 0 : c < 0;
  });
  return Value(std::move(pairs));
}

// select / reject / selectattr / rejectattr: keep the items for which the test (or truthiness)
// of the item, or of its attribute, is `keep`.
Value select_items(const Value& v, CallArgs& a, CallContext& ctx, bool keep, bool by_attribute) {
  const char* name = by_attribute ? (keep ? "selectattr" : "rejectattr") : (keep ? "select" : "reject");
  size_t next = 0;
  std::string attr;
  if (by_attribute) {
    if (a.positional.empty() || !a.positional[0].is_string()) value_error("{} needs an attribute name", name);
    attr = a.positional[0].as_string();
    next = 1;
  }
  std::optional<std::string> test;
  if (a.positional.size() > next) test = need_string(a.positional[next], name);
  CallArgs test_args;
  for (size_t i = next + 1; i < a.positional.size(); ++i) test_args.positional.push_back(a.positional[i]);
  Array out;
  for (const Value& item : items_of(v, name)) {
    const Value x = by_attribute ? attribute_path(item, attr) : item;
    const bool r = test ? apply_test(*test, x, test_args, ctx) : x.truthy();
    if (r == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

Value map(const Value& v, CallArgs& a, CallContext& ctx) {
  Array out;
  if (const auto attr = attribute_arg(a, 99, "map")) {
    const Value* dflt = a.kwarg("default");
    for (const Value& item : items_of(v, "map")) {
      Value x = attribute_path(item, *attr);
      out.push_back(x.is_undefined() && dflt ? *dflt : x);
    }
    return Value(std::move(out));
  }
  if (a.positional.empty() || !a.positional[0].is_string()) value_error("map needs a filter name or attribute=");
  const std::string filter = a.positional[0].as_string();
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& item : items_of(v, "map")) {
    CallArgs args = rest;
    out.push_back(apply_filter(filter, item, args, ctx));
  }
  return Value(std::move(out));
}

Value min_max(const Value& v, CallArgs& a, bool want_max) {
  const bool cs = bool_arg(a, 0, "case_sensitive", false, want_max ? "max" : "min");
  const auto attr = attribute_arg(a, 1, want_max ? "max" : "min");
  std::optional<Value> best, best_key;
  for (const Value& item : items_of(v, want_max ? "max" : "min")) {
    const Value k = attr ? attribute_path(item, *attr) : item;
    if (!best || (want_max ? compare_values(k, *best_key, cs) > 0 : compare_values(k, *best_key, cs) < 0)) {
      best = item;
      best_key = k;
    }
  }
  return best ? *best : Value::undefined("empty sequence");
}

Value sum(const Value& v, CallArgs& a, CallContext&) {
  const auto attr = attribute_arg(a, 0, "sum");
  const Value* start = a.get(1, "start");
  Value total = start ? *start : Value(0);
  for (const Value& item : items_of(v, "sum")) total = binary_op("+", total, attr ? attribute_path(item, *attr) : item);
  return total;
}

Value round_filter(const Value& v, CallArgs& a, CallContext&) {
  if (!v.is_number() && !v.is_bool()) value_error("filter 'round' needs a number, got {}", v.type_name());
  const Value* p = a.get(0, "precision");
  const int64_t precision = p && p->is_int() ? p->as_int() : 0;
  const Value* m = a.get(1, "method");
  const std::string method = m ? need_string(*m, "round") : "common";
  const double scale = std::pow(10.0, double(std::clamp<int64_t>(precision, -300, 300)));
  double x = v.as_number() * scale;
  if (method == "common") x = std::nearbyint(x);  // round half to even, as Python's round()
  else if (method == "ceil") x = std::ceil(x);
  else if (method == "floor") x = std::floor(x);
  else value_error("round: method must be 'common', 'ceil' or 'floor'");
  return Value(x / scale);
}

Value indent(const Value& v, CallArgs& a, CallContext&) {
  const std::string& s = need_string(v, "indent");
  const Value* w = a.get(0, "width");
  std::string pad(4, ' ');
  if (w && w->is_int()) pad.assign(size_t(std::clamp<int64_t>(w->as_int(), 0, 1024)), ' ');
  else if (w && w->is_string()) pad = w->as_string();
  else if (w && !w->is_undefined()) value_error("indent: width must be an integer or a string");
  const bool first = bool_arg(a, 1, "first", false, "indent");
  const bool blank = bool_arg(a, 2, "blank", false, "indent");
  std::string out;
  size_t start = 0;
  for (size_t line = 0;; ++line) {
    const size_t nl = s.find('\n', start);
    const std::string_view part = std::string_view(s).substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if ((line > 0 || first) && (!part.empty() || blank)) out += pad;
    out += part;
    if (nl == std::string::npos) break;
    out += '\n';
    start = nl + 1;
  }
  return Value(std::move(out));
}

Value batch(const Value& v, CallArgs& a, CallContext&) {
  const Value* n = a.get(0, "linecount");
  if (!n || !n->is_int() || n->as_int() <= 0) value_error("batch needs a positive size");
  const Value* fill = a.get(1, "fill_with");
  Array out, cur;
  for (const Value& item : items_of(v, "batch")) {
    cur.push_back(item);
    if (int64_t(cur.size()) == n->as_int()) out.emplace_back(std::move(cur)), cur.clear();
  }
  if (!cur.empty()) {
    if (fill && !fill->is_none())
      while (int64_t(cur.size()) < n->as_int()) cur.push_back(*fill);
    out.emplace_back(std::move(cur));
  }
  return Value(std::move(out));
}

Value wordcount(const Value& v, CallArgs&, CallContext&) {
  const std::string& s = need_string(v, "wordcount");
  int64_t n = 0;
  bool in_word = false;
  for (size_t i = 0; i < s.size();) {
    const char32_t c = text::next_code_point(s, i);
    const bool word = c < 0x80 ? text::is_ascii_word(char(c)) : !text::is_space(c);
    if (word && !in_word) ++n;
    in_word = word;
  }
  return Value(n);
}

Value string_map(const Value& v, std::string (*f)(std::string_view)) { return Value(f(python_str(v))); }

const std::unordered_map<std::string, Filter>& filters() {
  static const std::unordered_map<std::string, Filter> kFilters = {
      {"safe", [](const Value& v, CallArgs&, CallContext&) { return v; }},
      {"tojson", tojson},
      {"string", [](const Value& v, CallArgs&, CallContext&) { return Value(python_str(v)); }},
      {"length", length},
      {"count", length},
      {"first", [](const Value& v, CallArgs&, CallContext&) { return first_or_last(v, true); }},
      {"last", [](const Value& v, CallArgs&, CallContext&) { return first_or_last(v, false); }},
      {"list", [](const Value& v, CallArgs&, CallContext&) { return Value(Array(items_of(v, "list"))); }},
      {"reverse", [](const Value& v, CallArgs&, CallContext&) -> Value {
         if (v.is_string()) {
           auto cps = text::code_points(v.as_string());
           std::reverse(cps.begin(), cps.end());
           return Value(text::from_code_points(cps, 0, cps.size()));
         }
         std::vector<Value> items = items_of(v, "reverse");
         std::reverse(items.begin(), items.end());
         return Value(Array(std::move(items)));
       }},
      {"sort", sort},
      {"unique", unique},
      {"join", join},
      {"default", default_filter},
      {"d", default_filter},
      {"int", to_int},
      {"float", to_float},
      {"abs", [](const Value& v, CallArgs&, CallContext&) -> Value {
         if (v.is_float()) return Value(std::fabs(v.as_float()));
         if (v.is_int() || v.is_bool()) return unary_op(v.as_number() < 0 ? "-" : "+", v);
         value_error("filter 'abs' needs a number, got {}", v.type_name());
       }},
      {"round", round_filter},
      {"bool", [](const Value& v, CallArgs&, CallContext&) { return Value(v.truthy()); }},
      {"upper", [](const Value& v, CallArgs&, CallContext&) { return string_map(v, text::upper); }},
      {"lower", [](const Value& v, CallArgs&, CallContext&) { return string_map(v, text::lower); }},
      {"title", [](const Value& v, CallArgs&, CallContext&) { return string_map(v, strings::title); }},
      {"capitalize", [](const Value& v, CallArgs&, CallContext&) { return string_map(v, strings::capitalize); }},
      {"trim", [](const Value& v, CallArgs& a, CallContext&) -> Value {
         const Value* chars = a.get(0, "chars");
         std::optional<std::string> set;
         if (chars && chars->is_string()) set = chars->as_string();
         return Value(strings::strip(python_str(v), set, true, true));
       }},
      {"replace", [](const Value& v, CallArgs& a, CallContext&) -> Value {
         const Value* from = a.get(0, "old");
         const Value* to = a.get(1, "new");
         if (!from || !to || !from->is_string() || !to->is_string()) value_error("replace needs two strings");
         const Value* count = a.get(2, "count");
         return Value(strings::replace(python_str(v), from->as_string(), to->as_string(),
                                       count && count->is_int() ? count->as_int() : -1));
       }},
      {"split", [](const Value& v, CallArgs& a, CallContext&) -> Value {
         const Value* sep = a.get(0, "sep");
         std::optional<std::string> s;
         if (sep && sep->is_string()) s = sep->as_string();
         const Value* max = a.get(1, "maxsplit");
         Array out;
         for (auto& part : strings::split(need_string(v, "split"), s, max && max->is_int() ? max->as_int() : -1))
           out.emplace_back(std::move(part));
         return Value(std::move(out));
       }},
      {"indent", indent},
      {"e", [](const Value& v, CallArgs&, CallContext&) { return Value(strings::html_escape(python_str(v))); }},
      {"escape", [](const Value& v, CallArgs&, CallContext&) { return Value(strings::html_escape(python_str(v))); }},
      {"items", [](const Value& v, CallArgs&, CallContext&) -> Value {
         if (v.is_undefined()) return Value(Array{});
         if (!v.has_attributes()) value_error("filter 'items' needs a dict, got {}", v.type_name());
         Array out;
         for (const auto& [k, x] : v.as_object().entries()) out.emplace_back(Array{Value(k), x});
         return Value(std::move(out));
       }},
      {"dictsort", dictsort},
      {"map", map},
      {"select", [](const Value& v, CallArgs& a, CallContext& c) { return select_items(v, a, c, true, false); }},
      {"reject", [](const Value& v, CallArgs& a, CallContext& c) { return select_items(v, a, c, false, false); }},
      {"selectattr", [](const Value& v, CallArgs& a, CallContext& c) { return select_items(v, a, c, true, true); }},
      {"rejectattr", [](const Value& v, CallArgs& a, CallContext& c) { return select_items(v, a, c, false, true); }},
      {"min", [](const Value& v, CallArgs& a, CallContext&) { return min_max(v, a, false); }},
      {"max", [](const Value& v, CallArgs& a, CallContext&) { return min_max(v, a, true); }},
      {"sum", sum},
      {"batch", batch},
      {"wordcount", wordcount},
      {"attr", [](const Value& v, CallArgs& a, CallContext&) -> Value {
         const Value* name = a.get(0, "name");
         if (!name || !name->is_string()) value_error("attr needs an attribute name");
         if (v.has_attributes())
           if (const Value* x = v.as_object().find(name->as_string())) return *x;
         return Value::undefined(name->as_string());
       }},
  };
  return kFilters;
}

}  // namespace

Value apply_filter(const std::string& name, const Value& operand, CallArgs& args, CallContext& ctx) {
  auto it = filters().find(name);
  if (it == filters().end()) value_error("unknown filter '{}'", name);
  return it->second(operand, args, ctx);
}

}  // namespace df::jinja
