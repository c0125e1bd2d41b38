// Value and TensorInfo helpers, and the names used in messages.
#include <fmt/format.h>

#include "gguf/format.h"
#include "gguf/gguf.h"

namespace df::gguf {

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8: return "u8";
    case ValueType::I8: return "i8";
    case ValueType::U16: return "u16";
    case ValueType::I16: return "i16";
    case ValueType::U32: return "u32";
    case ValueType::I32: return "i32";
    case ValueType::F32: return "f32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::U64: return "u64";
    case ValueType::I64: return "i64";
    case ValueType::F64: return "f64";
  }
  return "unknown";
}

bool Value::is_integer() const { return detail::is_integer_type(type) || type == ValueType::BOOL; }
bool Value::is_float() const { return detail::is_float_type(type); }

size_t Value::array_size() const {
  if (!is_array()) return 0;
  if (elem_type == ValueType::STRING) return strings.size();
  if (detail::is_float_type(elem_type)) return floats.size();
  return ints.size();
}

Value Value::of_u32(uint32_t v) {
  Value r;
  r.type = ValueType::U32;
  r.u = v;
  return r;
}

Value Value::of_i32(int32_t v) {
  Value r;
  r.type = ValueType::I32;
  r.i = v;
  return r;
}

Value Value::of_u64(uint64_t v) {
  Value r;
  r.type = ValueType::U64;
  r.u = v;
  return r;
}

Value Value::of_f32(float v) {
  Value r;
  r.type = ValueType::F32;
  r.f = v;
  return r;
}

Value Value::of_bool(bool v) {
  Value r;
  r.type = ValueType::BOOL;
  r.u = v ? 1 : 0;
  return r;
}

Value Value::of_string(std::string v) {
  Value r;
  r.type = ValueType::STRING;
  r.s = std::move(v);
  return r;
}

Value Value::of_string_array(std::vector<std::string> v) {
  Value r;
  r.type = ValueType::ARRAY;
  r.elem_type = ValueType::STRING;
  r.strings = std::move(v);
  return r;
}

Value Value::of_int_array(ValueType elem, std::vector<int64_t> v) {
  Value r;
  r.type = ValueType::ARRAY;
  r.elem_type = elem;
  r.ints = std::move(v);
  return r;
}

Value Value::of_float_array(ValueType elem, std::vector<double> v) {
  Value r;
  r.type = ValueType::ARRAY;
  r.elem_type = elem;
  r.floats = std::move(v);
  return r;
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (int d = 0; d < n_dims; ++d) s += fmt::format("{}{}", d ? ", " : "", ne[d]);
  return s + "]";
}

namespace detail {

bool is_known_value_type(uint32_t t) { return t <= uint32_t(ValueType::F64); }

size_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    default: return 0;
  }
}

bool is_integer_type(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::U16: case ValueType::I16:
    case ValueType::U32: case ValueType::I32: case ValueType::U64: case ValueType::I64:
      return true;
    default:
      return false;
  }
}

bool is_float_type(ValueType t) { return t == ValueType::F32 || t == ValueType::F64; }

std::string describe(const Value& v) {
  if (!v.is_array()) return value_type_name(v.type);
  return fmt::format("array[{}]", value_type_name(v.elem_type));
}

// Length of the well-formed UTF-8 sequence starting at s[k] (2..4 bytes), or 0. Overlong forms
// and surrogates are not worth rejecting here: this only decides what gets escaped.
static size_t utf8_sequence_length(std::string_view s, size_t k) {
  const unsigned char c = static_cast<unsigned char>(s[k]);
  const size_t n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 && c < 0xf0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
  if (n == 0 || k + n > s.size()) return 0;
  for (size_t j = 1; j < n; ++j) {
    if ((static_cast<unsigned char>(s[k + j]) & 0xc0) != 0x80) return 0;
  }
  return n;
}

std::string printable(std::string_view s) {
  constexpr size_t kMaxShown = 120;
  std::string out;
  size_t k = 0;
  while (k < s.size() && k < kMaxShown) {
    const unsigned char c = static_cast<unsigned char>(s[k]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += char(c);
      ++k;
    } else if (const size_t n = c >= 0x80 ? utf8_sequence_length(s, k) : 0; n > 0) {
      out.append(s.substr(k, n));
      k += n;
    } else {
      out += fmt::format("\\x{:02x}", c);
      ++k;
    }
  }
  if (k < s.size()) out += fmt::format("...({} bytes)", s.size());
  return out;
}

}  // namespace detail
}  // namespace df::gguf
