// The tojson filter, and how arrays and objects print: JSON written the way @huggingface/jinja
// writes it (Python's json.dumps layout: ", " and ": " separators, or "," and newlines with an
// indent; non-ASCII kept as is unless ensure_ascii; numbers as JavaScript writes them).
#pragma once
#include <optional>
#include <string>
#include <utility>

#include "jinja/value.h"

namespace df::jinja {

struct JsonOptions {
  int indent = 0;  // 0: one line
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::optional<std::pair<std::string, std::string>> separators;  // item, key
  bool undefined_as_null = true;  // printing a list writes "undefined" instead
};

// Throws ValueError for functions and for structures nested deeper than 256 levels (a
// namespace can be made to contain itself).
std::string to_json(const Value& v, const JsonOptions& options = {});
void append_json_string(std::string& out, std::string_view s, bool ensure_ascii);

}  // namespace df::jinja
