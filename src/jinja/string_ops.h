// Python str operations on UTF-8 strings, shared by string methods and filters.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace df::jinja::strings {

// chars: the set of characters to strip; nullopt strips whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// sep nullopt splits on whitespace runs; maxsplit < 0 is unlimited.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
// count < 0 replaces all; an empty `from` inserts between characters, as Python does.
std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count);
// @huggingface/jinja's title and capitalize: upper-case the first letter of each ASCII word /
// of the string, leaving the rest as it is.
std::string title(std::string_view s);
std::string capitalize(std::string_view s);
int64_t find(std::string_view s, std::string_view sub);  // index in characters, -1 if absent
int64_t count(std::string_view s, std::string_view sub);
std::string html_escape(std::string_view s);

}  // namespace df::jinja::strings
