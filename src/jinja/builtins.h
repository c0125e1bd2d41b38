// The built-in library: filters (x | name), tests (x is name), methods of strings, lists and
// dicts (x.name(...)), and global functions (range, namespace, raise_exception, ...).
// Each throws ValueError on bad input; the interpreter adds the template position.
#pragma once
#include <string>

#include "jinja/value.h"

namespace df::jinja {

struct Scope;

Value apply_filter(const std::string& name, const Value& operand, CallArgs& args, CallContext& ctx);
bool apply_test(const std::string& name, const Value& operand, CallArgs& args, CallContext& ctx);
// The method or property `name` of a string, list or dict, bound to it (undefined when none).
Value get_method(const Value& object, const std::string& name);
void define_globals(Scope& globals);

// Shared helpers of the library.
std::vector<Value> iterate(const Value& v, const char* what);  // list items, dict keys, string characters
// Follows a dotted attribute path (map(attribute="a.b"), sort(attribute="x")).
Value attribute_path(const Value& item, const std::string& path);
std::string python_str(const Value& v);  // the string filter: None for none, like Jinja

}  // namespace df::jinja
