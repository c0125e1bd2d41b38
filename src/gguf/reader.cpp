// Validating GGUF v2/v3 reader. Every read goes through a bounds-checked cursor, every count is
// checked against the bytes left before anything is allocated, and every tensor's data range is
// checked against the file and against the other tensors. (v2 and v3 share one layout; v3 only
// added big-endian files, which we reject.)
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "gguf/format.h"
#include "gguf/gguf.h"
#include "util/error.h"
#include "util/mmap_file.h"

namespace df::gguf {
namespace {

using detail::printable;

class Parser {
 public:
  Parser(const uint8_t* data, size_t size, const std::string& file)
      : begin_(data), p_(data), end_(data + size), file_(file) {}

  // What is being read, for messages: "header", "key 'x'", "tensor 'y'".
  void set_where(std::string w) { where_ = std::move(w); }
  const std::string& where() const { return where_; }

  template <typename... Args>
  [[noreturn]] void error(fmt::format_string<Args...> f, Args&&... args) const {
    fail("{}: {}: {}", file_, where_, fmt::format(f, std::forward<Args>(args)...));
  }

  size_t pos() const { return size_t(p_ - begin_); }
  size_t left() const { return size_t(end_ - p_); }

  template <typename T>
  T read(const char* what) {
    if (left() < sizeof(T)) {
      error("file truncated: {} needs {} bytes at offset {}, only {} left", what, sizeof(T),
            pos(), left());
    }
    T v;
    std::memcpy(&v, p_, sizeof v);
    p_ += sizeof v;
    return v;
  }

  std::string_view read_string(const char* what, uint64_t cap) {
    const uint64_t n = read<uint64_t>(what);
    if (n > left()) {
      error("{} length {} exceeds the {} bytes left in the file", what, n, left());
    }
    if (n > cap) error("{} length {} exceeds the limit of {} bytes", what, n, cap);
    std::string_view s(reinterpret_cast<const char*>(p_), size_t(n));
    p_ += n;
    return s;
  }

  Value read_value(uint32_t type_id);
  void read_array(Value& v);

 private:
  template <typename T>
  void read_ints(std::vector<int64_t>& out, uint64_t count);
  template <typename T>
  void read_floats(std::vector<double>& out, uint64_t count);
  void read_strings(std::vector<std::string>& out, uint64_t count);

