#include "jinja/string_ops.h"

#include <algorithm>

#include "jinja/error.h"
#include "jinja/text.h"

namespace df::jinja::strings {

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  if (!chars) {
    std::string_view r = s;
    if (left) r = text::trim_start(r);
    if (right) r = text::trim_end(r);
    return std::string(r);
  }
  const auto set = text::code_points(*chars);
  const auto cps = text::code_points(s);
  auto in_set = [&](char32_t c) { return std::find(set.begin(), set.end(), c) != set.end(); };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && in_set(cps[b])) ++b;
  if (right)
    while (e > b && in_set(cps[e - 1])) --e;
  return text::from_code_points(cps, b, e);
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) value_error("split: empty separator");
    size_t start = 0;
    for (;;) {
      if (maxsplit >= 0 && int64_t(out.size()) >= maxsplit) break;
      const size_t at = s.find(*sep, start);
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(start, at - start));
      start = at + sep->size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  size_t i = text::space_prefix(s, 0);
  while (i < s.size()) {
    if (maxsplit >= 0 && int64_t(out.size()) >= maxsplit) {
      out.emplace_back(s.substr(i));  // the rest, trailing whitespace included
      return out;
    }
    size_t j = i;
    while (j < s.size() && text::space_prefix(s, j) == 0) {
      text::next_code_point(s, j);
    }
    out.emplace_back(s.substr(i, j - i));
    i = j + text::space_prefix(s, j);
  }
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  if (maxsplit < 0) return split(s, sep, -1);
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) value_error("rsplit: empty separator");
    size_t end = s.size();
    while (int64_t(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t at = s.rfind(*sep, end - sep->size());
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    size_t end = s.size() - text::space_suffix(s, s.size());
    while (end > 0) {
      if (int64_t(out.size()) >= maxsplit) {
        out.emplace_back(s.substr(0, end));
        break;
      }
      size_t b = end;
      while (b > 0 && text::space_suffix(s, b) == 0) {
        --b;
        while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
      }
      out.emplace_back(s.substr(b, end - b));
      end = b - text::space_suffix(s, b);
    }
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
  std::string out;
  if (count == 0) return std::string(s);
  int64_t left = count < 0 ? INT64_MAX : count;
  if (from.empty()) {
    size_t i = 0;
    while (i <= s.size()) {
      if (left > 0) {
        out += to;
        --left;
      }
      if (i == s.size()) break;
      const size_t start = i;
      text::next_code_point(s, i);
      out += s.substr(start, i - start);
    }
    return out;
  }
  size_t start = 0;
  while (left > 0) {
    const size_t at = s.find(from, start);
    if (at == std::string_view::npos) break;
    out += s.substr(start, at - start);
    out += to;
    start = at + from.size();
    --left;
  }
  out += s.substr(start);
  return out;
}

std::string title(std::string_view s) {
  std::string out(s);
  for (size_t i = 0; i < out.size(); ++i) {
    const bool word = text::is_ascii_word(out[i]);
    const bool boundary = i == 0 || !text::is_ascii_word(out[i - 1]);
    if (word && boundary && out[i] >= 'a' && out[i] <= 'z') out[i] = char(out[i] - 32);
  }
  return out;
}

std::string capitalize(std::string_view s) {
  if (s.empty()) return {};
  size_t i = 0;
  const char32_t first = text::next_code_point(s, i);
  std::string out;
  text::append_utf8(out, text::to_upper(first));
  out += s.substr(i);
  return out;
}

int64_t find(std::string_view s, std::string_view sub) {
  const size_t at = s.find(sub);
  if (at == std::string_view::npos) return -1;
  return int64_t(text::code_point_count(s.substr(0, at)));
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return int64_t(text::code_point_count(s)) + 1;
  int64_t n = 0;
  for (size_t at = s.find(sub); at != std::string_view::npos; at = s.find(sub, at + sub.size())) ++n;
  return n;
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace df::jinja::strings
