// GGUF v3 writer. Everything is validated before the file is created; the header is built in
// memory, then tensor data is produced one tensor at a time into one reused buffer (peak memory
// = the largest tensor) and written to `path.tmp`, which is renamed to `path` only when complete.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include "gguf/format.h"
#include "gguf/gguf.h"
#include "util/error.h"

namespace df::gguf {
namespace {

using detail::printable;

// Little-endian byte buffer for the header.
class ByteSink {
 public:
  std::vector<uint8_t> bytes;

  template <typename T>
  void put(T v) {
    const size_t at = bytes.size();
    bytes.resize(at + sizeof v);
    std::memcpy(bytes.data() + at, &v, sizeof v);
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
};

struct IntRange {
  int64_t lo;
  int64_t hi;
};

// Range of the values a Value's int64 storage may hold for an integer type. u64 is stored
// wrapped (see gguf.h), so every int64 is valid for it.
IntRange int_range(ValueType t) {
  switch (t) {
    case ValueType::U8: return {0, 0xff};
    case ValueType::I8: return {-0x80, 0x7f};
    case ValueType::U16: return {0, 0xffff};
    case ValueType::I16: return {-0x8000, 0x7fff};
    case ValueType::U32: return {0, 0xffffffffll};
    case ValueType::I32: return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    case ValueType::BOOL: return {0, 1};
    default: return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  }
}

void put_int(ByteSink& out, ValueType t, int64_t x) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: out.put(uint8_t(x)); break;
    case ValueType::U16: case ValueType::I16: out.put(uint16_t(x)); break;
    case ValueType::U32: case ValueType::I32: out.put(uint32_t(x)); break;
    default: out.put(uint64_t(x)); break;
  }
}

void put_float(ByteSink& out, ValueType t, double x) {
  if (t == ValueType::F32) {
    out.put(float(x));
  } else {
    out.put(x);
  }
}

bool fits_f32(double x) {
  return !std::isfinite(x) || std::fabs(x) <= double(std::numeric_limits<float>::max());
}

// Checks that a Value is writable as it stands and appends its encoding (type id included).
void put_value(ByteSink& out, const std::string& file, const std::string& key, const Value& v) {
  const auto bad = [&](const std::string& what) {
    fail("{}: key '{}': {}", file, printable(key), what);
  };
  if (!detail::is_known_value_type(uint32_t(v.type))) {
    bad(fmt::format("unknown value type id {}", uint32_t(v.type)));
  }
  out.put(uint32_t(v.type));
  if (v.type == ValueType::STRING) {
    if (v.s.size() > detail::kMaxStringBytes) bad("string is longer than the reader accepts");
    out.put_string(v.s);
    return;
  }
  if (v.type == ValueType::F32 || v.type == ValueType::F64) {
    if (v.type == ValueType::F32 && !fits_f32(v.f)) bad(fmt::format("{} does not fit in f32", v.f));
    put_float(out, v.type, v.f);
    return;
  }
  if (v.type != ValueType::ARRAY) {
    const bool is_signed = v.type == ValueType::I8 || v.type == ValueType::I16 ||
                           v.type == ValueType::I32 || v.type == ValueType::I64;
    if (is_signed) {
      const IntRange r = int_range(v.type);
      if (v.i < r.lo || v.i > r.hi) bad(fmt::format("{} does not fit in {}", v.i, value_type_name(v.type)));
      put_int(out, v.type, v.i);
    } else {
      const IntRange r = int_range(v.type);
      if (v.type != ValueType::U64 && v.u > uint64_t(r.hi)) {
        bad(fmt::format("{} does not fit in {}", v.u, value_type_name(v.type)));
      }
      put_int(out, v.type, int64_t(v.u));
    }
    return;
  }

  const ValueType e = v.elem_type;
  if (!detail::is_known_value_type(uint32_t(e))) {
    bad(fmt::format("array of unknown value type id {}", uint32_t(e)));
  }
  if (e == ValueType::ARRAY) bad("arrays of arrays are not supported");
  const bool uses_strings = e == ValueType::STRING;
  const bool uses_floats = detail::is_float_type(e);
  const bool uses_ints = !uses_strings && !uses_floats;
  if ((!uses_strings && !v.strings.empty()) || (!uses_floats && !v.floats.empty()) ||
      (!uses_ints && !v.ints.empty())) {
    bad(fmt::format("array of {} holds elements in the wrong storage vector", value_type_name(e)));
  }
  out.put(uint32_t(e));
  out.put<uint64_t>(v.array_size());
  if (uses_strings) {
    for (const std::string& s : v.strings) {
      if (s.size() > detail::kMaxStringBytes) bad("array string is longer than the reader accepts");
      out.put_string(s);
    }
  } else if (uses_floats) {
    for (double x : v.floats) {
      if (e == ValueType::F32 && !fits_f32(x)) bad(fmt::format("{} does not fit in f32", x));
      put_float(out, e, x);
    }
  } else {
    const IntRange r = int_range(e);
    for (int64_t x : v.ints) {
      if (x < r.lo || x > r.hi) bad(fmt::format("array element {} does not fit in {}", x, value_type_name(e)));
      put_int(out, e, x);
    }
  }
}

struct TensorLayout {
  size_t nbytes;
  uint64_t offset;  // relative to the data section
};

// Checks one tensor (name, type, shape) and returns its byte size.
size_t checked_nbytes(const std::string& file, const std::string& name, GgmlType type,
                      const std::vector<int64_t>& ne) {
  const auto bad = [&](const std::string& what) {
    fail("{}: tensor '{}': {}", file, printable(name), what);
  };
  if (name.empty()) bad("empty tensor name");
  if (name.size() > detail::kMaxNameBytes) bad("name is longer than the reader accepts");
  const TypeTraits* tr = find_type_traits(uint32_t(type));
  if (!tr) bad(fmt::format("unknown ggml type id {}", uint32_t(type)));
  if (ne.empty() || ne.size() > size_t(detail::kMaxDims)) {
    bad(fmt::format("{} dimensions, must be 1..{}", ne.size(), detail::kMaxDims));
  }
  int64_t elements = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] < 1) bad(fmt::format("ne[{}] is {}, must be >= 1", d, ne[d]));
    if (__builtin_mul_overflow(elements, ne[d], &elements)) bad("element count overflows int64");
  }
  if (ne[0] % tr->block_size != 0) {
    bad(fmt::format("ne[0] = {} is not a multiple of the {} block size {}", ne[0], tr->name,
                    tr->block_size));
  }
  uint64_t bytes = uint64_t(ne[0] / tr->block_size);
  bool overflow = __builtin_mul_overflow(bytes, uint64_t(tr->type_size), &bytes);
  for (size_t d = 1; d < ne.size(); ++d) {
    overflow = overflow || __builtin_mul_overflow(bytes, uint64_t(ne[d]), &bytes);
  }
  if (overflow) bad("byte size overflows");
  return size_t(bytes);
}

