// A parsed Jinja template, rendered against a JSON context. Our own engine, built to render
// the chat templates stored in GGUF files; @huggingface/jinja 0.5.11 is the reference it is
// tested against (tests/test_jinja_parity.cpp), and where that has no answer, Python Jinja.
//
// Supported: {{ }}, {% %}, {# #}, '-' whitespace control with trim_blocks + lstrip_blocks (as
// transformers sets them); if/elif/else, for (tuple targets, loop.*, else, inline if,
// loop.cycle, break/continue), set (names, tuples, namespace attributes, {% set %} blocks),
// macros (defaults, varargs/kwargs, caller), call and filter blocks, {% generation %};
// literals, attribute/subscript/slice access, arithmetic, comparisons, in, and/or/not,
// a if c else b, ~; the filters, tests, methods and globals listed in builtins.h's sources.
// Not supported: template inheritance and includes ({% extends/block/include/import %}),
// {% raw %}, {% with %}, autoescaping, % string formatting, format specs in str.format.
// Undefined values print as '', iterate as nothing and fail on attribute access, as in Jinja.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "jinja/ast.h"
#include "jinja/error.h"

namespace df::jinja {

class Template {
 public:
  // Throws TemplateError (with line and column) on a syntax error.
  explicit Template(std::string source);

  // `context` must be an object; its entries become the template's variables. Throws
  // TemplateError on a render error, with the line and column of the failing expression.
  std::string render(const nlohmann::ordered_json& context) const;

 private:
  std::string source_;
  Body program_;
};

}  // namespace df::jinja
