#include "jinja/value.h"

#include <cmath>

#include "jinja/error.h"
#include "jinja/json_format.h"
#include "jinja/number_format.h"
#include "jinja/text.h"

namespace df::jinja {

// ---- Object ----

const Value* Object::find(std::string_view key) const {
  if (!index_.empty()) {
    auto it = index_.find(std::string(key));
    return it == index_.end() ? nullptr : &entries_[it->second].second;
  }
  for (const auto& [k, v] : entries_)
    if (k == key) return &v;
  return nullptr;
}

Value* Object::find(std::string_view key) {
  return const_cast<Value*>(static_cast<const Object*>(this)->find(key));
}

void Object::set(const std::string& key, Value v) {
  if (Value* existing = find(key)) {
    *existing = std::move(v);
    return;
  }
  add_new(key, std::move(v));
}

void Object::add_new(std::string key, Value v) {
  entries_.emplace_back(std::move(key), std::move(v));
  // Small maps (message objects) are searched linearly; larger ones get an index.
  constexpr size_t kIndexFrom = 16;
  if (entries_.size() == kIndexFrom) {
    for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].first, i);
  } else if (entries_.size() > kIndexFrom) {
    index_.emplace(entries_.back().first, entries_.size() - 1);
  }
}

// ---- CallArgs ----

const Value* CallArgs::kwarg(std::string_view name) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  return nullptr;
}

const Value* CallArgs::get(size_t pos, std::string_view name) const {
  if (pos < positional.size()) return &positional[pos];
  return kwarg(name);
}

// ---- Value ----

Value Value::undefined(std::string what) {
  Value v;
  if (!what.empty()) v.p_ = std::make_shared<std::string>(std::move(what));
  return v;
}

const std::string& Value::undefined_name() const {
  static const std::string kNone;
  return p_ ? *static_cast<const std::string*>(p_.get()) : kNone;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}

Value Value::namespace_of(Object o) {
  Value v(std::move(o));
  v.kind_ = Kind::Namespace;
  return v;
}

Value Value::function(std::string name, NativeFn fn) {
  Value v;
  v.kind_ = Kind::Function;
  v.p_ = std::make_shared<Function>(Function{std::move(name), std::move(fn)});
  return v;
}

const void* Value::identity() const {
  if (kind_ == Kind::Array || kind_ == Kind::Object || kind_ == Kind::Namespace || kind_ == Kind::Function)
    return p_.get();
  return nullptr;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return b_;
    case Kind::Int: return i_ != 0;
    case Kind::Float: return f_ != 0 && !std::isnan(f_);
    case Kind::String: return !as_string().empty();
    case Kind::Array: return !as_array().empty();
    case Kind::Object: return !as_object().empty();
    case Kind::Namespace:
    case Kind::Function: return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined: return "undefined";
    case Kind::None: return "none";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "string";
    case Kind::Array: return "list";
    case Kind::Object: return "dict";
    case Kind::Namespace: return "namespace";
    case Kind::Function: return "function";
  }
  return "?";
}

// ---- conversion from JSON ----

template <typename Json>
static Value convert(const Json& j, int depth_left) {
  if (depth_left <= 0) value_error("the context is nested too deeply");
  switch (j.type()) {
    case Json::value_t::null: return Value::none();
    case Json::value_t::boolean: return Value(j.template get<bool>());
    case Json::value_t::number_integer: return Value(j.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      return u <= uint64_t(INT64_MAX) ? Value(int64_t(u)) : Value(double(u));
    }
    case Json::value_t::number_float: return Value(j.template get<double>());
    case Json::value_t::string: return Value(j.template get_ref<const std::string&>());
    case Json::value_t::array: {
      Array a;
      a.reserve(j.size());
      for (const auto& e : j) a.push_back(convert(e, depth_left - 1));
      return Value(std::move(a));
    }
    case Json::value_t::object: {
      Object o;
      for (auto it = j.begin(); it != j.end(); ++it) o.set(it.key(), convert(it.value(), depth_left - 1));
      return Value(std::move(o));
    }
    default: return Value::none();  // binary and discarded values do not occur in parsed JSON
  }
}

Value from_json(const nlohmann::ordered_json& j, int max_depth) { return convert(j, max_depth); }
Value from_json(const nlohmann::json& j, int max_depth) { return convert(j, max_depth); }

// ---- text forms ----

std::string to_output(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return "";
    case Value::Kind::Bool: return v.as_bool() ? "true" : "false";
    case Value::Kind::Int: return std::to_string(v.as_int());
    case Value::Kind::Float: return float_repr(v.as_float());
    case Value::Kind::String: return v.as_string();
    case Value::Kind::Array:
    case Value::Kind::Object:
    case Value::Kind::Namespace: {
      JsonOptions opt;
      opt.undefined_as_null = false;
      return to_json(v, opt);
    }
    case Value::Kind::Function: return "<function " + v.as_function().name + ">";
  }
  return "";
}

std::string to_concat(const Value& v) {
  if (v.is_float()) return js_number(v.as_float());
  if (v.is_array()) {
    // JavaScript's Array.prototype.toString: the items' own text joined by commas (list
    // content concatenated into a prompt reads "{...},{...}" in @huggingface/jinja).
    std::string out;
    bool first = true;
    for (const Value& item : v.as_array()) {
      if (!first) out += ',';
      first = false;
      if (item.is_none()) out += "null";
      else if (item.is_undefined()) out += "undefined";
      else out += to_output(item);
    }
    return out;
  }
  return to_output(v);
}

// ---- equality and ordering ----

bool values_equal(const Value& a, const Value& b, int depth) {
  if (depth > 256) value_error("comparison nested more than 256 levels deep");
  using K = Value::Kind;
  const bool a_num = a.is_number() || a.is_bool(), b_num = b.is_number() || b.is_bool();
  if (a_num && b_num) return a.as_number() == b.as_number();
  const bool a_nothing = a.is_none() || a.is_undefined(), b_nothing = b.is_none() || b.is_undefined();
  if (a_nothing || b_nothing) return a_nothing && b_nothing;
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::String: return a.as_string() == b.as_string();
    case K::Array: {
      const Array &x = a.as_array(), &y = b.as_array();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!values_equal(x[i], y[i], depth + 1)) return false;
      return true;
    }
    case K::Object: {
      const Object &x = a.as_object(), &y = b.as_object();
      if (x.size() != y.size()) return false;
      for (const auto& [k, xv] : x.entries()) {
        const Value* yv = y.find(k);
        if (!yv || !values_equal(xv, *yv, depth + 1)) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

int compare_values(const Value& a, const Value& b, bool case_sensitive) {
  const bool a_num = a.is_number() || a.is_bool(), b_num = b.is_number() || b.is_bool();
  if (a_num && b_num) {
    const double x = a.as_number(), y = b.as_number();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if ((a.is_none() && b.is_none()) || (a.is_undefined() && b.is_undefined())) return 0;
  if (a.is_string() && b.is_string()) {
    if (case_sensitive) return a.as_string().compare(b.as_string());
    return text::lower(a.as_string()).compare(text::lower(b.as_string()));
  }
  value_error("cannot compare {} with {}", a.type_name(), b.type_name());
}

}  // namespace df::jinja
