#include "jinja/parser.h"

#include <charconv>
#include <cmath>
#include <initializer_list>

#include "jinja/error.h"

namespace df::jinja {
namespace {

constexpr int kMaxNesting = 200;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body run() {
    Body body;
    while (pos_ < t_.size()) {
      if (is_statement({"endif", "endfor", "endmacro", "endset", "endcall", "endfilter", "elif", "else"}))
        error(t_[pos_ + 1], "unexpected '" + t_[pos_ + 1].value + "' without a matching opening tag");
      if (auto s = statement()) body.push_back(std::move(s));
    }
    return body;
  }

 private:
  const std::vector<Token>& t_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<Stmt*> macros_;  // macros being parsed (to see whether they read varargs/kwargs)

  // Bounds the recursion of the parser (and so of the evaluator, which follows the tree).
  // Operator chains (a + b + c, x.y.z, x|f|g) deepen the tree too: each link calls deepen(),
  // which lasts until the enclosing Nest ends, so the tree height stays below kMaxNesting.
  struct Nest {
    Parser& p;
    int saved;
    explicit Nest(Parser& parser) : p(parser), saved(parser.depth_) { p.deepen(); }
    ~Nest() { p.depth_ = saved; }
  };
  void deepen() {
    if (++depth_ > kMaxNesting) error(current(), "template nested too deeply");
  }

  [[noreturn]] void error(const Token& at, const std::string& what) const {
    throw TemplateError("syntax error: " + what, at.line, at.column, false);
  }

  const Token& current() const {
    if (pos_ < t_.size()) return t_[pos_];
    static const Token kEnd{Tok::Text, "", 0, 0};
    return t_.empty() ? kEnd : t_.back();
  }

  std::string describe(const Token& t) const {
    if (pos_ >= t_.size()) return "the end of the template";
    switch (t.type) {
      case Tok::Text: return "text";
      case Tok::String: return "a string";
      case Tok::Comment: return "a comment";
      default: return "'" + t.value + "'";
    }
  }

  bool is(Tok type, size_t ahead = 0) const { return pos_ + ahead < t_.size() && t_[pos_ + ahead].type == type; }
  bool is_ident(std::string_view name, size_t ahead = 0) const {
    return is(Tok::Identifier, ahead) && t_[pos_ + ahead].value == name;
  }
  bool is_statement(std::initializer_list<std::string_view> names) const {
    if (!is(Tok::OpenStatement) || !is(Tok::Identifier, 1)) return false;
    for (auto n : names)
      if (t_[pos_ + 1].value == n) return true;
    return false;
  }

  const Token& expect(Tok type, const char* what) {
    if (!is(type)) error(current(), std::string("expected ") + what + ", found " + describe(current()));
    return t_[pos_++];
  }
  void expect_ident(std::string_view name) {
    if (!is_ident(name)) error(current(), "expected '" + std::string(name) + "', found " + describe(current()));
    ++pos_;
  }
  void expect_end_tag(std::string_view name, const Stmt& opened) {
    if (pos_ >= t_.size())
      error(current(), "missing {% " + std::string(name) + " %} for the block opened at line " +
                           std::to_string(opened.line));
    expect(Tok::OpenStatement, "{%");
    expect_ident(name);
    expect(Tok::CloseStatement, "%}");
  }

  template <typename T>
  static std::unique_ptr<T> node(typename T::Kind kind, const Token& at) {
    auto n = std::make_unique<T>();
    n->kind = kind;
    n->line = at.line;
    n->column = at.column;
    return n;
  }

  // ---- statements ----

  // Parses statements until one of `ends` opens ({% name ...); fails at the end of input.
  Body body_until(std::initializer_list<std::string_view> ends, const Stmt& opened, std::string_view closer) {
    Body body;
    while (!is_statement(ends)) {
      if (pos_ >= t_.size())
        error(current(), "missing {% " + std::string(closer) + " %} for the block opened at line " +
                             std::to_string(opened.line));
      if (auto s = statement()) body.push_back(std::move(s));
    }
    return body;
  }

