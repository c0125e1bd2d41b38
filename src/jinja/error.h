// Errors of the Jinja engine. Everything the engine throws is a df::Error; TemplateError adds
// where in the template it happened, and whether the template itself called raise_exception
// (the server reports those as bad requests: the template rejected the conversation).
#pragma once
#include <string>

#include "util/error.h"

namespace df::jinja {

class TemplateError : public df::Error {
 public:
  TemplateError(const std::string& detail, int line, int column, bool raised_by_template)
      : df::Error(format(detail, line, column, raised_by_template)),
        detail_(detail), line_(line), column_(column), raised_(raised_by_template) {}

  const std::string& detail() const { return detail_; }  // the message without the location
  int line() const { return line_; }                     // 1-based
  int column() const { return column_; }                 // 1-based, in characters
  bool raised_by_template() const { return raised_; }

 private:
  static std::string format(const std::string& detail, int line, int column, bool raised) {
    return "chat template " + std::string(raised ? "raised an exception" : "error") + " at line " +
           std::to_string(line) + ", column " + std::to_string(column) + ": " + detail;
  }
  std::string detail_;
  int line_, column_;
  bool raised_;
};

// Thrown by the value-level code (filters, methods, operators) that does not know where in the
// template it runs; the interpreter rethrows it as a TemplateError at the node being evaluated.
class ValueError : public df::Error {
 public:
  explicit ValueError(const std::string& what, bool raised_by_template = false)
      : df::Error(what), raised_(raised_by_template) {}
  bool raised_by_template() const { return raised_; }

 private:
  bool raised_;
};

template <typename... Args>
[[noreturn]] void value_error(fmt::format_string<Args...> f, Args&&... args) {
  throw ValueError(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace df::jinja
