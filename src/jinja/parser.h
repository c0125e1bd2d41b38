// Tokens to the statement tree. Operator precedence follows @huggingface/jinja (filters bind
// tighter than tests, tests tighter than arithmetic). Nesting is bounded, so hostile templates
// give a syntax error instead of exhausting the stack.
#pragma once
#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace df::jinja {

// Throws TemplateError naming the line and column of the offending token.
Body parse(const std::vector<Token>& tokens);

}  // namespace df::jinja
