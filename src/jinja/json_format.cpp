#include "jinja/json_format.h"

#include <algorithm>
#include <cmath>

#include "jinja/error.h"
#include "jinja/number_format.h"
#include "jinja/text.h"

namespace df::jinja {
namespace {

constexpr int kMaxDepth = 256;

void append_u_escape(std::string& out, unsigned unit) {
  static const char* hex = "0123456789abcdef";
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += hex[(unit >> shift) & 0xF];
}

struct Writer {
  const JsonOptions& opt;
  std::string item_sep, key_sep;
  std::string out;

  void write(const Value& v, int depth) {
    if (depth > kMaxDepth) value_error("tojson: value nested more than {} levels deep", kMaxDepth);
    switch (v.kind()) {
      case Value::Kind::Undefined: out += opt.undefined_as_null ? "null" : "undefined"; return;
      case Value::Kind::None: out += "null"; return;
      case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
      case Value::Kind::Int: out += std::to_string(v.as_int()); return;
      case Value::Kind::Float:
        // JSON.stringify writes non-finite numbers as null.
        out += std::isfinite(v.as_float()) ? js_number(v.as_float()) : "null";
        return;
      case Value::Kind::String: append_json_string(out, v.as_string(), opt.ensure_ascii); return;
      case Value::Kind::Array: write_array(v.as_array(), depth); return;
      case Value::Kind::Object:
      case Value::Kind::Namespace: write_object(v.as_object(), depth); return;
      case Value::Kind::Function: value_error("cannot convert a function to JSON");
    }
  }

  void newline(int depth) {
    out += '\n';
    out.append(size_t(opt.indent) * size_t(depth), ' ');
  }

  void write_array(const Array& a, int depth) {
    if (a.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < a.size(); ++i) {
      if (i > 0) out += item_sep;
      if (opt.indent > 0) newline(depth + 1);
      write(a[i], depth + 1);
    }
    if (opt.indent > 0) newline(depth);
    out += ']';
  }

  void write_object(const Object& o, int depth) {
    if (o.empty()) {
      out += "{}";
      return;
    }
    std::vector<const std::pair<std::string, Value>*> entries;
    for (const auto& e : o.entries()) entries.push_back(&e);
    if (opt.sort_keys)
      std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return a->first < b->first; });
    out += '{';
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) out += item_sep;
      if (opt.indent > 0) newline(depth + 1);
      append_json_string(out, entries[i]->first, opt.ensure_ascii);
      out += key_sep;
      write(entries[i]->second, depth + 1);
    }
    if (opt.indent > 0) newline(depth);
    out += '}';
  }
};

}  // namespace

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
          if (c < 0x20 || (ensure_ascii && c == 0x7F)) append_u_escape(out, c);
          else out += char(c);
      }
      continue;
    }
    const size_t start = i;
    const char32_t cp = text::next_code_point(s, i);
    if (!ensure_ascii) {
      if (cp == 0xFFFD && !(i - start == 3)) text::append_utf8(out, cp);  // invalid bytes
      else out.append(s.substr(start, i - start));
    } else if (cp >= 0x10000) {  // JavaScript escapes UTF-16 units: a surrogate pair
      const char32_t v = cp - 0x10000;
      append_u_escape(out, 0xD800 + (v >> 10));
      append_u_escape(out, 0xDC00 + (v & 0x3FF));
    } else {
      append_u_escape(out, cp);
    }
  }
  out += '"';
}

std::string to_json(const Value& v, const JsonOptions& options) {
  Writer w{options, ", ", ": ", {}};
  if (options.separators) {
    w.item_sep = options.separators->first;
    w.key_sep = options.separators->second;
  } else if (options.indent > 0) {
    w.item_sep = ",";
  }
  w.write(v, 0);
  return std::move(w.out);
}

}  // namespace df::jinja
