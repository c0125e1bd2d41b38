#include "tokenizer/byte_unicode.h"

#include <array>

#include "tokenizer/utf8.h"

namespace df::byte_unicode {
namespace {

bool stands_for_itself(unsigned b) {
  return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

struct Tables {
  std::array<uint32_t, 256> cp_of_byte{};
  std::array<std::string, 256> utf8_of_byte;
  std::array<int16_t, 512> byte_of_cp{};  // every stand-in code point is below U+0144

  Tables() {
    byte_of_cp.fill(-1);
    uint32_t next_shifted = 256;
    for (unsigned b = 0; b < 256; ++b) {
      const uint32_t cp = stands_for_itself(b) ? b : next_shifted++;
      cp_of_byte[b] = cp;
      utf8_of_byte[b] = utf8::encode(cp);
      byte_of_cp[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

uint32_t codepoint_of_byte(uint8_t byte) { return tables().cp_of_byte[byte]; }

const std::string& utf8_of_byte(uint8_t byte) { return tables().utf8_of_byte[byte]; }

std::optional<uint8_t> byte_of_codepoint(uint32_t cp) {
  if (cp >= tables().byte_of_cp.size()) return std::nullopt;
  const int16_t b = tables().byte_of_cp[cp];
  if (b < 0) return std::nullopt;
  return static_cast<uint8_t>(b);
}

std::string encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) out += utf8_of_byte(c);
  return out;
}

std::string decode(std::string_view token_text, bool* ok) {
  std::string out;
  out.reserve(token_text.size());
  bool all_mapped = true;
  size_t i = 0;
  while (i < token_text.size()) {
    const utf8::Decoded d = utf8::decode_strict(token_text, i);
    std::optional<uint8_t> b;
    if (d.valid) b = byte_of_codepoint(d.cp);
    if (b) {
      out.push_back(static_cast<char>(*b));
    } else {
      out.append(token_text.substr(i, d.length));
      all_mapped = false;
    }
    i += d.length;
  }
  if (ok) *ok = all_mapped;
  return out;
}

}  // namespace df::byte_unicode
