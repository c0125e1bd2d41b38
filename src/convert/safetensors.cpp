#include "convert/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "util/error.h"
#include "util/half.h"
#include "util/mmap_file.h"

namespace df::convert {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct DtypeInfo {
  StDtype type;
  const char* name;
  size_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {StDtype::BOOL, "BOOL", 1}, {StDtype::U8, "U8", 1},   {StDtype::I8, "I8", 1},
    {StDtype::F8_E5M2, "F8_E5M2", 1}, {StDtype::F8_E4M3, "F8_E4M3", 1},
    {StDtype::I16, "I16", 2},   {StDtype::U16, "U16", 2}, {StDtype::F16, "F16", 2},
    {StDtype::BF16, "BF16", 2}, {StDtype::I32, "I32", 4}, {StDtype::U32, "U32", 4},
    {StDtype::F32, "F32", 4},   {StDtype::F64, "F64", 8}, {StDtype::I64, "I64", 8},
    {StDtype::U64, "U64", 8},
};

const DtypeInfo& info(StDtype t) {
  for (const DtypeInfo& d : kDtypes)
    if (d.type == t) return d;
  fail("internal: unknown safetensors dtype {}", int(t));
}

// The header is JSON text; a real one is a few hundred KiB even for 27B checkpoints. The cap
// keeps a corrupt length from making us parse gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// Product of the dims with overflow checks: a hostile shape must not wrap around and pass the
// size comparison.
uint64_t checked_elements(const std::vector<int64_t>& shape, const std::string& where) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / uint64_t(d)) fail("{}: shape overflows", where);
    n *= uint64_t(d);
  }
  return n;
}

}  // namespace

const char* dtype_name(StDtype t) { return info(t).name; }
size_t dtype_size(StDtype t) { return info(t).size; }
bool is_float_readable(StDtype t) {
  return t == StDtype::F16 || t == StDtype::BF16 || t == StDtype::F32 || t == StDtype::F64;
}

int64_t StTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string StTensor::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void read_as_f32(const StTensor& t, int64_t first, int64_t n, float* dst) {
  if (first < 0 || n < 0 || first + n > t.n_elements())
    fail("internal: reading elements [{}, {}) of tensor '{}' with {} elements", first, first + n, t.name,
         t.n_elements());
  const uint8_t* src = t.data + size_t(first) * dtype_size(t.dtype);
  // memcpy per element: tensor data in a safetensors file is not aligned in general.
  switch (t.dtype) {
    case StDtype::F32:
      std::memcpy(dst, src, size_t(n) * sizeof(float));
      return;
    case StDtype::F16:
    case StDtype::BF16: {
      const bool bf = t.dtype == StDtype::BF16;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf ? bf16_to_f32(h) : f16_to_f32(h);
      }
      return;
    }
    case StDtype::F64:
      for (int64_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, src + 8 * i, 8);
        dst[i] = float(d);
      }
      return;
    default:
      fail("{}: tensor '{}' has dtype {}; only F32, F16, BF16 and F64 weights can be converted", t.file, t.name,
           dtype_name(t.dtype));
  }
}

// ---- one file --------------------------------------------------------------------------------

SafetensorsFile::~SafetensorsFile() = default;

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->mapping_ = std::make_unique<MappedFile>(path);
  f->parse_all(f->mapping_->data(), f->mapping_->size());
  return f;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::parse(const uint8_t* data, size_t size, const std::string& name) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = name;
  f->parse_all(data, size);
  return f;
}

