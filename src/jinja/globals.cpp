// Functions every template can call: range, namespace, raise_exception, strftime_now, dict.
#include <ctime>

#include "jinja/builtins.h"
#include "jinja/error.h"
#include "jinja/interpreter.h"

namespace df::jinja {
namespace {

constexpr int64_t kMaxRange = 1'000'000;

Value range(CallArgs& a, CallContext&) {
  if (!a.keyword.empty()) value_error("range() takes no keyword arguments");
  if (a.positional.empty() || a.positional.size() > 3) value_error("range() takes 1 to 3 integers");
  for (const Value& v : a.positional)
    if (!v.is_int()) value_error("range() arguments must be integers, got {}", v.type_name());
  int64_t start = 0, stop = 0, step = 1;
  if (a.positional.size() == 1) {
    stop = a.positional[0].as_int();
  } else {
    start = a.positional[0].as_int();
    stop = a.positional[1].as_int();
    if (a.positional.size() == 3) step = a.positional[2].as_int();
  }
  if (step == 0) value_error("range() step must not be zero");
  const long double count = (static_cast<long double>(stop) - start) / step;
  if (count > kMaxRange) value_error("range() longer than {} items", kMaxRange);
  Array out;
  if (count > 0) out.reserve(size_t(count) + 1);
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (int64_t(out.size()) >= kMaxRange) value_error("range() longer than {} items", kMaxRange);
    out.emplace_back(i);
    if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
  }
  return Value(std::move(out));
}

// namespace(dict or [[key, value], ...], key=value, ...): a mutable attribute bag.
Value make_namespace(CallArgs& a, CallContext& ctx) {
  if (a.positional.size() > 1) value_error("namespace() takes at most 1 positional argument");
  Object attrs;
  if (!a.positional.empty()) {
    const Value& src = a.positional[0];
    if (src.is_object()) {
      for (const auto& [k, v] : src.as_object().entries()) attrs.set(k, v);
    } else if (src.is_array()) {
      for (const Value& pair : src.as_array()) {
        if (!pair.is_array() || pair.as_array().size() != 2 || !pair.as_array()[0].is_string())
          value_error("namespace() expects a dict or a list of [name, value] pairs");
        attrs.set(pair.as_array()[0].as_string(), pair.as_array()[1]);
      }
    } else {
      value_error("namespace() expects a dict, got {}", src.type_name());
    }
  }
  for (const auto& [k, v] : a.keyword) attrs.set(k, v);
  Value ns = Value::namespace_of(std::move(attrs));
  ctx.interp.track(ns);
  return ns;
}

Value raise_exception(CallArgs& a, CallContext&) {
  const std::string msg = a.positional.empty() ? std::string("raise_exception() called") : python_str(a.positional[0]);
  throw ValueError(msg, /*raised_by_template=*/true);
}

// Local time, as transformers and @huggingface/jinja use.
Value strftime_now(CallArgs& a, CallContext&) {
  if (a.positional.empty() || !a.positional[0].is_string()) value_error("strftime_now() needs a format string");
  const std::string& fmt = a.positional[0].as_string();
  if (fmt.size() > 256) value_error("strftime_now(): format longer than 256 characters");
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[1024];
  const size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
  if (n == 0 && !fmt.empty()) return Value(std::string());
  return Value(std::string(buf, n));
}

Value dict(CallArgs& a, CallContext&) {
  Object o;
  if (!a.positional.empty()) {
    if (!a.positional[0].is_object()) value_error("dict() expects a dict or keyword arguments");
    o = a.positional[0].as_object();
  }
  for (const auto& [k, v] : a.keyword) o.set(k, v);
  return Value(std::move(o));
}

}  // namespace

void define_globals(Scope& globals) {
  globals.set("range", Value::function("range", range));
  globals.set("namespace", Value::function("namespace", make_namespace));
  globals.set("raise_exception", Value::function("raise_exception", raise_exception));
  globals.set("strftime_now", Value::function("strftime_now", strftime_now));
  globals.set("dict", Value::function("dict", dict));
}

}  // namespace df::jinja
