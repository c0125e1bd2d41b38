#include "jinja/template.h"

#include "jinja/builtins.h"
#include "jinja/interpreter.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"

namespace df::jinja {

Template::Template(std::string source) : source_(std::move(source)), program_(parse(tokenize(source_))) {}

std::string Template::render(const nlohmann::ordered_json& context) const {
  if (!context.is_object()) throw df::Error("template context must be a JSON object");
  auto globals = std::make_shared<Scope>();
  define_globals(*globals);
  try {
    for (auto it = context.begin(); it != context.end(); ++it) globals->set(it.key(), from_json(it.value()));
  } catch (const ValueError& e) {
    throw df::Error(std::string("template context: ") + e.what());
  }
  Interpreter interp;
  try {
    return interp.render(program_, globals);
  } catch (const ValueError& e) {  // not raised inside a node (should not happen), still located
    throw TemplateError(e.what(), 1, 1, e.raised_by_template());
  }
}

}  // namespace df::jinja
