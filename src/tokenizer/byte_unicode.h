// GPT-2 byte-level mapping: every byte 0..255 has a printable Unicode stand-in, so that BPE
// token strings (tokenizer.ggml.tokens, HF vocab keys) never contain raw control or space bytes.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace df::byte_unicode {

// Code point that stands for `byte`: bytes 33-126, 161-172 and 174-255 stand for themselves,
// the other 68 bytes take U+0100, U+0101, ... in byte order.
uint32_t codepoint_of_byte(uint8_t byte);

// UTF-8 of codepoint_of_byte(byte).
const std::string& utf8_of_byte(uint8_t byte);

// Inverse of codepoint_of_byte; nullopt for code points that stand for no byte.
std::optional<uint8_t> byte_of_codepoint(uint32_t cp);

// The GPT-2 form of raw bytes ("hi there" -> "hiĠthere").
std::string encode(std::string_view bytes);

// Raw bytes of a GPT-2-form string. Characters that stand for no byte (or invalid UTF-8) are
// kept as their own UTF-8 bytes, so a malformed vocabulary entry decodes to something visible
// instead of failing; returns false in `ok` when that happened.
std::string decode(std::string_view token_text, bool* ok = nullptr);

}  // namespace df::byte_unicode
