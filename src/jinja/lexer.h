// Template source to tokens. Follows @huggingface/jinja's lexer, which is what transformers-style
// chat templates are written against: trim_blocks and lstrip_blocks on, one trailing newline
// dropped, {% generation %} tags removed (their body renders), '-' whitespace control.
#pragma once
#include <string>
#include <vector>

namespace df::jinja {

enum class Tok {
  Text,
  Number,      // 12, 1.5, and -1 where a sign starts an operand
  String,      // value holds the unescaped text
  Identifier,
  Equals,      // =
  LParen, RParen, LBracket, RBracket, LBrace, RBrace,
  Comma, Dot, Colon, Pipe,
  OpenStatement, CloseStatement,    // {% %}
  OpenExpression, CloseExpression,  // {{ }}
  Additive,        // + - ~
  Multiplicative,  // * / // %
  Power,           // **
  Comparison,      // == != < > <= >=
  UnarySign,       // + or - before an operand that is not a number
  Comment,
};

struct Token {
  Tok type;
  std::string value;
  int line = 1, column = 1;  // where the token starts in the original source
};

// Throws TemplateError (with line and column) on malformed input: unterminated strings or
// comments, bad escapes, characters that start no token.
std::vector<Token> tokenize(const std::string& source);

}  // namespace df::jinja
