// A parsed Jinja template, rendered against a JSON context. Our own engine, built to render
// the chat templates stored in GGUF files. Reference: @huggingface/jinja 0.5.11 (what
// transformers.js renders with; tests/test_jinja_parity.cpp compares byte for byte), and
// Python Jinja where that has no answer.
//
// Supported: {{ }}, {% %}, {# #}, '-' whitespace control with trim_blocks + lstrip_blocks (as
// transformers sets them); if/elif/else; for (tuple targets, loop.*, else, inline if,
// loop.cycle, break/continue); set (names, tuples, namespace attributes, {% set %} blocks);
// macros (defaults, varargs/kwargs, caller), call and filter blocks, {% generation %};
// literals, attribute/subscript/slice access, arithmetic, comparisons, in, and/or/not,
// a if c else b, ~; the filters (filters.cpp), tests (predicates.cpp), str/dict/list methods
// (methods.cpp) and globals (globals.cpp: range, namespace, raise_exception, strftime_now, dict).
// Not supported: {% extends/block/include/import/raw/with %}, autoescaping, '%' formatting,
// format specs in str.format, `is test arg` without parentheses.
//
// Where we knowingly differ from @huggingface/jinja: strings count and index by code point
// (it counts UTF-16 units); str.strip/lstrip/rstrip honour their argument; reading an
// attribute of an undefined value is an error and iterating one gives nothing (Python Jinja);
// `==`/`in` compare like Python (1 == true; [1] == [1]); a for's else runs only when nothing
// was iterated; division or modulo by zero is an error; what it rejects (unknown filters,
// string * int, 'a' < 'b', ...) we mostly render as Python Jinja does. Limits: nesting 200
// levels, 1500 evaluation frames (about 1 MiB of stack), 5M loop iterations, 64 MiB output.
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
