#include "jinja/lexer.h"

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "jinja/error.h"
#include "jinja/text.h"

namespace df::jinja {
namespace {

// The template after the whitespace preprocessing, with the source offset of every byte so
// tokens still report their place in what the user wrote.
struct Mapped {
  std::string s;
  std::vector<uint32_t> origin;  // origin[i]: offset in the source of s[i]; one extra for the end

  void push(char c, uint32_t from) {
    s += c;
    origin.push_back(from);
  }
};

Mapped identity(const std::string& source) {
  Mapped m;
  m.s = source;
  m.origin.resize(source.size() + 1);
  for (size_t i = 0; i <= source.size(); ++i) m.origin[i] = uint32_t(i);
  return m;
}

Mapped finish(Mapped out, const Mapped& in) {
  out.origin.push_back(in.origin.back());
  return out;
}

bool is_line_start(const std::string& s, size_t i) {
  if (i == 0) return true;
  const char p = s[i - 1];
  if (p == '\n' || p == '\r') return true;
  // U+2028 / U+2029 also end lines for JavaScript's multiline ^.
  return i >= 3 && s[i - 3] == '\xE2' && s[i - 2] == '\x80' && (p == '\xA8' || p == '\xA9');
}

// lstrip_blocks: spaces and tabs from the start of a line up to a {% or {# tag go.
Mapped lstrip_blocks(const Mapped& in) {
  Mapped out;
  const std::string& s = in.s;
  for (size_t i = 0; i < s.size();) {
    if (is_line_start(s, i)) {
      size_t j = i;
      while (j < s.size() && (s[j] == ' ' || s[j] == '\t')) ++j;
      if (j > i && j + 1 < s.size() && s[j] == '{' && (s[j + 1] == '#' || s[j + 1] == '%' || s[j + 1] == '-')) {
        i = j;
        continue;
      }
    }
    out.push(s[i], in.origin[i]);
    ++i;
  }
  return finish(std::move(out), in);
}

// trim_blocks: the first newline after a %} or #} tag goes.
Mapped trim_blocks(const Mapped& in) {
  Mapped out;
  const std::string& s = in.s;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' && i >= 2 && s[i - 1] == '}' && (s[i - 2] == '#' || s[i - 2] == '%' || s[i - 2] == '-'))
      continue;
    out.push(s[i], in.origin[i]);
  }
  return finish(std::move(out), in);
}

// transformers' {% generation %} / {% endgeneration %} only mark the assistant's tokens: the
// tags are removed (with the whitespace around them when they carry '-').
Mapped remove_generation_tags(const Mapped& in) {
  Mapped out;
  const std::string& s = in.s;
  size_t kept_from = 0;  // output before this index belongs to an earlier removed tag
  size_t i = 0;
  while (i < s.size()) {
    if (s.compare(i, 2, "{%") == 0) {
      size_t j = i + 2;
      const bool strip_before = j < s.size() && s[j] == '-';
      if (strip_before) ++j;
      j += text::space_prefix(s, j);
      if (s.compare(j, 3, "end") == 0 && s.compare(j + 3, 10, "generation") == 0) j += 3;
      if (s.compare(j, 10, "generation") == 0) {
        j += 10;
        j += text::space_prefix(s, j);
        const bool strip_after = j < s.size() && s[j] == '-';
        if (strip_after) ++j;
        if (s.compare(j, 2, "%}") == 0) {
          j += 2;
          if (strip_before) {
            const size_t ws = std::min(text::space_suffix(out.s, out.s.size()), out.s.size() - kept_from);
            out.s.resize(out.s.size() - ws);
            out.origin.resize(out.s.size());
          }
          const size_t after = text::space_prefix(s, j);
          if (!strip_after)
            for (size_t k = j; k < j + after; ++k) out.push(s[k], in.origin[k]);
          i = j + after;
          kept_from = out.s.size();
          continue;
        }
      }
    }
    out.push(s[i], in.origin[i]);
    ++i;
  }
  return finish(std::move(out), in);
}