// The temporary output file; removed unless commit() renamed it into place.
class TempFile {
 public:
  explicit TempFile(std::string final_path)
      : final_(std::move(final_path)), tmp_(final_ + ".tmp") {
    f_ = std::fopen(tmp_.c_str(), "wb");
    if (!f_) fail("{}: cannot create: {}", tmp_, std::strerror(errno));
  }
  ~TempFile() {
    if (f_) std::fclose(f_);
    if (!committed_) std::remove(tmp_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n) fail("{}: write failed: {}", tmp_, std::strerror(errno));
  }
  void write_zeros(size_t n) {
    static const uint8_t zeros[4096] = {};
    while (n > 0) {
      const size_t k = std::min(n, sizeof zeros);
      write(zeros, k);
      n -= k;
    }
  }
  // Flushes to disk before the rename so a crash never leaves a truncated file at `final_`.
  void commit() {
    if (std::fflush(f_) != 0 || ::fsync(::fileno(f_)) != 0) {
      fail("{}: write failed: {}", tmp_, std::strerror(errno));
    }
    const int rc = std::fclose(f_);
    f_ = nullptr;
    if (rc != 0) fail("{}: write failed: {}", tmp_, std::strerror(errno));
    if (std::rename(tmp_.c_str(), final_.c_str()) != 0) {
      fail("{}: cannot rename {} into place: {}", final_, tmp_, std::strerror(errno));
    }
    committed_ = true;
  }

