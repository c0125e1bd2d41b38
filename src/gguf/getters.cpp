// Typed metadata getters. Integers of any width convert to the requested width when the value
// fits; everything else that does not match the request is an error naming the file and key.
#include <cmath>
#include <limits>

#include "gguf/format.h"
#include "gguf/gguf.h"
#include "util/error.h"

namespace df::gguf {
namespace {

using detail::printable;

[[noreturn]] void wrong_type(const std::string& file, std::string_view key, const Value& v,
                             const char* wanted) {
  fail("{}: key '{}': has type {}, expected {}", file, printable(key), detail::describe(v),
       wanted);
}

// Scalar integer (not bool) as a sign + magnitude pair that any target range can be checked
// against.
struct IntValue {
  bool negative;
  uint64_t magnitude;
};

IntValue scalar_int(const std::string& file, std::string_view key, const Value& v,
                    const char* wanted) {
  if (v.is_array() || !detail::is_integer_type(v.type)) wrong_type(file, key, v, wanted);
  const bool is_signed = v.type == ValueType::I8 || v.type == ValueType::I16 ||
                         v.type == ValueType::I32 || v.type == ValueType::I64;
  if (!is_signed) return {false, v.u};
  if (v.i >= 0) return {false, uint64_t(v.i)};
  return {true, uint64_t(0) - uint64_t(v.i)};
}

const Value& require(const File& f, std::string_view key) {
  const Value* v = f.find(key);
  if (!v) fail("{}: key '{}': missing key", f.path(), printable(key));
  return *v;
}

std::string int_text(IntValue x) {
  return x.negative ? fmt::format("-{}", x.magnitude) : fmt::format("{}", x.magnitude);
}

}  // namespace

uint32_t File::get_u32(std::string_view key) const {
  const Value& v = require(*this, key);
  const IntValue x = scalar_int(path_, key, v, "an integer");
  if (x.negative || x.magnitude > std::numeric_limits<uint32_t>::max()) {
    fail("{}: key '{}': value {} does not fit in u32", path_, printable(key), int_text(x));
  }
  return uint32_t(x.magnitude);
}

uint32_t File::get_u32_or(std::string_view key, uint32_t fallback) const {
  return has(key) ? get_u32(key) : fallback;
}

int64_t File::get_i64(std::string_view key) const {
  const Value& v = require(*this, key);
  const IntValue x = scalar_int(path_, key, v, "an integer");
  constexpr uint64_t kMax = uint64_t(std::numeric_limits<int64_t>::max());
  if (!x.negative && x.magnitude > kMax) {
    fail("{}: key '{}': value {} does not fit in i64", path_, printable(key), int_text(x));
  }
  // The most negative magnitude (2^63) is exactly representable; casting through uint64 is exact.
  return x.negative ? int64_t(uint64_t(0) - x.magnitude) : int64_t(x.magnitude);
}

float File::get_f32(std::string_view key) const {
  const Value& v = require(*this, key);
  if (v.is_array() || !detail::is_float_type(v.type)) wrong_type(path_, key, v, "f32 or f64");
  if (std::isfinite(v.f) && std::fabs(v.f) > double(std::numeric_limits<float>::max())) {
    fail("{}: key '{}': value {} does not fit in f32", path_, printable(key), v.f);
  }
  return float(v.f);
}

float File::get_f32_or(std::string_view key, float fallback) const {
  return has(key) ? get_f32(key) : fallback;
}

bool File::get_bool_or(std::string_view key, bool fallback) const {
  const Value* v = find(key);
  if (!v) return fallback;
  if (v->type != ValueType::BOOL) wrong_type(path_, key, *v, "bool");
  return v->u != 0;
}

const std::string& File::get_string(std::string_view key) const {
  const Value& v = require(*this, key);
  if (v.type != ValueType::STRING) wrong_type(path_, key, v, "string");
  return v.s;
}

std::string File::get_string_or(std::string_view key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

const std::vector<std::string>& File::get_string_array(std::string_view key) const {
  const Value& v = require(*this, key);
  if (!v.is_array() || v.elem_type != ValueType::STRING) {
    wrong_type(path_, key, v, "array[string]");
  }
  return v.strings;
}

const std::vector<int64_t>& File::get_int_array(std::string_view key) const {
  const Value& v = require(*this, key);
  if (!v.is_array() ||
      !(detail::is_integer_type(v.elem_type) || v.elem_type == ValueType::BOOL)) {
    wrong_type(path_, key, v, "an integer array");
  }
  return v.ints;
}

const std::vector<double>& File::get_float_array(std::string_view key) const {
  const Value& v = require(*this, key);
  if (!v.is_array() || !detail::is_float_type(v.elem_type)) {
    wrong_type(path_, key, v, "a float array");
  }
  return v.floats;
}

}  // namespace df::gguf
