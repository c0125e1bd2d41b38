// The runtime value of the Jinja engine: undefined, none, booleans, 64-bit integers, floats,
// UTF-8 strings, and arrays / objects / namespaces / functions shared by reference (a namespace
// changed in a loop is seen after it, as in Jinja).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace df::jinja {

class Value;
using Array = std::vector<Value>;

// String-keyed map that keeps insertion order (Jinja dicts iterate in insertion order).
class Object {
 public:
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(const std::string& key, Value v);
  // For keys known to be new (building a fresh object): skips the lookup.
  void add_new(std::string key, Value v);
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
  std::unordered_map<std::string, size_t> index_;  // built once the map is not tiny
};

// Arguments of a call: positional values, then keyword arguments in the order written.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  const Value* kwarg(std::string_view name) const;
  // The argument at `pos` or named `name`, or nullptr when not given.
  const Value* get(size_t pos, std::string_view name) const;
};

class Interpreter;
struct Scope;
// What a native function sees of the interpreter that calls it (macros render with it).
struct CallContext {
  Interpreter& interp;
  std::shared_ptr<Scope> scope;  // the scope of the call site
};
using NativeFn = std::function<Value(CallArgs&, CallContext&)>;
struct Function {
  std::string name;
  NativeFn fn;
};

class Value {
 public:
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, Array, Object, Namespace, Function };

  Value() : i_(0) {}  // undefined
  Value(bool b) : kind_(Kind::Bool), b_(b) {}
  Value(int i) : kind_(Kind::Int), i_(i) {}
  Value(int64_t i) : kind_(Kind::Int), i_(i) {}
  Value(double f) : kind_(Kind::Float), f_(f) {}
  Value(std::string s) : kind_(Kind::String), i_(0), p_(std::make_shared<std::string>(std::move(s))) {}
  Value(std::string_view s) : Value(std::string(s)) {}
  Value(const char* s) : Value(std::string(s)) {}
  Value(Array a) : kind_(Kind::Array), i_(0), p_(std::make_shared<Array>(std::move(a))) {}
  Value(Object o) : kind_(Kind::Object), i_(0), p_(std::make_shared<Object>(std::move(o))) {}

  // An undefined value remembers what was looked up, for error messages.
  static Value undefined(std::string what = {});
  static Value none();
  static Value namespace_of(Object o);
  static Value function(std::string name, NativeFn fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_array() const { return kind_ == Kind::Array; }
  bool is_object() const { return kind_ == Kind::Object; }
  bool is_namespace() const { return kind_ == Kind::Namespace; }
  bool is_function() const { return kind_ == Kind::Function; }
  // Objects and namespaces both hold string-keyed attributes.
  bool has_attributes() const { return kind_ == Kind::Object || kind_ == Kind::Namespace; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_float() const { return f_; }
  double as_number() const { return kind_ == Kind::Float ? f_ : kind_ == Kind::Int ? double(i_) : b_ ? 1.0 : 0.0; }
  // Strings are immutable and shared: copying a value never copies its text.
  const std::string& as_string() const { return *static_cast<const std::string*>(p_.get()); }
  Array& as_array() const { return *static_cast<Array*>(p_.get()); }
  Object& as_object() const { return *static_cast<Object*>(p_.get()); }  // objects and namespaces
  const Function& as_function() const { return *static_cast<const Function*>(p_.get()); }
  const std::string& undefined_name() const;
  const void* identity() const;  // the shared container, for identity checks

  bool truthy() const;
  std::string type_name() const;  // Python-style names for error messages

 private:
  Kind kind_ = Kind::Undefined;
  union {
    bool b_;
    int64_t i_;
    double f_;
  };
  // The string, Array, Object or Function; for undefined, the name that was looked up.
  std::shared_ptr<void> p_;
};

// Converts the render context (messages, tools, ...); throws ValueError past `max_depth` levels.
Value from_json(const nlohmann::ordered_json& j, int max_depth = 256);
Value from_json(const nlohmann::json& j, int max_depth = 256);

// How `{{ v }}` prints: none and undefined as nothing, booleans as true/false, floats as 1.0,
// arrays and objects as JSON with ", " and ": " separators (as @huggingface/jinja prints them).
std::string to_output(const Value& v);
// How a value joins a string with `~`, `+` and the join filter: like to_output, but floats are
// written as JavaScript writes numbers (1.0 -> "1") and lists as their items joined by commas,
// matching @huggingface/jinja. (Dicts stay JSON, where JavaScript would write [object Map].)
std::string to_concat(const Value& v);

// Python-style equality (numbers by value, containers element-wise); none equals undefined, as
// in @huggingface/jinja.
bool values_equal(const Value& a, const Value& b, int depth = 0);
// Ordering for sort/min/max/dictsort: numbers (and booleans) with numbers, strings with strings
// (case-insensitive unless asked); anything else is a ValueError. Returns <0, 0, >0.
int compare_values(const Value& a, const Value& b, bool case_sensitive);

}  // namespace df::jinja
