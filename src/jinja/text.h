// UTF-8 text helpers for the Jinja engine: code points, the whitespace set JavaScript's \s and
// trim() use (@huggingface/jinja, our reference, strips and splits with it), and case mapping.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace df::jinja::text {

// Decodes the code point starting at s[i] and advances i. Invalid bytes decode as U+FFFD, one
// byte at a time, so any input terminates.
char32_t next_code_point(std::string_view s, size_t& i);
void append_utf8(std::string& out, char32_t cp);
std::vector<char32_t> code_points(std::string_view s);
std::string from_code_points(const std::vector<char32_t>& cps, size_t begin, size_t end);
size_t code_point_count(std::string_view s);

bool is_space(char32_t cp);  // JavaScript's \s
// Length in bytes of the whitespace that starts at s[begin] / ends at s[end].
size_t space_prefix(std::string_view s, size_t begin = 0);
size_t space_suffix(std::string_view s, size_t end);
std::string trim(std::string_view s);   // both ends, JavaScript whitespace
std::string_view trim_start(std::string_view s);
std::string_view trim_end(std::string_view s);

// Simple one-to-one case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic;
// other code points are returned unchanged.
char32_t to_upper(char32_t cp);
char32_t to_lower(char32_t cp);
std::string upper(std::string_view s);
std::string lower(std::string_view s);

bool is_ascii_word(char c);  // JavaScript's \w
bool is_ascii_digit(char c);

}  // namespace df::jinja::text
