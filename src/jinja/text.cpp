#include "jinja/text.h"

namespace df::jinja::text {

char32_t next_code_point(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int len = 0;
  char32_t cp = 0;
  if ((b0 & 0xE0) == 0xC0) len = 2, cp = b0 & 0x1F;
  else if ((b0 & 0xF0) == 0xE0) len = 3, cp = b0 & 0x0F;
  else if ((b0 & 0xF8) == 0xF0) len = 4, cp = b0 & 0x07;
  if (len == 0 || i + len > s.size()) {
    ++i;
    return 0xFFFD;
  }
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are invalid too.
  static constexpr char32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++i;
    return 0xFFFD;
  }
  i += len;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

std::vector<char32_t> code_points(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(next_code_point(s, i));
  return out;
}

std::string from_code_points(const std::vector<char32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t k = begin; k < end; ++k) append_utf8(out, cps[k]);
  return out;
}

size_t code_point_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    next_code_point(s, i);
    ++n;
  }
  return n;
}

bool is_space(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000: case 0xFEFF:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

size_t space_prefix(std::string_view s, size_t begin) {
  size_t i = begin;
  while (i < s.size()) {
    size_t j = i;
    if (!is_space(next_code_point(s, j))) break;
    i = j;
  }
  return i - begin;
}

size_t space_suffix(std::string_view s, size_t end) {
  size_t i = end;
  while (i > 0) {
    size_t start = i - 1;  // back up to the first byte of the previous code point
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && i - start < 4) --start;
    size_t j = start;
    const char32_t cp = next_code_point(s, j);
    if (j != i || !is_space(cp)) break;
    i = start;
  }
  return end - i;
}

std::string_view trim_start(std::string_view s) { return s.substr(space_prefix(s)); }
std::string_view trim_end(std::string_view s) { return s.substr(0, s.size() - space_suffix(s, s.size())); }
std::string trim(std::string_view s) { return std::string(trim_end(trim_start(s))); }

char32_t to_upper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F) {
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 0) ? c - 1 : c;
    if (c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17F) return c == 0x131 ? 'I' : c;
    return (c % 2 == 1) ? c - 1 : c;
  }
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x3AC && c <= 0x3CE) {
    switch (c) {
      case 0x3AC: return 0x386;
      case 0x3AD: return 0x388;
      case 0x3AE: return 0x389;
      case 0x3AF: return 0x38A;
      case 0x3CC: return 0x38C;
      case 0x3CD: return 0x38E;
      case 0x3CE: return 0x38F;
      default: return c;
    }
  }
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

char32_t to_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F) {
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 1) ? c + 1 : c;
    if (c == 0x130) return 'i';
    if (c == 0x138 || c == 0x149 || c == 0x17F) return c;
    return (c % 2 == 0) ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  switch (c) {
    case 0x386: return 0x3AC;
    case 0x388: return 0x3AD;
    case 0x389: return 0x3AE;
    case 0x38A: return 0x3AF;
    case 0x38C: return 0x3CC;
    case 0x38E: return 0x3CD;
    case 0x38F: return 0x3CE;
    default: break;
  }
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

static std::string map_case(std::string_view s, char32_t (*f)(char32_t)) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_utf8(out, f(next_code_point(s, i)));
  return out;
}

std::string upper(std::string_view s) { return map_case(s, to_upper); }
std::string lower(std::string_view s) { return map_case(s, to_lower); }

bool is_ascii_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
bool is_ascii_digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace df::jinja::text
