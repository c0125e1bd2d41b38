// Jinja tests: `x is name` and `x is name(args)`. Type tests answer as @huggingface/jinja
// does (a dict is a sequence but not iterable, booleans are not numbers).
#include <cmath>
#include <unordered_map>

#include "jinja/builtins.h"
#include "jinja/error.h"
#include "jinja/text.h"

namespace df::jinja {
namespace {

using Test = bool (*)(const Value& v, CallArgs& args);

const Value& required(const CallArgs& args, const char* test) {
  if (args.positional.empty()) value_error("test '{}' needs an argument", test);
  return args.positional[0];
}

int64_t integer_operand(const Value& v, const char* test) {
  if (!v.is_int()) value_error("test '{}' needs an integer, got {}", test, v.type_name());
  return v.as_int();
}

int compare_for_test(const Value& a, const Value& b, const char* test) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool()))
    return a.as_number() < b.as_number() ? -1 : a.as_number() > b.as_number() ? 1 : 0;
  if (a.is_string() && b.is_string()) return a.as_string().compare(b.as_string());
  value_error("test '{}' cannot compare {} with {}", test, a.type_name(), b.type_name());
}

const std::unordered_map<std::string, Test>& tests() {
  static const std::unordered_map<std::string, Test> kTests = {
      {"defined", [](const Value& v, CallArgs&) { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, CallArgs&) { return v.is_undefined(); }},
      {"none", [](const Value& v, CallArgs&) { return v.is_none(); }},
      {"boolean", [](const Value& v, CallArgs&) { return v.is_bool(); }},
      {"true", [](const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }},
      {"false", [](const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }},
      {"string", [](const Value& v, CallArgs&) { return v.is_string(); }},
      {"number", [](const Value& v, CallArgs&) { return v.is_number(); }},
      {"integer", [](const Value& v, CallArgs&) { return v.is_int(); }},
      {"float", [](const Value& v, CallArgs&) { return v.is_float(); }},
      {"mapping", [](const Value& v, CallArgs&) { return v.is_object(); }},
      {"iterable", [](const Value& v, CallArgs&) { return v.is_array() || v.is_string(); }},
      {"sequence", [](const Value& v, CallArgs&) { return v.is_array() || v.is_object() || v.is_string(); }},
      {"callable", [](const Value& v, CallArgs&) { return v.is_function(); }},
      {"odd", [](const Value& v, CallArgs&) { return integer_operand(v, "odd") % 2 != 0; }},
      {"even", [](const Value& v, CallArgs&) { return integer_operand(v, "even") % 2 == 0; }},
      {"divisibleby", [](const Value& v, CallArgs& a) {
         const Value& d = required(a, "divisibleby");
         if (!d.is_int() || d.as_int() == 0) value_error("divisibleby needs a non-zero integer");
         if (v.is_float()) return std::fmod(v.as_float(), double(d.as_int())) == 0;
         return integer_operand(v, "divisibleby") % d.as_int() == 0;
       }},
      {"lower", [](const Value& v, CallArgs&) { return v.is_string() && text::lower(v.as_string()) == v.as_string(); }},
      {"upper", [](const Value& v, CallArgs&) { return v.is_string() && text::upper(v.as_string()) == v.as_string(); }},
      {"eq", [](const Value& v, CallArgs& a) { return values_equal(v, required(a, "eq")); }},
      {"equalto", [](const Value& v, CallArgs& a) { return values_equal(v, required(a, "equalto")); }},
      {"==", [](const Value& v, CallArgs& a) { return values_equal(v, required(a, "==")); }},
      {"ne", [](const Value& v, CallArgs& a) { return !values_equal(v, required(a, "ne")); }},
      {"!=", [](const Value& v, CallArgs& a) { return !values_equal(v, required(a, "!=")); }},
      {"lt", [](const Value& v, CallArgs& a) { return compare_for_test(v, required(a, "lt"), "lt") < 0; }},
      {"<", [](const Value& v, CallArgs& a) { return compare_for_test(v, required(a, "<"), "<") < 0; }},
      {"lessthan", [](const Value& v, CallArgs& a) { return compare_for_test(v, required(a, "lessthan"), "lessthan") < 0; }},
      {"le", [](const Value& v, CallArgs& a) { return compare_for_test(v, required(a, "le"), "le") <= 0; }},
      {"<=", [](const Value& v, CallArgs& a) { return compare_for_test(v, required(a, "<="), "<=") <= 0; }},
      {"gt", [](const Value& v, CallArgs& a) { return compare_for_test(v, required(a, "gt"), "gt") > 0; }},
      {">", [](const Value& v, CallArgs& a) { return compare_for_test(v, required(a, ">"), ">") > 0; }},
      {"greaterthan", [](const Value& v, CallArgs& a) { return compare_for_test(v, required(a, "greaterthan"), "greaterthan") > 0; }},
      {"ge", [](const Value& v, CallArgs& a) { return compare_for_test(v, required(a, "ge"), "ge") >= 0; }},
      {">=", [](const Value& v, CallArgs& a) { return compare_for_test(v, required(a, ">="), ">=") >= 0; }},
      {"in", [](const Value& v, CallArgs& a) {
         const Value& seq = required(a, "in");
         if (seq.is_string()) return v.is_string() && seq.as_string().find(v.as_string()) != std::string::npos;
         if (seq.has_attributes()) return v.is_string() && seq.as_object().find(v.as_string()) != nullptr;
         for (const Value& x : iterate(seq, "test 'in'"))
           if (values_equal(x, v)) return true;
         return false;
       }},
      {"sameas", [](const Value& v, CallArgs& a) {
         const Value& o = required(a, "sameas");
         if (v.identity() || o.identity()) return v.identity() == o.identity();
         return v.kind() == o.kind() && values_equal(v, o);
       }},
  };
  return kTests;
}

}  // namespace

bool apply_test(const std::string& name, const Value& operand, CallArgs& args, CallContext&) {
  auto it = tests().find(name);
  if (it == tests().end()) value_error("unknown test '{}'", name);
  return it->second(operand, args);
}

}  // namespace df::jinja
