// Byte-level GGUF builder for tests: it writes whatever it is told, including things the real
// Writer refuses (bad counts, types, shapes, offsets), so corrupt files can be made on purpose.
// Also the table of corrupt files kept in tests/data/corrupt-gguf.
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace gguf_raw {

struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  Bytes& put(T v) {
    const size_t at = b.size();
    b.resize(at + sizeof v);
    std::memcpy(b.data() + at, &v, sizeof v);
    return *this;
  }
  Bytes& str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
};

// Value type ids, spelled out so the corrupt files do not depend on the code under test.
enum : uint32_t { U8 = 0, U32 = 4, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9, U64 = 10 };
enum : uint32_t { GGML_F32 = 0, GGML_Q8_0 = 8 };

struct Kv {
  std::string key;
  uint32_t type;
  std::vector<uint8_t> payload;  // everything after the type id
};

struct Tensor {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type;
  uint64_t offset;
  std::optional<uint32_t> n_dims;  // overrides ne.size()
};

struct Spec {
  uint32_t magic = 0x46554747;
  uint32_t version = 3;
  std::optional<uint64_t> n_tensors;  // override the real counts
  std::optional<uint64_t> n_kv;
  std::vector<Kv> kvs;
  std::vector<Tensor> tensors;
  uint64_t alignment = 32;  // padding before the data section
  size_t data_bytes = 0;
};

inline Kv kv_u32(const std::string& key, uint32_t v) { return {key, U32, Bytes().put(v).b}; }
inline Kv kv_f32(const std::string& key, float v) { return {key, F32, Bytes().put(v).b}; }
inline Kv kv_string(const std::string& key, const std::string& s) {
  return {key, STRING, Bytes().str(s).b};
}
inline Kv kv_strings(const std::string& key, const std::vector<std::string>& v) {
  Bytes p;
  p.put<uint32_t>(STRING).put<uint64_t>(v.size());
  for (const auto& s : v) p.str(s);
  return {key, ARRAY, p.b};
}

inline std::vector<uint8_t> build(const Spec& s) {
  Bytes out;
  out.put(s.magic).put(s.version);
  out.put<uint64_t>(s.n_tensors.value_or(s.tensors.size()));
  out.put<uint64_t>(s.n_kv.value_or(s.kvs.size()));
  for (const Kv& kv : s.kvs) {
    out.str(kv.key).put(kv.type);
    out.b.insert(out.b.end(), kv.payload.begin(), kv.payload.end());
  }
  for (const Tensor& t : s.tensors) {
    out.str(t.name).put<uint32_t>(t.n_dims.value_or(uint32_t(t.ne.size())));
    for (uint64_t n : t.ne) out.put(n);
    out.put(t.type).put(t.offset);
  }
  while (out.b.size() % s.alignment != 0) out.b.push_back(0);
  for (size_t k = 0; k < s.data_bytes; ++k) out.b.push_back(uint8_t(k * 7 + 1));
  return out.b;
}

// A small valid file: 4 keys, an f32 [8, 2] tensor "a" at 0 and a q8_0 [32, 2] tensor "b" at 64.
inline Spec valid_spec() {
  Spec s;
  s.kvs = {kv_string("general.architecture", "test"), kv_u32("test.count", 7),
           kv_strings("test.tokens", {"a", "bc", ""}), kv_f32("test.scale", 0.5f)};
  s.tensors = {{"a", {8, 2}, GGML_F32, 0, {}}, {"b", {32, 2}, GGML_Q8_0, 64, {}}};
  s.data_bytes = 64 + 2 * 34;
  return s;
}

struct CorruptCase {
  std::string file;                  // name in tests/data/corrupt-gguf
  std::string what;                  // one line for the README
  std::vector<uint8_t> bytes;
  std::vector<std::string> expect;   // substrings the error message must contain
};