  const uint8_t* begin_;
  const uint8_t* p_;
  const uint8_t* end_;
  const std::string& file_;
  std::string where_ = "header";
};

Value Parser::read_value(uint32_t type_id) {
  if (!detail::is_known_value_type(type_id)) error("unknown value type id {}", type_id);
  Value v;
  v.type = ValueType(type_id);
  switch (v.type) {
    case ValueType::U8: v.u = read<uint8_t>("u8 value"); break;
    case ValueType::U16: v.u = read<uint16_t>("u16 value"); break;
    case ValueType::U32: v.u = read<uint32_t>("u32 value"); break;
    case ValueType::U64: v.u = read<uint64_t>("u64 value"); break;
    case ValueType::I8: v.i = read<int8_t>("i8 value"); break;
    case ValueType::I16: v.i = read<int16_t>("i16 value"); break;
    case ValueType::I32: v.i = read<int32_t>("i32 value"); break;
    case ValueType::I64: v.i = read<int64_t>("i64 value"); break;
    case ValueType::F32: v.f = read<float>("f32 value"); break;
    case ValueType::F64: v.f = read<double>("f64 value"); break;
    case ValueType::BOOL: {
      const uint8_t b = read<uint8_t>("bool value");
      if (b > 1) error("bool value is {}, not 0 or 1", b);
      v.u = b;
      break;
    }
    case ValueType::STRING: v.s = read_string("string value", detail::kMaxStringBytes); break;
    case ValueType::ARRAY: read_array(v); break;
  }
  return v;
}

// Arrays are decoded with one tight loop per element type: token lists have ~250K entries.
void Parser::read_array(Value& v) {
  const uint32_t elem_id = read<uint32_t>("array element type");
  if (!detail::is_known_value_type(elem_id)) error("array of unknown value type id {}", elem_id);
  v.elem_type = ValueType(elem_id);
  if (v.elem_type == ValueType::ARRAY) error("arrays of arrays are not supported");
  const uint64_t count = read<uint64_t>("array length");
  const size_t min_elem_bytes =
      v.elem_type == ValueType::STRING ? sizeof(uint64_t) : detail::scalar_size(v.elem_type);
  if (count > left() / min_elem_bytes) {
    error("array of {} {} elements needs at least {} bytes per element, only {} bytes left",
          count, value_type_name(v.elem_type), min_elem_bytes, left());
  }
  switch (v.elem_type) {
    case ValueType::U8: read_ints<uint8_t>(v.ints, count); break;
    case ValueType::I8: read_ints<int8_t>(v.ints, count); break;
    case ValueType::U16: read_ints<uint16_t>(v.ints, count); break;
    case ValueType::I16: read_ints<int16_t>(v.ints, count); break;
    case ValueType::U32: read_ints<uint32_t>(v.ints, count); break;
    case ValueType::I32: read_ints<int32_t>(v.ints, count); break;
    case ValueType::U64: read_ints<uint64_t>(v.ints, count); break;
    case ValueType::I64: read_ints<int64_t>(v.ints, count); break;
    case ValueType::BOOL:
      read_ints<uint8_t>(v.ints, count);
      for (size_t k = 0; k < v.ints.size(); ++k) {
        if (v.ints[k] > 1) error("bool array element {} is {}, not 0 or 1", k, v.ints[k]);
      }
      break;
    case ValueType::F32: read_floats<float>(v.floats, count); break;
    case ValueType::F64: read_floats<double>(v.floats, count); break;
    case ValueType::STRING: read_strings(v.strings, count); break;
    case ValueType::ARRAY: break;  // rejected above
  }
}

// The caller has checked that count elements of sizeof(T) fit in the bytes left.
template <typename T>
void Parser::read_ints(std::vector<int64_t>& out, uint64_t count) {
  out.resize(count);
  for (size_t k = 0; k < count; ++k) {
    T x;
    std::memcpy(&x, p_ + k * sizeof(T), sizeof(T));
    out[k] = int64_t(x);  // u64 above 2^63 wraps, as documented in gguf.h
  }
  p_ += count * sizeof(T);
}

template <typename T>
void Parser::read_floats(std::vector<double>& out, uint64_t count) {
  out.resize(count);
  for (size_t k = 0; k < count; ++k) {
    T x;
    std::memcpy(&x, p_ + k * sizeof(T), sizeof(T));
    out[k] = double(x);
  }
  p_ += count * sizeof(T);
}

void Parser::read_strings(std::vector<std::string>& out, uint64_t count) {
  out.reserve(count);
  for (size_t k = 0; k < count; ++k) {
    if (left() < sizeof(uint64_t)) {
      error("file truncated: string array element {} of {} has no length", k, count);
    }
    uint64_t n;
    std::memcpy(&n, p_, sizeof n);
    p_ += sizeof n;
    if (n > left()) {
      error("string array element {} length {} exceeds the {} bytes left in the file", k, n,
            left());
    }
    if (n > detail::kMaxStringBytes) {
      error("string array element {} length {} exceeds the limit of {} bytes", k, n,
            detail::kMaxStringBytes);
    }
    out.emplace_back(reinterpret_cast<const char*>(p_), size_t(n));
    p_ += n;
  }
}

// ne, type and byte size of one tensor info, checked; the name is already in p.where().
void read_tensor_shape(Parser& p, TensorInfo& t) {
  const uint32_t n_dims = p.read<uint32_t>("n_dims");
  if (n_dims < 1 || n_dims > uint32_t(detail::kMaxDims)) {
    p.error("n_dims is {}, must be 1..{}", n_dims, detail::kMaxDims);
  }
  t.n_dims = int(n_dims);
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t n = p.read<uint64_t>("ne");
    if (n == 0) p.error("ne[{}] is 0", d);
    if (n > uint64_t(std::numeric_limits<int64_t>::max())) p.error("ne[{}] = {} is too large", d, n);
    t.ne[d] = int64_t(n);
  }
  const uint32_t type_id = p.read<uint32_t>("tensor type");
  const TypeTraits* tr = find_type_traits(type_id);
  if (!tr) p.error("unknown ggml type id {}", type_id);
  if (tr->block_size <= 0 || tr->type_size <= 0) p.error("type {} has no defined size", tr->name);
  t.type = tr->type;
  t.offset = p.read<uint64_t>("tensor offset");

  int64_t elements = 1;
  for (int d = 0; d < t.n_dims; ++d) {
    if (__builtin_mul_overflow(elements, t.ne[d], &elements)) {
      p.error("shape {} has more elements than fit in int64", t.shape_string());
    }
  }
  if (t.ne[0] % tr->block_size != 0) {
    p.error("ne[0] = {} is not a multiple of the {} block size {}", t.ne[0], tr->name,
            tr->block_size);
  }
  uint64_t bytes = uint64_t(t.ne[0] / tr->block_size);
  bool overflow = __builtin_mul_overflow(bytes, uint64_t(tr->type_size), &bytes);
  for (int d = 1; d < t.n_dims; ++d) {
    overflow = overflow || __builtin_mul_overflow(bytes, uint64_t(t.ne[d]), &bytes);
  }
  if (overflow || bytes > std::numeric_limits<size_t>::max()) {
    p.error("byte size of shape {} ({}) overflows", t.shape_string(), tr->name);
  }
  t.nbytes = size_t(bytes);
}

}  // namespace

File::~File() = default;