  StmtPtr statement() {
    Nest nest(*this);
    const Token& tok = t_[pos_];
    switch (tok.type) {
      case Tok::Comment: ++pos_; return nullptr;
      case Tok::Text: {
        auto s = node<Stmt>(Stmt::Kind::Text, tok);
        s->text = tok.value;
        ++pos_;
        return s;
      }
      case Tok::OpenExpression: {
        ++pos_;
        auto s = node<Stmt>(Stmt::Kind::Output, tok);
        s->expr = expression();
        expect(Tok::CloseExpression, "}}");
        return s;
      }
      case Tok::OpenStatement: return block_statement();
      default: error(tok, "unexpected " + describe(tok) + " outside {{ }} or {% %}");
    }
  }

  StmtPtr block_statement() {
    ++pos_;  // {%
    if (!is(Tok::Identifier)) error(current(), "expected a statement name after {%, found " + describe(current()));
    const Token& name_tok = t_[pos_++];
    const std::string& name = name_tok.value;
    if (name == "if") return if_statement(name_tok);
    if (name == "for") return for_statement(name_tok);
    if (name == "set") return set_statement(name_tok);
    if (name == "macro") return macro_statement(name_tok);
    if (name == "call") return call_statement(name_tok);
    if (name == "filter") return filter_statement(name_tok);
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) error(name_tok, "'" + name + "' outside a for loop");
      auto s = node<Stmt>(name == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, name_tok);
      expect(Tok::CloseStatement, "%}");
      return s;
    }
    error(name_tok, "unknown statement '" + name + "'");
  }

  StmtPtr if_statement(const Token& at) {
    auto s = node<Stmt>(Stmt::Kind::If, at);
    s->expr = expression();
    expect(Tok::CloseStatement, "%}");
    s->body = body_until({"elif", "else", "endif"}, *s, "endif");
    if (is_statement({"elif"})) {
      pos_ += 2;
      Nest nest(*this);
      s->else_body.push_back(if_statement(t_[pos_ - 1]));
      return s;  // the nested if consumed the endif
    }
    if (is_statement({"else"})) {
      pos_ += 2;
      expect(Tok::CloseStatement, "%}");
      s->else_body = body_until({"endif"}, *s, "endif");
    }
    expect_end_tag("endif", *s);
    return s;
  }

  StmtPtr for_statement(const Token& at) {
    auto s = node<Stmt>(Stmt::Kind::For, at);
    s->target = assign_target(/*allow_attribute=*/false);
    expect_ident("in");
    ExprPtr iter = expression();
    if (iter->kind == Expr::Kind::Select) {  // for x in xs if cond
      s->expr = std::move(iter->a);
      s->condition = std::move(iter->b);
    } else {
      s->expr = std::move(iter);
    }
    expect(Tok::CloseStatement, "%}");
    ++loop_depth_;
    s->body = body_until({"endfor", "else"}, *s, "endfor");
    --loop_depth_;
    if (is_statement({"else"})) {
      pos_ += 2;
      expect(Tok::CloseStatement, "%}");
      s->else_body = body_until({"endfor"}, *s, "endfor");
    }
    expect_end_tag("endfor", *s);
    return s;
  }

  // Loop and set targets: a name, names separated by commas (optionally in parentheses), or
  // (for set) an attribute of a namespace.
  ExprPtr assign_target(bool allow_attribute) {
    const Token& at = current();
    if (is(Tok::LParen)) {
      ++pos_;
      ExprPtr inner = assign_target(false);
      expect(Tok::RParen, "')'");
      return inner;
    }
    auto first = target_item(allow_attribute);
    if (!is(Tok::Comma)) return first;
    auto tuple = node<Expr>(Expr::Kind::Tuple, at);
    tuple->items.push_back(std::move(first));
    while (is(Tok::Comma)) {
      ++pos_;
      tuple->items.push_back(target_item(false));
    }
    return tuple;
  }

  ExprPtr target_item(bool allow_attribute) {
    const Token& tok = current();
    if (!is(Tok::Identifier)) error(tok, "expected a variable name, found " + describe(tok));
    ++pos_;
    auto n = node<Expr>(Expr::Kind::Name, tok);
    n->name = tok.value;
    if (allow_attribute && is(Tok::Dot)) {
      ++pos_;
      const Token& attr = current();
      if (!is(Tok::Identifier)) error(attr, "expected an attribute name after '.'");
      ++pos_;
      auto a = node<Expr>(Expr::Kind::Attribute, tok);
      a->a = std::move(n);
      a->name = attr.value;
      if (is(Tok::Dot) || is(Tok::LBracket)) error(current(), "only namespace.attribute can be assigned");
      return a;
    }
    return n;
  }

  StmtPtr set_statement(const Token& at) {
    auto s = node<Stmt>(Stmt::Kind::Set, at);
    s->target = assign_target(/*allow_attribute=*/true);
    if (is(Tok::Equals)) {
      ++pos_;
      s->expr = expression_sequence();
      expect(Tok::CloseStatement, "%}");
      return s;
    }
    s->kind = Stmt::Kind::SetBlock;
    expect(Tok::CloseStatement, "%} or '='");
    s->body = body_until({"endset"}, *s, "endset");
    expect_end_tag("endset", *s);
    return s;
  }

  std::vector<Param> parameters() {
    std::vector<Param> params;
    expect(Tok::LParen, "'('");
    bool saw_default = false;
    while (!is(Tok::RParen)) {
      const Token& tok = current();
      if (!is(Tok::Identifier)) error(tok, "expected a parameter name, found " + describe(tok));
      ++pos_;
      Param p;
      p.name = tok.value;
      for (const auto& other : params)
        if (other.name == p.name) error(tok, "duplicate parameter '" + p.name + "'");
      if (is(Tok::Equals)) {
        ++pos_;
        p.default_value = expression();
        saw_default = true;
      } else if (saw_default) {
        error(tok, "parameter without a default follows one with a default");
      }
      params.push_back(std::move(p));
      if (!is(Tok::Comma)) break;
      ++pos_;
    }
    expect(Tok::RParen, "')'");
    return params;
  }

  StmtPtr macro_statement(const Token& at) {
    auto s = node<Stmt>(Stmt::Kind::Macro, at);
    const Token& name = current();
    if (!is(Tok::Identifier)) error(name, "expected the macro name");
    ++pos_;
    s->text = name.value;
    s->params = parameters();
    expect(Tok::CloseStatement, "%}");
    macros_.push_back(s.get());
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    s->body = body_until({"endmacro"}, *s, "endmacro");
    loop_depth_ = saved_loops;
    macros_.pop_back();
    expect_end_tag("endmacro", *s);
    return s;
  }

  StmtPtr call_statement(const Token& at) {
    auto s = node<Stmt>(Stmt::Kind::CallBlock, at);
    if (is(Tok::LParen)) s->params = parameters();
    s->expr = unary();
    if (s->expr->kind != Expr::Kind::Call) error(at, "expected a macro call after 'call'");
    expect(Tok::CloseStatement, "%}");
    macros_.push_back(s.get());
    s->body = body_until({"endcall"}, *s, "endcall");
    macros_.pop_back();
    expect_end_tag("endcall", *s);
    return s;
  }

  StmtPtr filter_statement(const Token& at) {
    auto s = node<Stmt>(Stmt::Kind::FilterBlock, at);
    ExprPtr chain = filter_call(nullptr);
    while (is(Tok::Pipe)) {
      deepen();
      ++pos_;
      chain = filter_call(std::move(chain));
    }
    s->expr = std::move(chain);
    expect(Tok::CloseStatement, "%}");
    s->body = body_until({"endfilter"}, *s, "endfilter");
    expect_end_tag("endfilter", *s);
    return s;
  }

  // ---- expressions ----

  ExprPtr expression() {
    Nest nest(*this);
    ExprPtr value = or_expr();
    if (!is_ident("if")) return value;
    const Token& at = t_[pos_++];
    ExprPtr cond = or_expr();
    if (is_ident("else")) {
      ++pos_;
      auto n = node<Expr>(Expr::Kind::Conditional, at);
      n->a = std::move(value);
      n->b = std::move(cond);
      n->c = expression();
      return n;
    }
    auto n = node<Expr>(Expr::Kind::Select, at);
    n->a = std::move(value);
    n->b = std::move(cond);
    return n;
  }

  // a, b, c without brackets is a tuple (set x = 1, 2).
  ExprPtr expression_sequence() {
    const Token& at = current();
    ExprPtr first = expression();
    if (!is(Tok::Comma)) return first;
    auto tuple = node<Expr>(Expr::Kind::Tuple, at);
    tuple->items.push_back(std::move(first));
    while (is(Tok::Comma)) {
      ++pos_;
      if (is(Tok::RParen) || is(Tok::CloseStatement)) break;  // trailing comma
      tuple->items.push_back(expression());
    }
    return tuple;
  }

  ExprPtr binary(Expr::Kind kind, const Token& at, std::string op, ExprPtr l, ExprPtr r) {
    auto n = node<Expr>(kind, at);
    n->name = std::move(op);
    n->a = std::move(l);
    n->b = std::move(r);
    return n;
  }

  ExprPtr or_expr() {
    ExprPtr left = and_expr();
    while (is_ident("or")) {
      deepen();
      const Token& at = t_[pos_++];
      left = binary(Expr::Kind::Or, at, "or", std::move(left), and_expr());
    }
    return left;
  }

  ExprPtr and_expr() {
    ExprPtr left = not_expr();
    while (is_ident("and")) {
      deepen();
      const Token& at = t_[pos_++];
      left = binary(Expr::Kind::And, at, "and", std::move(left), not_expr());
    }
    return left;
  }

  ExprPtr not_expr() {
    if (!is_ident("not")) return comparison();
    Nest nest(*this);
    const Token& at = t_[pos_++];
    auto n = node<Expr>(Expr::Kind::Not, at);
    n->a = not_expr();
    return n;
  }

  ExprPtr comparison() {
    ExprPtr left = additive();
    for (;;) {
      const Token& at = current();
      std::string op;
      if (is_ident("not") && is_ident("in", 1)) {
        op = "not in";
        pos_ += 2;
      } else if (is_ident("in")) {
        op = "in";
        ++pos_;
      } else if (is(Tok::Comparison)) {
        op = t_[pos_++].value;
      } else {
        return left;
      }
      deepen();
      left = binary(Expr::Kind::Binary, at, op, std::move(left), additive());
    }
  }

  ExprPtr additive() {
    ExprPtr left = multiplicative();
    while (is(Tok::Additive)) {
      deepen();
      const Token& at = t_[pos_++];
      left = binary(Expr::Kind::Binary, at, at.value, std::move(left), multiplicative());
    }
    return left;
  }

  ExprPtr multiplicative() {
    ExprPtr left = power();
    while (is(Tok::Multiplicative)) {
      deepen();
      const Token& at = t_[pos_++];
      left = binary(Expr::Kind::Binary, at, at.value, std::move(left), power());
    }
    return left;
  }

  ExprPtr power() {
    ExprPtr left = test();
    while (is(Tok::Power)) {  // left-associative, as in Jinja
      deepen();
      const Token& at = t_[pos_++];
      left = binary(Expr::Kind::Binary, at, "**", std::move(left), test());
    }
    return left;
  }

  ExprPtr test() {
    ExprPtr operand = filtered();
    while (is_ident("is")) {
      deepen();
      const Token& at = t_[pos_++];
      auto n = node<Expr>(Expr::Kind::Test, at);
      if (is_ident("not")) {
        n->negate = true;
        ++pos_;
      }
      if (!is(Tok::Identifier)) error(current(), "expected a test name after 'is', found " + describe(current()));
      n->name = t_[pos_++].value;
      if (is(Tok::LParen)) {
        n->has_args = true;
        n->args = arguments();
      }
      n->a = std::move(operand);
      operand = std::move(n);
    }
    return operand;
  }

  ExprPtr filtered() {
    ExprPtr operand = unary();
    while (is(Tok::Pipe)) {
      deepen();
      ++pos_;
      operand = filter_call(std::move(operand));
    }
    return operand;
  }

  ExprPtr filter_call(ExprPtr operand) {
    const Token& tok = current();
    if (!is(Tok::Identifier)) error(tok, "expected a filter name, found " + describe(tok));
    ++pos_;
    auto n = node<Expr>(Expr::Kind::Filter, tok);
    n->name = tok.value;
    if (is(Tok::LParen)) {
      n->has_args = true;
      n->args = arguments();
    }
    n->a = std::move(operand);
    return n;
  }

  ExprPtr unary() {
    if ((is(Tok::UnarySign) || is(Tok::Additive)) && (current().value == "-" || current().value == "+")) {
      Nest nest(*this);
      const Token& at = t_[pos_++];
      auto n = node<Expr>(Expr::Kind::Unary, at);
      n->name = at.value;
      n->a = unary();
      return n;
    }
    return postfix(primary());
  }

  ExprPtr postfix(ExprPtr object) {
    for (;;) {
      const Token& at = current();
      if (is(Tok::Dot) || is(Tok::LBracket) || is(Tok::LParen)) deepen();
      if (is(Tok::Dot)) {
        ++pos_;
        const Token& prop = current();
        if (is(Tok::Identifier)) {
          auto n = node<Expr>(Expr::Kind::Attribute, at);
          n->a = std::move(object);
          n->name = prop.value;
          object = std::move(n);
        } else if (is(Tok::Number) && prop.value.find_first_not_of("0123456789") == std::string::npos) {
          auto n = node<Expr>(Expr::Kind::Index, at);
          n->a = std::move(object);
          n->b = number_literal(prop);
          object = std::move(n);
        } else {
          error(prop, "expected an attribute name after '.', found " + describe(prop));
        }
        ++pos_;
      } else if (is(Tok::LBracket)) {
        ++pos_;
        object = subscript(std::move(object), at);
      } else if (is(Tok::LParen)) {
        auto n = node<Expr>(Expr::Kind::Call, at);
        n->a = std::move(object);
        n->args = arguments();
        object = std::move(n);
      } else {
        return object;
      }
    }
  }

  ExprPtr subscript(ExprPtr object, const Token& at) {
    std::vector<ExprPtr> parts;
    bool is_slice = false;
    while (!is(Tok::RBracket)) {
      if (pos_ >= t_.size()) error(current(), "expected ']'");
      if (is(Tok::Colon)) {
        parts.push_back(nullptr);
        ++pos_;
        is_slice = true;
      } else {
        parts.push_back(expression());
        if (is(Tok::Colon)) {
          ++pos_;
          is_slice = true;
        } else if (!is(Tok::RBracket)) {
          error(current(), "expected ']' or ':', found " + describe(current()));
        }
      }
    }
    ++pos_;  // ]
    if (parts.empty()) error(at, "empty subscript []");
    if (!is_slice) {
      auto n = node<Expr>(Expr::Kind::Index, at);
      n->a = std::move(object);
      n->b = std::move(parts[0]);
      return n;
    }
    if (parts.size() > 3) error(at, "a slice takes at most start:stop:step");
    auto n = node<Expr>(Expr::Kind::Slice, at);
    n->a = std::move(object);
    parts.resize(3);
    n->b = std::move(parts[0]);
    n->c = std::move(parts[1]);
    n->d = std::move(parts[2]);
    return n;
  }

  std::vector<Arg> arguments() {
    expect(Tok::LParen, "'('");
    std::vector<Arg> args;
    bool saw_keyword = false;
    while (!is(Tok::RParen)) {
      if (pos_ >= t_.size()) error(current(), "expected ')'");
      const Token& at = current();
      Arg arg;
      if (is(Tok::Power)) {
        ++pos_;
        arg.kind = Arg::Kind::KeywordSpread;
        arg.value = expression();
        saw_keyword = true;
      } else if (is(Tok::Multiplicative) && current().value == "*") {
        ++pos_;
        arg.kind = Arg::Kind::Spread;
        arg.value = expression();
      } else if (is(Tok::Identifier) && is(Tok::Equals, 1)) {
        arg.kind = Arg::Kind::Keyword;
        arg.name = current().value;
        pos_ += 2;
        arg.value = expression();
        saw_keyword = true;
      } else {
        if (saw_keyword) error(at, "positional argument after a keyword argument");
        arg.value = expression();
      }
      args.push_back(std::move(arg));
      if (!is(Tok::Comma)) break;
      ++pos_;
    }
    expect(Tok::RParen, "')'");
    return args;
  }

  ExprPtr number_literal(const Token& tok) {
    auto n = node<Expr>(Expr::Kind::Literal, tok);
    const std::string& v = tok.value;
    if (v.find_first_of(".eE") == std::string::npos) {
      int64_t i = 0;
      auto [p, ec] = std::from_chars(v.data() + (v[0] == '+' ? 1 : 0), v.data() + v.size(), i);
      if (ec == std::errc() && p == v.data() + v.size()) {
        n->literal = Value(i);
        return n;
      }
    }
    n->literal = Value(std::strtod(v.c_str(), nullptr));
    return n;
  }

  ExprPtr primary() {
    const Token& tok = current();
    if (pos_ >= t_.size()) error(tok, "unexpected end of the template in an expression");
    switch (tok.type) {
      case Tok::Number: ++pos_; return number_literal(tok);
      case Tok::String: {
        auto n = node<Expr>(Expr::Kind::Literal, tok);
        std::string s = t_[pos_++].value;
        while (is(Tok::String)) s += t_[pos_++].value;  // "a" "b" is "ab"
        n->literal = Value(std::move(s));
        return n;
      }
      case Tok::Identifier: {
        ++pos_;
        auto n = node<Expr>(Expr::Kind::Literal, tok);
        const std::string& v = tok.value;
        if (v == "true" || v == "True") n->literal = Value(true);
        else if (v == "false" || v == "False") n->literal = Value(false);
        else if (v == "none" || v == "None") n->literal = Value::none();
        else {
          n->kind = Expr::Kind::Name;
          n->name = v;
          if (!macros_.empty() && (v == "varargs" || v == "kwargs"))
            (v == "varargs" ? macros_.back()->uses_varargs : macros_.back()->uses_kwargs) = true;
        }
        return n;
      }
      case Tok::LParen: {
        ++pos_;
        Nest nest(*this);
        if (is(Tok::RParen)) {
          ++pos_;
          return node<Expr>(Expr::Kind::Tuple, tok);
        }
        ExprPtr e = expression_sequence();
        expect(Tok::RParen, "')'");
        return e;
      }
      case Tok::LBracket: {
        ++pos_;
        Nest nest(*this);
        auto n = node<Expr>(Expr::Kind::List, tok);
        while (!is(Tok::RBracket)) {
          if (pos_ >= t_.size()) error(current(), "expected ']'");
          n->items.push_back(expression());
          if (!is(Tok::Comma)) break;
          ++pos_;
        }
        expect(Tok::RBracket, "']'");
        return n;
      }
      case Tok::LBrace: {
        ++pos_;
        Nest nest(*this);
        auto n = node<Expr>(Expr::Kind::Dict, tok);
        while (!is(Tok::RBrace)) {
          if (pos_ >= t_.size()) error(current(), "expected '}'");
          n->items.push_back(expression());
          expect(Tok::Colon, "':' between a key and its value");
          n->items.push_back(expression());
          if (!is(Tok::Comma)) break;
          ++pos_;
        }
        expect(Tok::RBrace, "'}'");
        return n;
      }
      default: error(tok, "unexpected " + describe(tok) + " in an expression");
    }
  }
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).run(); }

}  // namespace df::jinja
