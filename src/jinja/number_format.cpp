#include "jinja/number_format.h"

#include <charconv>
#include <cmath>
#include <fmt/format.h>

namespace df::jinja {

std::string js_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v < 0 ? "-Infinity" : "Infinity";
  if (v == 0) return "0";
  std::string sign = v < 0 ? "-" : "";
  // Shortest round-trip digits in scientific form: d[.ddd]e[+-]x.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, std::fabs(v), std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (sci[i] != '.') digits += sci[i];
  const int exponent = std::stoi(sci.substr(e + 1));
  const int k = int(digits.size());
  const int n = exponent + 1;  // position of the decimal point relative to the digits
  if (k <= n && n <= 21) return sign + digits + std::string(size_t(n - k), '0');
  if (0 < n && n <= 21) return sign + digits.substr(0, size_t(n)) + "." + digits.substr(size_t(n));
  if (-6 < n && n <= 0) return sign + "0." + std::string(size_t(-n), '0') + digits;
  std::string mantissa = digits.substr(0, 1);
  if (k > 1) mantissa += "." + digits.substr(1);
  return sign + mantissa + "e" + (n - 1 >= 0 ? "+" : "-") + std::to_string(std::abs(n - 1));
}

std::string float_repr(double v) {
  if (v == 0 && std::signbit(v)) return "-0.0";
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e21) return fmt::format("{:.1f}", v);
  return js_number(v);
}

}  // namespace df::jinja