inline std::vector<CorruptCase> corrupt_cases() {
  std::vector<CorruptCase> cases;
  const auto add = [&](std::string file, std::string what, const Spec& s,
                       std::vector<std::string> expect) {
    cases.push_back({std::move(file), std::move(what), build(s), std::move(expect)});
  };
  const Spec base = valid_spec();
  const uint64_t huge = uint64_t(1) << 62;

  { Spec s = base; s.magic = 0x58554747;
    add("bad-magic.gguf", "magic is 'GGUX'", s, {"header", "not a GGUF file"}); }
  { Spec s = base; s.version = 1;
    add("version-1.gguf", "GGUF version 1", s, {"GGUF v1 is not supported"}); }
  { Spec s = base; s.version = 99;
    add("version-99.gguf", "GGUF version 99", s, {"unsupported GGUF version 99"}); }
  { Spec s = base; s.version = 0x03000000;
    add("big-endian.gguf", "version 3 stored big-endian", s, {"big-endian"}); }
  { Spec s = base; s.n_kv = huge;
    add("huge-kv-count.gguf", "metadata kv count 2^62", s, {"metadata kv count"}); }
  { Spec s = base; s.n_tensors = huge;
    add("huge-tensor-count.gguf", "tensor count 2^62", s, {"tensor count"}); }
  { Spec s = base; s.kvs[0].payload = Bytes().put<uint64_t>(huge).b;
    add("huge-string-length.gguf", "string value claims 2^62 bytes", s,
        {"key 'general.architecture'", "string value length"}); }
  { Spec s = base; s.kvs[2].payload = Bytes().put<uint32_t>(STRING).put<uint64_t>(2).str("a").put<uint64_t>(huge).b;
    add("huge-array-string-length.gguf", "second string of an array claims 2^62 bytes", s,
        {"key 'test.tokens'", "element 1"}); }
  { Spec s = base; s.kvs[2].payload = Bytes().put<uint32_t>(U32).put<uint64_t>(huge).b;
    add("huge-array-length.gguf", "u32 array of 2^62 elements", s, {"key 'test.tokens'", "array of"}); }
  { Spec s = base; s.kvs[1].type = 13;
    add("bad-value-type.gguf", "value type id 13", s, {"key 'test.count'", "unknown value type id 13"}); }
  { Spec s = base; s.kvs[2].payload = Bytes().put<uint32_t>(77).put<uint64_t>(1).b;
    add("array-unknown-type.gguf", "array of value type id 77", s,
        {"key 'test.tokens'", "unknown value type id 77"}); }
  { Spec s = base;
    s.kvs[2].payload = Bytes().put<uint32_t>(ARRAY).put<uint64_t>(1).put<uint32_t>(U8).put<uint64_t>(0).b;
    add("array-of-arrays.gguf", "array whose elements are arrays", s,
        {"key 'test.tokens'", "arrays of arrays"}); }
  { Spec s = base; s.kvs.push_back({"test.flag", BOOL, {2}});
    add("bool-value-2.gguf", "bool stored as 2", s, {"key 'test.flag'", "not 0 or 1"}); }
  { Spec s = base; s.kvs.push_back(kv_u32("test.count", 8));
    add("duplicate-key.gguf", "key test.count twice", s, {"key 'test.count'", "duplicate key"}); }
  { Spec s = base; s.kvs.push_back(kv_u32("general.alignment", 0));
    add("alignment-0.gguf", "general.alignment = 0", s, {"key 'general.alignment'", "power of two"}); }
  { Spec s = base; s.kvs.push_back(kv_u32("general.alignment", 3));
    add("alignment-3.gguf", "general.alignment = 3", s, {"key 'general.alignment'", "power of two"}); }
  { Spec s = base; s.kvs.push_back({"general.alignment", U64, Bytes().put<uint64_t>(32).b});
    add("alignment-u64.gguf", "general.alignment stored as u64", s,
        {"key 'general.alignment'", "must be u32"}); }
  { Spec s = base; s.tensors[0].ne = {}; s.tensors[0].n_dims = 0;
    add("n-dims-0.gguf", "tensor a has 0 dimensions", s, {"tensor 'a'", "n_dims is 0"}); }
  { Spec s = base; s.tensors[0].ne = {8, 2, 1, 1, 1};
    add("n-dims-5.gguf", "tensor a has 5 dimensions", s, {"tensor 'a'", "n_dims is 5"}); }
  { Spec s = base; s.tensors[0].ne = {8, 0};
    add("ne-zero.gguf", "tensor a has ne[1] = 0", s, {"tensor 'a'", "ne[1] is 0"}); }
  { Spec s = base; s.tensors[0].ne = {uint64_t(1) << 32, uint64_t(1) << 32, uint64_t(1) << 32};
    add("ne-overflow.gguf", "tensor a has 2^96 elements", s, {"tensor 'a'", "int64"}); }
  { Spec s = base; s.tensors[0].ne = {huge};
    add("nbytes-overflow.gguf", "f32 tensor a of 2^62 elements (2^64 bytes)", s,
        {"tensor 'a'", "overflows"}); }
  { Spec s = base; s.tensors[1].type = 99;
    add("unknown-tensor-type.gguf", "tensor b has ggml type id 99", s,
        {"tensor 'b'", "unknown ggml type id 99"}); }
  { Spec s = base; s.tensors[1].ne = {31, 2};
    add("ne0-not-block-multiple.gguf", "q8_0 tensor b with ne[0] = 31", s,
        {"tensor 'b'", "not a multiple of the q8_0 block size 32"}); }
  { Spec s = base; s.tensors[1].offset = 72;
    add("offset-misaligned.gguf", "tensor b at offset 72 with alignment 32", s,
        {"tensor 'b'", "not a multiple of the alignment"}); }
  { Spec s = base; s.tensors[1].offset = 4096;
    add("offset-past-eof.gguf", "tensor b at offset 4096, past the end", s,
        {"tensor 'b'", "past the end"}); }
  { Spec s = base; s.tensors[1].offset = ~uint64_t(31);
    add("offset-overflow.gguf", "tensor b at offset 2^64 - 32", s, {"tensor 'b'", "past the end"}); }
  { Spec s = base; s.data_bytes = 100;
    add("data-truncated.gguf", "data section ends inside tensor b", s, {"tensor 'b'", "past the end"}); }
  { Spec s = base; s.tensors[1].offset = 32;
    add("overlapping-tensors.gguf", "tensor b starts inside tensor a", s, {"tensor 'b'", "overlaps tensor 'a'"}); }
  { Spec s = base; s.tensors[1].name = "a";
    add("duplicate-tensor.gguf", "two tensors named a", s, {"tensor 'a'", "duplicate tensor name"}); }
  { Spec s = base; s.alignment = 1; s.data_bytes = 0;
    std::vector<uint8_t> b = build(s);  // ends exactly after the tensor infos
    b.resize(b.size() - 10);
    cases.push_back({"truncated-tensor-infos.gguf", "file cut inside the last tensor info", b,
                     {"tensor 'b'", "truncated"}}); }
  cases.push_back({"empty.gguf", "zero bytes", {}, {"header", "truncated"}});
  return cases;
}

}  // namespace gguf_raw
