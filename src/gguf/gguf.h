// GGUF v2/v3 files: metadata values, tensor infos, a validating reader (mmap) and a writer.
// Every problem in a file becomes a df::Error naming the file, the key or tensor, and what is
// wrong; nothing in a file can make the reader crash or read out of bounds.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "quant/types.h"

namespace df {
class MappedFile;
}

namespace df::gguf {

enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8,
  ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
const char* value_type_name(ValueType t);

// One metadata value. Scalars live in the matching field; arrays keep their element type and
// store integers (any width, bool included) in ints, floats in floats, strings in strings.
struct Value {
  ValueType type = ValueType::U8;
  ValueType elem_type = ValueType::U8;  // arrays only
  uint64_t u = 0;                        // U8..U64 and BOOL
  int64_t i = 0;                         // I8..I64
  double f = 0;                          // F32, F64
  std::string s;                         // STRING
  std::vector<int64_t> ints;             // integer/bool arrays (u64 values above 2^63 wrap)
  std::vector<double> floats;            // float arrays
  std::vector<std::string> strings;      // string arrays

  bool is_integer() const;  // any integer type or bool
  bool is_float() const;
  bool is_array() const { return type == ValueType::ARRAY; }
  size_t array_size() const;

  static Value of_u32(uint32_t v);
  static Value of_i32(int32_t v);
  static Value of_u64(uint64_t v);
  static Value of_f32(float v);
  static Value of_bool(bool v);
  static Value of_string(std::string v);
  static Value of_string_array(std::vector<std::string> v);
  static Value of_int_array(ValueType elem, std::vector<int64_t> v);
  static Value of_float_array(ValueType elem, std::vector<double> v);
};

struct TensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // ne[0] is the contiguous dimension
  uint64_t offset = 0;           // relative to the data section
  size_t nbytes = 0;
  const uint8_t* data = nullptr;  // points into the mapping (reader only)

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  std::string shape_string() const;  // "[1024, 4096]"
};

class File {
 public:
  // Maps and validates the whole file. Throws df::Error.
  static std::unique_ptr<File> open(const std::string& path);
  // Parses a buffer owned by the caller (tests, fuzzing). `name` is used in messages.
  static std::unique_ptr<File> parse(const uint8_t* data, size_t size, const std::string& name);
  ~File();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  size_t file_size() const { return size_; }

  // Metadata, in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters: throw a df::Error naming the file and key when the key is missing or has a
  // type that cannot represent the request (integers of any width are accepted for integers,
  // and are range-checked).
  uint32_t get_u32(std::string_view key) const;
  uint32_t get_u32_or(std::string_view key, uint32_t fallback) const;
  int64_t get_i64(std::string_view key) const;
  float get_f32(std::string_view key) const;
  float get_f32_or(std::string_view key, float fallback) const;
  bool get_bool_or(std::string_view key, bool fallback) const;
  const std::string& get_string(std::string_view key) const;
  std::string get_string_or(std::string_view key, const std::string& fallback) const;
  const std::vector<std::string>& get_string_array(std::string_view key) const;
  const std::vector<int64_t>& get_int_array(std::string_view key) const;
  const std::vector<double>& get_float_array(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  // Throws naming the file and tensor when absent.
  const TensorInfo& tensor(std::string_view name) const;

 private:
  File() = default;
  void parse_all(const uint8_t* data, size_t size);

  std::string path_;
  std::unique_ptr<MappedFile> mapping_;
  size_t size_ = 0;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Writes GGUF v3. Tensor data is produced on demand, one tensor at a time, so files larger than
// memory (27B shapes) can be written: fill(dst) must write exactly the tensor's nbytes.
class Writer {
 public:
  void set(std::string key, Value v);  // replaces an existing key, keeps first position
  void add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                  std::function<void(uint8_t* dst)> fill);
  // Writes the file (via a temporary name, renamed at the end). Throws df::Error on I/O errors
  // or invalid tensors (row length not a multiple of the block size, duplicate names).
  void write(const std::string& path, size_t alignment = 32,
             const std::function<void(size_t done, size_t total)>& progress = {}) const;

 private:
  struct PendingTensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    std::function<void(uint8_t*)> fill;
  };
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace df::gguf