std::unique_ptr<File> File::open(const std::string& path) {
  std::unique_ptr<File> f(new File());
  f->path_ = path;
  f->mapping_ = std::make_unique<MappedFile>(path);
  f->parse_all(f->mapping_->data(), f->mapping_->size());
  return f;
}

std::unique_ptr<File> File::parse(const uint8_t* data, size_t size, const std::string& name) {
  std::unique_ptr<File> f(new File());
  f->path_ = name;
  f->parse_all(data, size);
  return f;
}

void File::parse_all(const uint8_t* data, size_t size) {
  size_ = size;
  Parser p(data, size, path_);

  // Header.
  const uint32_t magic = p.read<uint32_t>("magic");
  if (magic != detail::kMagic) {
    p.error("not a GGUF file (magic bytes {:02x} {:02x} {:02x} {:02x}, expected 'GGUF')",
            data[0], data[1], data[2], data[3]);
  }
  version_ = p.read<uint32_t>("version");
  if (version_ == 1) p.error("GGUF v1 is not supported");
  if (version_ == 0x02000000 || version_ == 0x03000000) {
    p.error("big-endian GGUF files are not supported");
  }
  if (version_ != 2 && version_ != 3) p.error("unsupported GGUF version {} (expected 2 or 3)", version_);
  const uint64_t n_tensors = p.read<uint64_t>("tensor count");
  const uint64_t n_kv = p.read<uint64_t>("metadata kv count");
  if (n_kv > p.left() / detail::kMinKvBytes) {
    p.error("metadata kv count {} is impossible: only {} bytes follow the header", n_kv, p.left());
  }
  if (n_tensors > (p.left() - n_kv * detail::kMinKvBytes) / detail::kMinTensorInfoBytes) {
    p.error("tensor count {} is impossible with {} metadata entries in {} bytes", n_tensors, n_kv,
            p.left());
  }

  // Metadata. Reserve only a little up front: the counts passed the check above, but a corrupt
  // file could still ask for many small entries.
  kv_.reserve(std::min<uint64_t>(n_kv, 1024));
  for (uint64_t k = 0; k < n_kv; ++k) {
    p.set_where(fmt::format("metadata entry {}", k));
    std::string key(p.read_string("key", detail::kMaxNameBytes));
    p.set_where(fmt::format("key '{}'", printable(key)));
    const uint32_t type_id = p.read<uint32_t>("value type");
    Value v = p.read_value(type_id);
    const auto [it, inserted] = kv_index_.emplace(key, kv_.size());
    if (!inserted) p.error("duplicate key (first seen as metadata entry {})", it->second);
    kv_.emplace_back(std::move(key), std::move(v));
  }

  alignment_ = detail::kDefaultAlignment;
  if (const Value* a = find(detail::kAlignmentKey)) {
    p.set_where(fmt::format("key '{}'", detail::kAlignmentKey));
    if (a->type != ValueType::U32) p.error("must be u32, found {}", detail::describe(*a));
    if (!detail::is_pow2(a->u)) p.error("alignment {} is not a non-zero power of two", a->u);
    alignment_ = size_t(a->u);
  }

  // Tensor infos.
  tensors_.reserve(std::min<uint64_t>(n_tensors, 4096));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    p.set_where(fmt::format("tensor info {}", k));
    TensorInfo t;
    t.name = std::string(p.read_string("tensor name", detail::kMaxNameBytes));
    p.set_where(fmt::format("tensor '{}'", printable(t.name)));
    read_tensor_shape(p, t);
    const auto [it, inserted] = tensor_index_.emplace(t.name, tensors_.size());
    if (!inserted) p.error("duplicate tensor name (first seen as tensor info {})", it->second);
    tensors_.push_back(std::move(t));
  }

  // Data section: every tensor aligned, inside the file, and not overlapping another.
  const uint64_t data_start = detail::align_up(p.pos(), alignment_);
  const uint64_t data_size = data_start <= size ? size - data_start : 0;
  for (TensorInfo& t : tensors_) {
    p.set_where(fmt::format("tensor '{}'", printable(t.name)));
    if (t.offset % alignment_ != 0) {
      p.error("offset {} is not a multiple of the alignment {}", t.offset, alignment_);
    }
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      p.error("data [{}, +{}) extends past the end of the file (data section has {} bytes)",
              t.offset, t.nbytes, data_size);
    }
    t.data = data + data_start + t.offset;
  }
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const TensorInfo& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const TensorInfo& prev = *by_offset[k - 1];
    const TensorInfo& cur = *by_offset[k];
    if (prev.offset + prev.nbytes > cur.offset) {
      p.set_where(fmt::format("tensor '{}'", printable(cur.name)));
      p.error("data at offset {} overlaps tensor '{}' at [{}, +{})", cur.offset,
              printable(prev.name), prev.offset, prev.nbytes);
    }
  }
}

const Value* File::find(std::string_view key) const {
  const auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::tensor(std::string_view name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) fail("{}: tensor '{}': missing tensor", path_, printable(name));
  return *t;
}

}  // namespace df::gguf