void SafetensorsFile::parse_all(const uint8_t* data, size_t size) {
  const std::string& p = path_;
  if (size < 8) fail("{}: {} bytes, too short for a safetensors header length (8 bytes)", p, size);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | data[i];
  if (header_len > size - 8)
    fail("{}: header length {} runs past the end of the file ({} bytes): truncated or not safetensors", p,
         header_len, size);
  if (header_len > kMaxHeaderBytes) fail("{}: header length {} is implausibly large", p, header_len);
  const char* text = reinterpret_cast<const char*>(data + 8);
  json header;
  try {
    header = json::parse(text, text + header_len);
  } catch (const json::exception& e) {
    fail("{}: header is not valid JSON: {}", p, e.what());
  }
  if (!header.is_object()) fail("{}: header is not a JSON object", p);

  const uint8_t* blob = data + 8 + header_len;
  const uint64_t blob_size = size - 8 - header_len;
  for (const auto& [name, entry] : header.items()) {
    const std::string where = fmt::format("{}: tensor '{}'", p, name);
    if (name == "__metadata__") {
      if (!entry.is_object()) fail("{}: __metadata__ is not an object", p);
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) fail("{}: __metadata__ value '{}' is not a string", p, k);
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object()) fail("{} is not an object", where);
    const auto dt = entry.find("dtype");
    const auto sh = entry.find("shape");
    const auto off = entry.find("data_offsets");
    if (dt == entry.end() || !dt->is_string()) fail("{} has no string 'dtype'", where);
    if (sh == entry.end() || !sh->is_array()) fail("{} has no array 'shape'", where);
    if (off == entry.end() || !off->is_array() || off->size() != 2) fail("{} has no 'data_offsets' [begin, end]", where);

    StTensor t;
    t.name = name;
    t.file = p;
    const std::string dts = dt->get<std::string>();
    const auto known = std::find_if(std::begin(kDtypes), std::end(kDtypes), [&](const DtypeInfo& d) { return dts == d.name; });
    if (known == std::end(kDtypes)) fail("{} has unknown dtype '{}'", where, dts);
    t.dtype = known->type;
    for (const json& d : *sh) {
      if (!d.is_number_unsigned()) fail("{} has a shape entry that is not a non-negative integer: {}", where, d.dump());
      const uint64_t v = d.get<uint64_t>();
      if (v > (uint64_t(1) << 40)) fail("{} has dimension {} out of range", where, v);
      t.shape.push_back(int64_t(v));
    }
    if (t.shape.size() > 8) fail("{} has {} dimensions", where, t.shape.size());
    for (const json& o : *off)
      if (!o.is_number_unsigned()) fail("{} has a data offset that is not a non-negative integer: {}", where, o.dump());
    const uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
    if (begin > end) fail("{}: data_offsets [{}, {}] are reversed", where, begin, end);
    if (end > blob_size)
      fail("{}: data_offsets [{}, {}] end past the data section ({} bytes): truncated file?", where, begin, end,
           blob_size);
    const uint64_t n = checked_elements(t.shape, where);
    if (n > std::numeric_limits<uint64_t>::max() / dtype_size(t.dtype)) fail("{}: shape {} overflows", where, t.shape_string());
    const uint64_t want = n * dtype_size(t.dtype);
    if (end - begin != want)
      fail("{}: dtype {} and shape {} need {} bytes, but data_offsets [{}, {}] give {}", where, dts, t.shape_string(),
           want, begin, end, end - begin);
    t.data = blob + begin;
    t.nbytes = size_t(want);
    tensors_.push_back(std::move(t));
  }
  std::sort(tensors_.begin(), tensors_.end(), [](const StTensor& a, const StTensor& b) { return a.data < b.data; });
  for (size_t i = 1; i < tensors_.size(); ++i) {
    const StTensor& a = tensors_[i - 1];
    const StTensor& b = tensors_[i];
    if (a.data + a.nbytes > b.data) fail("{}: tensors '{}' and '{}' overlap in the data section", p, a.name, b.name);
  }
}

// ---- a checkpoint directory ------------------------------------------------------------------

Checkpoint::~Checkpoint() = default;

const StTensor* Checkpoint::find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

void Checkpoint::add(std::unique_ptr<SafetensorsFile> f) {
  for (const StTensor& t : f->tensors()) {
    if (const StTensor* prev = find(t.name))
      fail("tensor '{}' is in both {} and {}", t.name, prev->file, t.file);
    by_name_.emplace(t.name, &t);
    order_.push_back(&t);
  }
  files_.push_back(f->path());
  shards_.push_back(std::move(f));
}

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("{}: not a directory", dir);
  std::unique_ptr<Checkpoint> c(new Checkpoint());
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single = fs::path(dir) / "model.safetensors";
  if (fs::is_regular_file(index, ec)) {
    json j;
    try {
      std::ifstream in(index);
      j = json::parse(in);
    } catch (const json::exception& e) {
      fail("{}: not valid JSON: {}", index.string(), e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      fail("{}: no 'weight_map' object", index.string());
    std::set<std::string> shard_names;
    for (const auto& [name, shard] : j["weight_map"].items()) {
      if (!shard.is_string()) fail("{}: weight_map entry '{}' is not a file name", index.string(), name);
      const std::string s = shard.get<std::string>();
      if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..")
        fail("{}: weight_map entry '{}' names '{}', not a file in the same directory", index.string(), name, s);
      shard_names.insert(s);
    }
    if (shard_names.empty()) fail("{}: weight_map is empty", index.string());
    for (const std::string& s : shard_names) c->add(SafetensorsFile::open((fs::path(dir) / s).string()));
    for (const auto& [name, shard] : j["weight_map"].items()) {
      const StTensor* t = c->find(name);
      const std::string want = (fs::path(dir) / shard.get<std::string>()).string();
      if (t == nullptr || t->file != want)
        fail("{}: weight_map puts '{}' in {}, but that shard does not contain it", index.string(), name,
             shard.get<std::string>());
    }
  } else if (fs::is_regular_file(single, ec)) {
    c->add(SafetensorsFile::open(single.string()));
  } else {
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.is_regular_file() && e.path().extension() == ".safetensors") found.push_back(e.path().string());
    std::sort(found.begin(), found.end());
    if (found.empty())
      fail("{}: no model.safetensors, model.safetensors.index.json or *.safetensors (PyTorch .bin checkpoints "
           "are not supported; re-save with safetensors)",
           dir);
    for (const std::string& s : found) c->add(SafetensorsFile::open(s));
  }
  return c;
}

}  // namespace df::convert
