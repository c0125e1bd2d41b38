// UTF-8 helpers for the tokenizer: strict decoding (Unicode Table 3-7, with "maximal subpart"
// error lengths, as the Unicode standard and WHATWG recommend for U+FFFD substitution), and the
// lenient repair llama.cpp applies to tokenizer input.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace df::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// UTF-8 of a code point up to 0x1FFFFF. Surrogates are encoded like any other value (three
// bytes): the tokenizer must reproduce llama.cpp, which keeps them.
std::string encode(uint32_t cp);
void append(std::string& out, uint32_t cp);

struct Decoded {
  uint32_t cp = 0;         // valid only when `valid`
  uint32_t length = 1;     // bytes consumed: the sequence, or its maximal ill-formed subpart (>= 1)
  bool valid = false;
  bool incomplete = false; // ill-formed only because the input ended inside the sequence
};

// Decodes the well-formed sequence at s[pos] (pos < s.size()).
Decoded decode_strict(std::string_view s, size_t pos);

bool is_valid(std::string_view s);

// Every ill-formed subpart replaced by one U+FFFD.
std::string replace_invalid(std::string_view s);

// What llama.cpp's tokenizer turns input bytes into before pre-tokenizing
// (unicode_cpts_from_utf8 followed by re-encoding):
//   * a lead byte followed by the right number of continuation bytes is decoded without range
//     checks and re-encoded, so overlong forms become their short form ("\xC0\x80" -> "\0")
//     and surrogates (ED A0..BF xx) are kept;
//   * any other byte (stray continuation, F8..FF, a lead without enough continuations)
//     becomes U+FFFD, one per byte.
//   * a 4-byte form above U+10FFFF (F4 90.., F5..F7) makes llama.cpp abort; here its lead
//     byte is treated as invalid (U+FFFD) like the other cases.
// Valid UTF-8 is returned unchanged.
std::string repair_like_llama_cpp(std::string_view s);

}  // namespace df::utf8
