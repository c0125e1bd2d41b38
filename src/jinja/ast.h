// The parsed template: statements holding expressions. Every node keeps the line and column
// it starts at, so render errors can point into the template.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "jinja/value.h"

namespace df::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Arg {
  enum class Kind { Positional, Keyword, Spread, KeywordSpread };  // f(x), f(k=x), f(*x), f(**x)
  Kind kind = Kind::Positional;
  std::string name;  // for Keyword
  ExprPtr value;
};

struct Expr {
  enum class Kind {
    Literal,      // literal
    Name,         // name
    List,         // items
    Tuple,        // items
    Dict,         // items: key, value, key, value, ...
    Attribute,    // a.name
    Index,        // a[b]
    Slice,        // a[b:c:d], each of b, c, d may be null
    Call,         // a(args)
    Filter,       // a | name(args); a is null in a {% filter %} block
    Test,         // a is [not] name(args)
    Unary,        // name ("-", "+") applied to a
    Binary,       // a name b: arithmetic, comparison, in / not in
    And, Or, Not, // a and b, a or b, not a
    Conditional,  // a if b else c
    Select,       // a if b (undefined when b is false; a loop filter in for)
  };
  Kind kind;
  int line = 0, column = 0;
  Value literal;
  std::string name;
  ExprPtr a, b, c, d;
  std::vector<ExprPtr> items;
  std::vector<Arg> args;
  bool negate = false;    // Test: "is not"
  bool has_args = false;  // Filter / Test written with parentheses
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Param {
  std::string name;
  ExprPtr default_value;  // null when the parameter has none
};

struct Stmt {
  enum class Kind {
    Text,         // text
    Output,       // {{ expr }}
    If,           // expr, body, else_body (elif is an If inside else_body)
    For,          // target in expr [if condition], body, else_body
    Set,          // target = expr
    SetBlock,     // {% set target %}body{% endset %}
    Macro,        // text: name, params, body
    CallBlock,    // {% call(params) expr %}body{% endcall %}
    FilterBlock,  // {% filter expr %}body{% endfilter %}: expr is a Filter chain on nothing
    Break,
    Continue,
  };
  Kind kind;
  int line = 0, column = 0;
  std::string text;
  ExprPtr expr, target, condition;
  Body body, else_body;
  std::vector<Param> params;
  bool uses_varargs = false, uses_kwargs = false;  // macros: extra arguments are collected
};

}  // namespace df::jinja