 private:
  std::string final_;
  std::string tmp_;
  std::FILE* f_ = nullptr;
  bool committed_ = false;
};

}  // namespace

void Writer::set(std::string key, Value v) {
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  }
  kv_.emplace_back(std::move(key), std::move(v));
}

void Writer::add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                        std::function<void(uint8_t* dst)> fill) {
  tensors_.push_back({std::move(name), type, std::move(ne), std::move(fill)});
}

void Writer::write(const std::string& path, size_t alignment,
                   const std::function<void(size_t done, size_t total)>& progress) const {
  if (!detail::is_pow2(alignment) || alignment > std::numeric_limits<uint32_t>::max()) {
    fail("{}: alignment {} is not a power of two that fits in u32", path, alignment);
  }

  // Metadata. general.alignment, when set by the caller, must agree with `alignment`; when
  // absent it is added unless the alignment is the default.
  ByteSink header;
  header.put(detail::kMagic);
  header.put(detail::kWriteVersion);
  const Value* alignment_value = nullptr;
  for (const auto& [key, v] : kv_) {
    if (key == detail::kAlignmentKey) alignment_value = &v;
  }
  if (alignment_value && alignment_value->type != ValueType::U32) {
    fail("{}: key '{}': must be u32, found {}", path, detail::kAlignmentKey,
         detail::describe(*alignment_value));
  }
  if (alignment_value && alignment_value->u != alignment) {
    fail("{}: key '{}': is {}, but the file is written with alignment {}", path,
         detail::kAlignmentKey, alignment_value->u, alignment);
  }
  const bool add_alignment = !alignment_value && alignment != detail::kDefaultAlignment;
  header.put<uint64_t>(tensors_.size());
  header.put<uint64_t>(kv_.size() + (add_alignment ? 1 : 0));
  for (const auto& [key, v] : kv_) {
    if (key.empty()) fail("{}: empty metadata key", path);
    if (key.size() > detail::kMaxNameBytes) fail("{}: key '{}': too long", path, printable(key));
    header.put_string(key);
    put_value(header, path, key, v);
  }
  if (add_alignment) {
    header.put_string(detail::kAlignmentKey);
    put_value(header, path, detail::kAlignmentKey, Value::of_u32(uint32_t(alignment)));
  }

  // Tensor infos, packed in order, each at an aligned offset.
  std::vector<TensorLayout> layout;
  layout.reserve(tensors_.size());
  std::set<std::string_view> names;
  uint64_t data_size = 0;
  size_t largest = 0;
  for (const PendingTensor& t : tensors_) {
    const size_t nbytes = checked_nbytes(path, t.name, t.type, t.ne);
    if (!names.insert(t.name).second) fail("{}: tensor '{}': duplicate tensor name", path, printable(t.name));
    if (!t.fill) fail("{}: tensor '{}': no fill function", path, printable(t.name));
    const uint64_t offset = data_size;
    if (__builtin_add_overflow(offset, uint64_t(nbytes) + alignment - 1, &data_size)) {
      fail("{}: tensor '{}': data section size overflows", path, printable(t.name));
    }
    data_size &= ~uint64_t(alignment - 1);
    layout.push_back({nbytes, offset});
    largest = std::max(largest, nbytes);
    header.put_string(t.name);
    header.put(uint32_t(t.ne.size()));
    for (int64_t n : t.ne) header.put(uint64_t(n));
    header.put(uint32_t(t.type));
    header.put(offset);
  }
  header.bytes.resize(detail::align_up(header.bytes.size(), alignment), 0);

  const size_t total = header.bytes.size() + size_t(data_size);
  TempFile out(path);
  out.write(header.bytes.data(), header.bytes.size());
  size_t done = header.bytes.size();
  if (progress) progress(done, total);
  std::vector<uint8_t> buffer(largest);
  for (size_t k = 0; k < tensors_.size(); ++k) {
    const size_t nbytes = layout[k].nbytes;
    tensors_[k].fill(buffer.data());
    out.write(buffer.data(), nbytes);
    const size_t padded = size_t(detail::align_up(nbytes, alignment));
    out.write_zeros(padded - nbytes);
    done += padded;
    if (progress) progress(done, total);
  }
  out.commit();
}

}  // namespace df::gguf
