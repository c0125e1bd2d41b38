#include "tokenizer/utf8.h"

namespace df::utf8 {

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | ((cp >> 18) & 0x07)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode(uint32_t cp) {
  std::string s;
  append(s, cp);
  return s;
}

Decoded decode_strict(std::string_view s, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t b0 = byte(pos);
  Decoded d;
  if (b0 < 0x80) {
    d.cp = b0;
    d.valid = true;
    return d;
  }
  // Table 3-7: the allowed range of the second byte depends on the lead; later bytes are 80..BF.
  uint32_t need;
  uint8_t lo = 0x80, hi = 0xBF;
  uint32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return d;  // 80..C1, F5..FF never start a sequence
  }
  for (uint32_t k = 1; k <= need; ++k) {
    if (pos + k >= s.size()) {
      d.length = k;
      d.incomplete = true;
      return d;
    }
    const uint8_t b = byte(pos + k);
    if (b < lo || b > hi) {
      d.length = k;
      return d;
    }
    cp = (cp << 6) | (b & 0x3F);
    lo = 0x80, hi = 0xBF;
  }
  d.cp = cp;
  d.length = need + 1;
  d.valid = true;
  return d;
}

bool is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const Decoded d = decode_strict(s, i);
    if (!d.valid) return false;
    i += d.length;
  }
  return true;
}

std::string replace_invalid(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const Decoded d = decode_strict(s, i);
    if (d.valid) {
      out.append(s.substr(i, d.length));
    } else {
      out.append(kReplacement);
    }
    i += d.length;
  }
  return out;
}

std::string repair_like_llama_cpp(std::string_view s) {
  if (is_valid(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t b0 = static_cast<uint8_t>(s[i]);
    uint32_t need = 0, cp = 0;
    if (b0 < 0x80) {
      out.push_back(static_cast<char>(b0));
      ++i;
      continue;
    }
    if ((b0 & 0xE0) == 0xC0) {
      need = 1, cp = b0 & 0x1F;
    } else if ((b0 & 0xF0) == 0xE0) {
      need = 2, cp = b0 & 0x0F;
    } else if ((b0 & 0xF8) == 0xF0) {
      need = 3, cp = b0 & 0x07;
    }
    bool ok = need > 0 && i + need < s.size();  // all continuation bytes present
    if (ok) {
      for (uint32_t k = 1; k <= need; ++k) {
        const uint8_t b = static_cast<uint8_t>(s[i + k]);
        if ((b & 0xC0) != 0x80) {
          ok = false;
          break;
        }
        cp = (cp << 6) | (b & 0x3F);
      }
    }
    if (ok && cp > 0x10FFFF) ok = false;
    if (ok) {
      append(out, cp);
      i += need + 1;
    } else {
      out.append(kReplacement);
      ++i;
    }
  }
  return out;
}

}  // namespace df::utf8