class Lexer {
 public:
  Lexer(const std::string& source, Mapped src) : source_(source), m_(std::move(src)), s_(m_.s) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < source_.size(); ++i)
      if (source_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    while (p_ < s_.size()) step();
    return std::move(tokens_);
  }

 private:
  const std::string& source_;
  Mapped m_;
  const std::string& s_;
  size_t p_ = 0;
  int curly_depth_ = 0;
  std::vector<Token> tokens_;
  std::vector<size_t> line_starts_;
  mutable size_t cache_off_ = 0;
  mutable int cache_line_ = 1, cache_col_ = 1;

  // Line and column of a preprocessed offset. Tokens come in source order, so positions are
  // found by walking forward from the previous one (linear overall, even on one long line).
  void where(size_t at, int& line, int& column) const {
    const size_t off = m_.origin[std::min(at, m_.origin.size() - 1)];
    if (off < cache_off_) {
      const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), off) - 1;
      cache_off_ = *it;
      cache_line_ = int(it - line_starts_.begin()) + 1;
      cache_col_ = 1;
    }
    for (; cache_off_ < off && cache_off_ < source_.size(); ++cache_off_) {
      const auto c = static_cast<unsigned char>(source_[cache_off_]);
      if (c == '\n') {
        ++cache_line_;
        cache_col_ = 1;
      } else if ((c & 0xC0) != 0x80) {
        ++cache_col_;
      }
    }
    line = cache_line_;
    column = cache_col_;
  }

  [[noreturn]] void error(size_t at, const std::string& what) const {
    int line, column;
    where(at, line, column);
    throw TemplateError("syntax error: " + what, line, column, false);
  }

  void push(Tok type, std::string value, size_t at) {
    Token t{type, std::move(value), 1, 1};
    where(at, t.line, t.column);
    tokens_.push_back(std::move(t));
  }

  bool at(std::string_view lit) const { return s_.compare(p_, lit.size(), lit) == 0; }

  void strip_trailing_whitespace() {
    if (tokens_.empty() || tokens_.back().type != Tok::Text) return;
    std::string& v = tokens_.back().value;
    v.resize(v.size() - text::space_suffix(v, v.size()));
    if (v.empty()) tokens_.pop_back();
  }

  void skip_whitespace() { p_ += text::space_prefix(s_, p_); }

  bool in_text_mode() const {
    if (tokens_.empty()) return true;
    const Tok t = tokens_.back().type;
    return t == Tok::CloseStatement || t == Tok::CloseExpression || t == Tok::Comment;
  }

  void step() {
    if (in_text_mode()) {
      const size_t start = p_;
      while (p_ < s_.size() && !(s_[p_] == '{' && p_ + 1 < s_.size() &&
                                 (s_[p_ + 1] == '%' || s_[p_ + 1] == '{' || s_[p_ + 1] == '#')))
        ++p_;
      if (p_ > start) {
        push(Tok::Text, s_.substr(start, p_ - start), start);
        return;
      }
    }
    if (at("{#")) return comment();
    if (at("{%-")) {
      strip_trailing_whitespace();
      push(Tok::OpenStatement, "{%", p_);
      p_ += 3;
      return;
    }
    if (at("{{-")) {
      strip_trailing_whitespace();
      push(Tok::OpenExpression, "{{", p_);
      curly_depth_ = 0;
      p_ += 3;
      return;
    }
    skip_whitespace();
    if (p_ >= s_.size()) return;
    if (at("-%}")) {
      push(Tok::CloseStatement, "%}", p_);
      p_ += 3;
      skip_whitespace();
      return;
    }
    if (at("-}}")) {
      push(Tok::CloseExpression, "}}", p_);
      p_ += 3;
      skip_whitespace();
      return;
    }
    const char c = s_[p_];
    if ((c == '-' || c == '+') && sign_starts_operand()) return signed_operand();
    if (operator_token()) return;
    if (c == '\'' || c == '"') return string_literal();
    if (text::is_ascii_digit(c)) return number();
    if (text::is_ascii_word(c)) {
      const size_t start = p_;
      while (p_ < s_.size() && text::is_ascii_word(s_[p_])) ++p_;
      push(Tok::Identifier, s_.substr(start, p_ - start), start);
      return;
    }
    size_t q = p_;
    std::string ch;
    text::append_utf8(ch, text::next_code_point(s_, q));
    error(p_, "unexpected character '" + ch + "'");
  }

  void comment() {
    const size_t start = p_;
    p_ += 2;
    const bool strip_before = p_ < s_.size() && s_[p_] == '-';
    if (strip_before) ++p_;
    const size_t end = s_.find("#}", p_);
    if (end == std::string::npos) error(start, "comment is not closed with #}");
    std::string body = s_.substr(p_, end - p_);
    const bool strip_after = !body.empty() && body.back() == '-';
    if (strip_after) body.pop_back();
    if (strip_before) strip_trailing_whitespace();
    push(Tok::Comment, std::move(body), start);
    p_ = end + 2;
    if (strip_after) skip_whitespace();
  }

  // A + or - is a sign (not a binary operator) unless it follows something that ends an operand.
  bool sign_starts_operand() const {
    if (tokens_.empty()) return true;
    switch (tokens_.back().type) {
      case Tok::Identifier: case Tok::Number: case Tok::String: case Tok::RParen: case Tok::RBracket:
        return false;
      default:
        return true;
    }
  }

  void signed_operand() {
    const size_t start = p_;
    const char sign = s_[p_++];
    const size_t digits = p_;
    while (p_ < s_.size() && text::is_ascii_digit(s_[p_])) ++p_;
    if (p_ == digits) {
      push(Tok::UnarySign, std::string(1, sign), start);
      return;
    }
    fraction_and_exponent();
    push(Tok::Number, s_.substr(start, p_ - start), start);
  }

  void number() {
    const size_t start = p_;
    while (p_ < s_.size() && text::is_ascii_digit(s_[p_])) ++p_;
    // After a dot (x.0.1) a number is an index: no fraction.
    if (tokens_.empty() || tokens_.back().type != Tok::Dot) fraction_and_exponent();
    push(Tok::Number, s_.substr(start, p_ - start), start);
  }

  void fraction_and_exponent() {
    if (p_ + 1 < s_.size() && s_[p_] == '.' && text::is_ascii_digit(s_[p_ + 1])) {
      ++p_;
      while (p_ < s_.size() && text::is_ascii_digit(s_[p_])) ++p_;
    }
    if (p_ < s_.size() && (s_[p_] == 'e' || s_[p_] == 'E')) {
      size_t q = p_ + 1;
      if (q < s_.size() && (s_[q] == '+' || s_[q] == '-')) ++q;
      if (q < s_.size() && text::is_ascii_digit(s_[q])) {
        p_ = q;
        while (p_ < s_.size() && text::is_ascii_digit(s_[p_])) ++p_;
      }
    }
  }

  bool operator_token() {
    struct Op {
      std::string_view text;
      Tok type;
    };
    static constexpr Op kOps[] = {
        {"{%", Tok::OpenStatement}, {"%}", Tok::CloseStatement}, {"{{", Tok::OpenExpression},
        {"}}", Tok::CloseExpression}, {"(", Tok::LParen}, {")", Tok::RParen}, {"{", Tok::LBrace},
        {"}", Tok::RBrace}, {"[", Tok::LBracket}, {"]", Tok::RBracket}, {",", Tok::Comma},
        {".", Tok::Dot}, {":", Tok::Colon}, {"|", Tok::Pipe}, {"<=", Tok::Comparison},
        {">=", Tok::Comparison}, {"==", Tok::Comparison}, {"!=", Tok::Comparison},
        {"<", Tok::Comparison}, {">", Tok::Comparison}, {"+", Tok::Additive}, {"-", Tok::Additive},
        {"~", Tok::Additive}, {"**", Tok::Power}, {"*", Tok::Multiplicative},
        {"//", Tok::Multiplicative}, {"/", Tok::Multiplicative}, {"%", Tok::Multiplicative},
        {"=", Tok::Equals},
    };
    for (const Op& op : kOps) {
      // Inside a dict literal "}}" closes two braces, not the expression.
      if (op.type == Tok::CloseExpression && curly_depth_ > 0) continue;
      if (!at(op.text)) continue;
      push(op.type, std::string(op.text), p_);
      if (op.type == Tok::OpenExpression) curly_depth_ = 0;
      else if (op.type == Tok::LBrace) ++curly_depth_;
      else if (op.type == Tok::RBrace) --curly_depth_;
      p_ += op.text.size();
      return true;
    }
    return false;
  }

  static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  char32_t hex_escape(size_t digits) {
    char32_t v = 0;
    for (size_t k = 0; k < digits; ++k) {
      const int h = p_ + k < s_.size() ? hex_value(s_[p_ + k]) : -1;
      if (h < 0) error(p_, "invalid hexadecimal escape in string literal");
      v = v * 16 + char32_t(h);
    }
    p_ += digits;
    return v;
  }

  void string_literal() {
    const size_t start = p_;
    const char quote = s_[p_++];
    std::string value;
    char32_t pending_high = 0;  // a \uD8xx waiting for its low surrogate
    auto flush_high = [&] {
      if (pending_high) text::append_utf8(value, 0xFFFD);
      pending_high = 0;
    };
    for (;;) {
      if (p_ >= s_.size()) error(start, "string literal is not closed");
      const char c = s_[p_];
      if (c == quote) break;
      if (c != '\\') {
        flush_high();
        value += c;
        ++p_;
        continue;
      }
      if (++p_ >= s_.size()) error(start, "string literal is not closed");
      const char e = s_[p_++];
      char32_t cp = 0;
      switch (e) {
        case 'n': cp = '\n'; break;
        case 't': cp = '\t'; break;
        case 'r': cp = '\r'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'v': cp = '\v'; break;
        case 'a': cp = '\a'; break;
        case '0': cp = 0; break;
        case '\'': case '"': case '\\': cp = char32_t(e); break;
        case 'x': cp = hex_escape(2); break;
        case 'u': cp = hex_escape(4); break;
        case 'U': cp = hex_escape(8); break;
        default:
          // Python keeps unknown escapes as written ("\." stays backslash-dot).
          flush_high();
          value += '\\';
          value += e;
          continue;
      }
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        flush_high();
        pending_high = cp;
        continue;
      }
      if (cp >= 0xDC00 && cp <= 0xDFFF && pending_high) {
        cp = 0x10000 + ((pending_high - 0xD800) << 10) + (cp - 0xDC00);
        pending_high = 0;
      }
      flush_high();
      text::append_utf8(value, cp);
    }
    flush_high();
    ++p_;  // closing quote
    push(Tok::String, std::move(value), start);
  }
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) {
  Mapped m = identity(source);
  if (!m.s.empty() && m.s.back() == '\n') {
    m.s.pop_back();
    m.origin.erase(m.origin.end() - 2);
  }
  m = remove_generation_tags(trim_blocks(lstrip_blocks(m)));
  return Lexer(source, std::move(m)).run();
}

}  // namespace df::jinja
