// One exception type for every user-facing failure (bad files, bad flags, bad requests).
// The message must say what was wrong and where (file, key, tensor), so callers just print it.
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace df {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace df
