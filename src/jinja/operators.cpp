// Arithmetic, comparison, membership and concatenation. Where @huggingface/jinja defines a
// result we give the same one (string + number concatenates, % keeps the dividend's sign,
// ~ writes 1.0 as "1"); where it fails, we follow Python Jinja (string * int, 'a' < 'b').
#include <cmath>
#include <limits>

#include "jinja/error.h"
#include "jinja/interpreter.h"
#include "jinja/number_format.h"

namespace df::jinja {
namespace {

bool numeric(const Value& v) { return v.is_int() || v.is_float() || v.is_bool(); }
bool integral(const Value& v) { return v.is_int() || v.is_bool(); }
int64_t as_i64(const Value& v) { return v.is_bool() ? (v.as_bool() ? 1 : 0) : v.as_int(); }

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) {
    const Value& u = a.is_undefined() ? a : b;
    if (!u.undefined_name().empty())
      value_error("'{}' is undefined (used with operator {})", u.undefined_name(), op);
    value_error("undefined value used with operator {}", op);
  }
  value_error("operator {} is not supported between {} and {}", op, a.type_name(), b.type_name());
}

std::string concat_text(const Value& v) {
  if (v.is_undefined()) return "";
  if (v.is_none()) return "None";
  return to_concat(v);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::Undefined: return false;
    case Value::Kind::Array:
      for (const Value& x : container.as_array())
        if (values_equal(x, item)) return true;
      return false;
    case Value::Kind::String:
      if (!item.is_string()) value_error("'in <string>' needs a string on the left, got {}", item.type_name());
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::Object:
    case Value::Kind::Namespace:
      return item.is_string() && container.as_object().find(item.as_string()) != nullptr;
    default: value_error("a value of type {} does not support 'in'", container.type_name());
  }
}

Value repeat(const Value& seq, int64_t times) {
  if (times <= 0) return seq.is_string() ? Value(std::string()) : Value(Array{});
  const size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_array().size() * sizeof(Value);
  if (unit > 0 && uint64_t(times) > (uint64_t(64) << 20) / unit) value_error("repetition result too large");
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  Array out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.as_array().begin(), seq.as_array().end());
  return Value(std::move(out));
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  const bool both_int = integral(a) && integral(b);
  if (op == "/") {
    if (b.as_number() == 0) value_error("division by zero");
    return Value(a.as_number() / b.as_number());
  }
  if (both_int) {
    const int64_t x = as_i64(a), y = as_i64(b);
    int64_t r = 0;
    if (op == "+") {
      if (__builtin_add_overflow(x, y, &r)) value_error("integer overflow in +");
    } else if (op == "-") {
      if (__builtin_sub_overflow(x, y, &r)) value_error("integer overflow in -");
    } else if (op == "*") {
      if (__builtin_mul_overflow(x, y, &r)) value_error("integer overflow in *");
    } else if (op == "//") {
      if (y == 0) value_error("division by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) value_error("integer overflow in //");
      r = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) --r;  // floor, as Python
    } else if (op == "%") {
      if (y == 0) value_error("modulo by zero");
      r = (y == -1) ? 0 : x % y;  // the sign of the dividend, as JavaScript
    } else if (op == "**") {
      if (y < 0) {
        if (x == 0) value_error("0 cannot be raised to a negative power");
        return Value(std::pow(double(x), double(y)));
      }
      r = 1;
      for (int64_t base = x, e = y; e > 0; e >>= 1) {
        if ((e & 1) && __builtin_mul_overflow(r, base, &r)) value_error("integer overflow in **");
        if (e > 1 && __builtin_mul_overflow(base, base, &base)) value_error("integer overflow in **");
      }
    }
    return Value(r);
  }
  const double x = a.as_number(), y = b.as_number();
  double r = 0;
  if (op == "+") r = x + y;
  else if (op == "-") r = x - y;
  else if (op == "*") r = x * y;
  else if (op == "//") {
    if (y == 0) value_error("division by zero");
    r = std::floor(x / y);
  } else if (op == "%") {
    if (y == 0) value_error("modulo by zero");
    r = std::fmod(x, y);
  } else if (op == "**") {
    if (x == 0 && y < 0) value_error("0.0 cannot be raised to a negative power");
    r = std::pow(x, y);
    if (!std::isfinite(r)) value_error("exponentiation result is not a finite real number");
  }
  return Value(r);
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return Value(values_equal(a, b));
  if (op == "!=") return Value(!values_equal(a, b));
  if (op == "in") return Value(contains(b, a));
  if (op == "not in") return Value(!contains(b, a));
  if (op == "~") return Value(concat_text(a) + concat_text(b));

  if (op == "<" || op == ">" || op == "<=" || op == ">=") {
    int c = 0;
    if (numeric(a) && numeric(b)) {
      const double x = a.as_number(), y = b.as_number();
      if (std::isnan(x) || std::isnan(y)) return Value(false);
      c = x < y ? -1 : x > y ? 1 : 0;
    } else if (a.is_string() && b.is_string()) {
      c = a.as_string().compare(b.as_string());
    } else {
      unsupported(op, a, b);
    }
    if (op == "<") return Value(c < 0);
    if (op == ">") return Value(c > 0);
    if (op == "<=") return Value(c <= 0);
    return Value(c >= 0);
  }

  if (a.is_undefined() || b.is_undefined()) unsupported(op, a, b);
  if (numeric(a) && numeric(b)) return arithmetic(op, a, b);
  if (op == "+") {
    if (a.is_array() && b.is_array()) {
      Array out = a.as_array();
      out.insert(out.end(), b.as_array().begin(), b.as_array().end());
      return Value(std::move(out));
    }
    if ((a.is_string() && !b.is_none()) || (b.is_string() && !a.is_none()))
      return Value(to_concat(a) + to_concat(b));
  }
  if (op == "*") {
    if ((a.is_string() || a.is_array()) && integral(b)) return repeat(a, as_i64(b));
    if ((b.is_string() || b.is_array()) && integral(a)) return repeat(b, as_i64(a));
  }
  unsupported(op, a, b);
}

Value unary_op(const std::string& op, const Value& a) {
  if (a.is_int() || a.is_bool()) {
    const int64_t v = as_i64(a);
    if (op == "-") {
      if (v == std::numeric_limits<int64_t>::min()) value_error("integer overflow in unary -");
      return Value(-v);
    }
    return Value(v);
  }
  if (a.is_float()) return Value(op == "-" ? -a.as_float() : a.as_float());
  if (a.is_undefined() && !a.undefined_name().empty())
    value_error("'{}' is undefined (used with unary {})", a.undefined_name(), op);
  value_error("unary {} is not supported for a value of type {}", op, a.type_name());
}

}  // namespace df::jinja
