// GGUF reader/writer: round trips of every value and tensor kind, getters, writer validation,
// and a corruption suite (every malformed file must give a df::Error, never a crash or success).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>

#include "gguf/gguf.h"
#include "gguf_raw.h"
#include "quant/types.h"
#include "util/error.h"

namespace fs = std::filesystem;
using df::GgmlType;
using df::gguf::File;
using df::gguf::Value;
using df::gguf::ValueType;
using df::gguf::Writer;

namespace {

const fs::path kCorpusDir = fs::path(DELTAFLASH_TEST_DATA) / "corrupt-gguf";
const fs::path kValidDir = fs::path(DELTAFLASH_TEST_DATA) / "valid-gguf";

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

// Deterministic bytes for a tensor, different per tensor.
std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = uint8_t(rng());
  return v;
}

// The error message of parsing `bytes`, or a test failure when it parses or throws something else.
std::string parse_error(const std::vector<uint8_t>& bytes, const std::string& name = "mem.gguf") {
  try {
    File::parse(bytes.data(), bytes.size(), name);
  } catch (const df::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << name << ": threw a non-df::Error: " << e.what();
    return {};
  }
  ADD_FAILURE() << name << ": parsed without error";
  return {};
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const df::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no df::Error thrown";
  return {};
}

class GgufTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A parameterized test's name has a '/' ("Name/3"): flattened, so TearDown removes it all.
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = fs::temp_directory_path() / ("df_test_gguf_" + std::to_string(::getpid()) + "_" + name);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

Value int_value(ValueType t, int64_t i, uint64_t u) {
  Value v;
  v.type = t;
  v.i = i;
  v.u = u;
  return v;
}

Value float_value(ValueType t, double f) {
  Value v;
  v.type = t;
  v.f = f;
  return v;
}

// A writer with one key of every scalar type and every array kind.
Writer writer_with_all_values() {
  Writer w;
  w.set("u8", int_value(ValueType::U8, 0, 200));
  w.set("i8", int_value(ValueType::I8, -100, 0));
  w.set("u16", int_value(ValueType::U16, 0, 60000));
  w.set("i16", int_value(ValueType::I16, -30000, 0));
  w.set("u32", Value::of_u32(4000000000u));
  w.set("i32", Value::of_i32(-2000000000));
  w.set("u64", Value::of_u64((uint64_t(1) << 63) + 5));
  w.set("i64", int_value(ValueType::I64, std::numeric_limits<int64_t>::min(), 0));
  w.set("f32", Value::of_f32(1.5f));
  w.set("f64", float_value(ValueType::F64, 1e300));
  w.set("true", Value::of_bool(true));
  w.set("false", Value::of_bool(false));
  w.set("string", Value::of_string(std::string("h\xc3\xa9llo\0world", 12)));
  w.set("empty_string", Value::of_string(""));
  w.set("a_u8", Value::of_int_array(ValueType::U8, {0, 255}));
  w.set("a_i8", Value::of_int_array(ValueType::I8, {-128, 127}));
  w.set("a_u16", Value::of_int_array(ValueType::U16, {0, 65535}));
  w.set("a_i16", Value::of_int_array(ValueType::I16, {-32768, 32767}));
  w.set("a_u32", Value::of_int_array(ValueType::U32, {0, 4294967295ll}));
  w.set("a_i32", Value::of_int_array(ValueType::I32, {-2147483648ll, 2147483647}));
  w.set("a_u64", Value::of_int_array(ValueType::U64, {0, -1}));  // -1 is 2^64-1 wrapped
  w.set("a_i64", Value::of_int_array(ValueType::I64, {std::numeric_limits<int64_t>::min(), 7}));
  w.set("a_bool", Value::of_int_array(ValueType::BOOL, {1, 0, 1}));
  w.set("a_f32", Value::of_float_array(ValueType::F32, {0.25, -3.0, 1e30}));
  w.set("a_f64", Value::of_float_array(ValueType::F64, {1e-300, -2.5}));
  w.set("a_string", Value::of_string_array({"a", "", std::string(300, 'x'), "\xe4\xb8\xad"}));
  w.set("a_empty_i32", Value::of_int_array(ValueType::I32, {}));
  w.set("a_empty_string", Value::of_string_array({}));
  return w;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Round trips

TEST_F(GgufTest, EveryValueTypeRoundTrips) {
  writer_with_all_values().write(path("v.gguf"));
  const auto f = File::open(path("v.gguf"));
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_TRUE(f->tensors().empty());

  const auto& md = f->metadata();
  ASSERT_EQ(md.size(), 28u);
  EXPECT_EQ(md.front().first, "u8");  // insertion order
  EXPECT_EQ(md.back().first, "a_empty_string");

  EXPECT_EQ(f->find("u8")->type, ValueType::U8);
  EXPECT_EQ(f->find("u8")->u, 200u);
  EXPECT_EQ(f->find("i8")->i, -100);
  EXPECT_EQ(f->find("u16")->u, 60000u);
  EXPECT_EQ(f->find("i16")->i, -30000);
  EXPECT_EQ(f->find("u32")->u, 4000000000u);
  EXPECT_EQ(f->find("i32")->i, -2000000000);
  EXPECT_EQ(f->find("u64")->u, (uint64_t(1) << 63) + 5);
  EXPECT_EQ(f->find("i64")->i, std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f->find("f32")->f, 1.5);
  EXPECT_EQ(f->find("f64")->f, 1e300);
  EXPECT_EQ(f->find("true")->type, ValueType::BOOL);
  EXPECT_TRUE(f->get_bool_or("true", false));
  EXPECT_FALSE(f->get_bool_or("false", true));
  EXPECT_EQ(f->get_string("string"), std::string("h\xc3\xa9llo\0world", 12));
  EXPECT_EQ(f->get_string("empty_string"), "");

  EXPECT_EQ(f->get_int_array("a_u8"), (std::vector<int64_t>{0, 255}));
  EXPECT_EQ(f->get_int_array("a_i8"), (std::vector<int64_t>{-128, 127}));
  EXPECT_EQ(f->get_int_array("a_u16"), (std::vector<int64_t>{0, 65535}));
  EXPECT_EQ(f->get_int_array("a_i16"), (std::vector<int64_t>{-32768, 32767}));
  EXPECT_EQ(f->get_int_array("a_u32"), (std::vector<int64_t>{0, 4294967295ll}));
  EXPECT_EQ(f->get_int_array("a_i32"), (std::vector<int64_t>{-2147483648ll, 2147483647}));
  EXPECT_EQ(f->get_int_array("a_u64"), (std::vector<int64_t>{0, -1}));
  EXPECT_EQ(f->get_int_array("a_i64"),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), 7}));
  EXPECT_EQ(f->get_int_array("a_bool"), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(f->find("a_bool")->elem_type, ValueType::BOOL);
  EXPECT_EQ(f->get_float_array("a_f32"), (std::vector<double>{0.25, -3.0, double(1e30f)}));
  EXPECT_EQ(f->get_float_array("a_f64"), (std::vector<double>{1e-300, -2.5}));
  EXPECT_EQ(f->get_string_array("a_string"),
            (std::vector<std::string>{"a", "", std::string(300, 'x'), "\xe4\xb8\xad"}));
  EXPECT_EQ(f->find("a_empty_i32")->elem_type, ValueType::I32);
  EXPECT_EQ(f->find("a_empty_i32")->array_size(), 0u);
  EXPECT_TRUE(f->get_string_array("a_empty_string").empty());
}

TEST_F(GgufTest, SetReplacesValueAndKeepsPosition) {
  Writer w;
  w.set("first", Value::of_u32(1));
  w.set("second", Value::of_u32(2));
  w.set("first", Value::of_string("one"));
  w.write(path("s.gguf"));
  const auto f = File::open(path("s.gguf"));
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata()[0].first, "first");
  EXPECT_EQ(f->get_string("first"), "one");
}

struct TensorCase {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;
};

const std::vector<TensorCase> kTensorCases = {
    {"f32.vec", GgmlType::F32, {5}},
    {"f16.mat", GgmlType::F16, {3, 4}},
    {"bf16.3d", GgmlType::BF16, {2, 2, 2}},
    {"q4_0", GgmlType::Q4_0, {64, 3}},
    {"q8_0.4d", GgmlType::Q8_0, {32, 2, 3, 2}},
    {"q4_k", GgmlType::Q4_K, {256, 2}},
    {"q6_k", GgmlType::Q6_K, {512}},
    {"iq4_xs", GgmlType::IQ4_XS, {256, 1}},
    {"i32", GgmlType::I32, {7}},
};

class GgufAlignmentTest : public GgufTest, public ::testing::WithParamInterface<size_t> {};

TEST_P(GgufAlignmentTest, TensorsRoundTripAtEveryAlignment) {
  const size_t alignment = GetParam();
  Writer w;
  w.set("general.architecture", Value::of_string("test"));
  for (size_t k = 0; k < kTensorCases.size(); ++k) {
    const TensorCase& c = kTensorCases[k];
    size_t rows = 1;
    for (size_t d = 1; d < c.ne.size(); ++d) rows *= size_t(c.ne[d]);
    const size_t nbytes = df::row_size(c.type, c.ne[0]) * rows;
    w.add_tensor(c.name, c.type, c.ne, [nbytes, k](uint8_t* dst) {
      const auto p = pattern(nbytes, uint32_t(k));
      std::memcpy(dst, p.data(), nbytes);
    });
  }
  w.write(path("t.gguf"), alignment);

  const auto mapped = File::open(path("t.gguf"));
  const auto bytes = read_bytes(path("t.gguf"));
  const auto f = File::parse(bytes.data(), bytes.size(), "t.gguf");  // pointers into `bytes`
  EXPECT_EQ(f->alignment(), alignment);
  EXPECT_EQ(f->has("general.alignment"), alignment != 32);
  ASSERT_EQ(f->tensors().size(), kTensorCases.size());
  const size_t data_start = size_t(f->tensors()[0].data - bytes.data());
  EXPECT_EQ(data_start % alignment, 0u);
  for (size_t k = 0; k < kTensorCases.size(); ++k) {
    const TensorCase& c = kTensorCases[k];
    const auto& t = f->tensor(c.name);
    EXPECT_EQ(&t, &f->tensors()[k]);  // file order
    EXPECT_EQ(t.type, c.type);
    EXPECT_EQ(t.n_dims, int(c.ne.size()));
    for (size_t d = 0; d < 4; ++d) EXPECT_EQ(t.ne[d], d < c.ne.size() ? c.ne[d] : 1);
    EXPECT_EQ(t.offset % alignment, 0u);
    EXPECT_EQ(size_t(t.data - bytes.data()), data_start + t.offset);
    const auto expect = pattern(t.nbytes, uint32_t(k));
    size_t rows = 1;
    for (size_t d = 1; d < c.ne.size(); ++d) rows *= size_t(c.ne[d]);
    ASSERT_EQ(t.nbytes, df::row_size(c.type, c.ne[0]) * rows);
    EXPECT_EQ(std::memcmp(t.data, expect.data(), t.nbytes), 0) << c.name;
    EXPECT_EQ(std::memcmp(mapped->tensors()[k].data, expect.data(), t.nbytes), 0) << c.name;
  }
  EXPECT_EQ(f->tensor("f16.mat").shape_string(), "[3, 4]");
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufAlignmentTest, ::testing::Values(1, 8, 32, 64, 4096));

TEST_F(GgufTest, Version2FilesAreRead) {
  writer_with_all_values().write(path("v2.gguf"));
  auto bytes = read_bytes(path("v2.gguf"));
  bytes[4] = 2;  // v2 has the same layout as v3
  const auto f = File::parse(bytes.data(), bytes.size(), "v2.gguf");
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->get_u32("u32"), 4000000000u);
}

TEST_F(GgufTest, ProgressReportsEveryByte) {
  Writer w;
  w.add_tensor("x", GgmlType::F32, {100}, [](uint8_t* dst) { std::memset(dst, 1, 400); });
  w.add_tensor("y", GgmlType::F32, {3}, [](uint8_t* dst) { std::memset(dst, 2, 12); });
  std::vector<std::pair<size_t, size_t>> calls;
  w.write(path("p.gguf"), 64, [&](size_t done, size_t total) { calls.emplace_back(done, total); });
  ASSERT_EQ(calls.size(), 3u);  // header, then one per tensor
  for (size_t k = 1; k < calls.size(); ++k) EXPECT_GT(calls[k].first, calls[k - 1].first);
  EXPECT_EQ(calls.back().first, calls.back().second);
  EXPECT_EQ(calls.back().second, fs::file_size(path("p.gguf")));
}

TEST_F(GgufTest, FailedWriteLeavesNoFileAndKeepsTheOldOne) {
  write_bytes(path("old.gguf"), {1, 2, 3});
  Writer w;
  w.add_tensor("x", GgmlType::F32, {4}, [](uint8_t*) { throw df::Error("fill failed"); });
  EXPECT_THROW(w.write(path("old.gguf")), df::Error);
  EXPECT_EQ(read_bytes(path("old.gguf")), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_FALSE(fs::exists(path("old.gguf.tmp")));
}

TEST_F(GgufTest, WriterRejectsInvalidInput) {
  const auto noop = [](uint8_t*) {};
  const auto rejects = [&](Writer& w, const std::string& expect, size_t alignment = 32) {
    const std::string msg = error_of([&] { w.write(path("bad.gguf"), alignment); });
    EXPECT_NE(msg.find(expect), std::string::npos) << msg;
    EXPECT_FALSE(fs::exists(path("bad.gguf")));
    EXPECT_FALSE(fs::exists(path("bad.gguf.tmp")));
  };
  { Writer w; w.add_tensor("t", GgmlType::F32, {4}, noop); w.add_tensor("t", GgmlType::F32, {4}, noop);
    rejects(w, "tensor 't': duplicate tensor name"); }
  { Writer w; w.add_tensor("q", GgmlType::Q8_0, {33}, noop);
    rejects(w, "tensor 'q': ne[0] = 33 is not a multiple of the q8_0 block size 32"); }
  { Writer w; w.add_tensor("t", GgmlType::F32, {}, noop); rejects(w, "0 dimensions"); }
  { Writer w; w.add_tensor("t", GgmlType::F32, {1, 1, 1, 1, 1}, noop); rejects(w, "5 dimensions"); }
  { Writer w; w.add_tensor("t", GgmlType::F32, {4, 0}, noop); rejects(w, "ne[1] is 0"); }
  { Writer w; w.add_tensor("t", GgmlType(99), {4}, noop); rejects(w, "unknown ggml type id 99"); }
  { Writer w; w.add_tensor("", GgmlType::F32, {4}, noop); rejects(w, "empty tensor name"); }
  { Writer w; rejects(w, "alignment 0", 0); }
  { Writer w; rejects(w, "alignment 3", 3); }
  { Writer w; w.set("general.alignment", Value::of_u32(64)); rejects(w, "general.alignment", 32); }
  { Writer w; w.set("k", int_value(ValueType::U8, 0, 300)); rejects(w, "key 'k': 300 does not fit in u8"); }
  { Writer w; w.set("k", Value::of_int_array(ValueType::I16, {40000})); rejects(w, "does not fit in i16"); }
  { Writer w; w.set("k", Value::of_int_array(ValueType::ARRAY, {})); rejects(w, "arrays of arrays"); }
  { Writer w; Value v = Value::of_int_array(ValueType::STRING, {1}); w.set("k", v);
    rejects(w, "wrong storage"); }
  { Writer w; Value v; v.type = ValueType(42); w.set("k", v); rejects(w, "unknown value type id 42"); }
}

TEST_F(GgufTest, WriterAcceptsMatchingAlignmentKey) {
  Writer w;
  w.set("general.alignment", Value::of_u32(64));
  w.add_tensor("t", GgmlType::F32, {3}, [](uint8_t* d) { std::memset(d, 0, 12); });
  w.write(path("a.gguf"), 64);
  const auto f = File::open(path("a.gguf"));
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->metadata().size(), 1u);
}

// ---------------------------------------------------------------------------------------------
// Getters

TEST_F(GgufTest, GettersConvertAndCheckRanges) {
  Writer w;
  w.set("u8", int_value(ValueType::U8, 0, 7));
  w.set("i32", Value::of_i32(-5));
  w.set("i32pos", Value::of_i32(12));
  w.set("u64big", Value::of_u64(uint64_t(1) << 40));
  w.set("u64huge", Value::of_u64(uint64_t(1) << 63));
  w.set("f32", Value::of_f32(0.5f));
  w.set("f64", float_value(ValueType::F64, 0.25));
  w.set("f64big", float_value(ValueType::F64, 1e300));
  w.set("s", Value::of_string("text"));
  w.set("b", Value::of_bool(true));
  w.set("ints", Value::of_int_array(ValueType::I32, {1, 2}));
  w.write(path("g.gguf"));
  const auto f = File::open(path("g.gguf"));
  const std::string file = path("g.gguf");

  EXPECT_EQ(f->get_u32("u8"), 7u);
  EXPECT_EQ(f->get_u32("i32pos"), 12u);
  EXPECT_EQ(f->get_i64("i32"), -5);
  EXPECT_EQ(f->get_i64("u64big"), int64_t(1) << 40);
  EXPECT_EQ(f->get_u32_or("absent", 9), 9u);
  EXPECT_EQ(f->get_f32("f32"), 0.5f);
  EXPECT_EQ(f->get_f32("f64"), 0.25f);
  EXPECT_EQ(f->get_f32_or("absent", 2.0f), 2.0f);
  EXPECT_EQ(f->get_string_or("absent", "x"), "x");
  EXPECT_EQ(f->get_string_or("s", "x"), "text");

  EXPECT_EQ(error_of([&] { f->get_u32("i32"); }), file + ": key 'i32': value -5 does not fit in u32");
  EXPECT_EQ(error_of([&] { f->get_u32("u64big"); }),
            file + ": key 'u64big': value 1099511627776 does not fit in u32");
  EXPECT_EQ(error_of([&] { f->get_i64("u64huge"); }),
            file + ": key 'u64huge': value 9223372036854775808 does not fit in i64");
  EXPECT_EQ(error_of([&] { f->get_u32("missing.key"); }), file + ": key 'missing.key': missing key");
  EXPECT_EQ(error_of([&] { f->get_u32("s"); }), file + ": key 's': has type string, expected an integer");
  EXPECT_EQ(error_of([&] { f->get_u32("b"); }), file + ": key 'b': has type bool, expected an integer");
  EXPECT_EQ(error_of([&] { f->get_u32_or("s", 1); }), file + ": key 's': has type string, expected an integer");
  EXPECT_EQ(error_of([&] { f->get_f32("u8"); }), file + ": key 'u8': has type u8, expected f32 or f64");
  EXPECT_NE(error_of([&] { f->get_f32("f64big"); }).find("does not fit in f32"), std::string::npos);
  EXPECT_EQ(error_of([&] { f->get_bool_or("u8", false); }), file + ": key 'u8': has type u8, expected bool");
  EXPECT_EQ(error_of([&] { f->get_string("u8"); }), file + ": key 'u8': has type u8, expected string");
  EXPECT_EQ(error_of([&] { f->get_string_array("ints"); }),
            file + ": key 'ints': has type array[i32], expected array[string]");
  EXPECT_EQ(error_of([&] { f->get_float_array("ints"); }),
            file + ": key 'ints': has type array[i32], expected a float array");
  EXPECT_EQ(error_of([&] { f->get_int_array("s"); }),
            file + ": key 's': has type string, expected an integer array");
  EXPECT_EQ(error_of([&] { f->tensor("nope"); }), file + ": tensor 'nope': missing tensor");
  EXPECT_EQ(f->find_tensor("nope"), nullptr);
}

TEST_F(GgufTest, OpenReportsMissingFile) {
  const std::string msg = error_of([&] { File::open(path("does-not-exist.gguf")); });
  EXPECT_NE(msg.find("does-not-exist.gguf"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Corruption

TEST(GgufCorrupt, EveryCorruptCaseIsRejectedWithAPreciseMessage) {
  const auto cases = gguf_raw::corrupt_cases();
  ASSERT_GT(cases.size(), 25u);
  for (const auto& c : cases) {
    const std::string msg = parse_error(c.bytes, c.file);
    EXPECT_EQ(msg.rfind(c.file + ": ", 0), 0u) << c.file << ": " << msg;
    for (const auto& e : c.expect) EXPECT_NE(msg.find(e), std::string::npos) << c.file << ": " << msg;
  }
}

TEST(GgufCorrupt, TheBaseOfTheCorruptCasesIsValid) {
  // Otherwise the cases above could be rejected for the wrong reason.
  const auto bytes = gguf_raw::build(gguf_raw::valid_spec());
  const auto f = File::parse(bytes.data(), bytes.size(), "base.gguf");
  EXPECT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->get_string_array("test.tokens").size(), 3u);
  EXPECT_EQ(f->tensor("b").nbytes, 68u);
}

TEST(GgufCorrupt, NamesInMessagesAreEscaped) {
  gguf_raw::Spec s = gguf_raw::valid_spec();
  const std::string key = std::string("k\x01\xff\\\xc3\xa9", 6) + std::string(200, 'z');
  s.kvs.push_back(gguf_raw::kv_u32(key, 1));
  s.kvs.push_back(gguf_raw::kv_u32(key, 2));
  const std::string msg = parse_error(gguf_raw::build(s));
  // Control and invalid bytes escaped, valid UTF-8 kept, long names cut.
  EXPECT_NE(msg.find("key 'k\\x01\\xff\\x5c\xc3\xa9zzz"), std::string::npos) << msg;
  EXPECT_NE(msg.find("...(206 bytes)': duplicate key"), std::string::npos) << msg;
}

// A valid file from the real writer with every value kind and several tensors.
struct RichFile {
  std::vector<uint8_t> bytes;
  size_t data_start;  // end of the header and its padding
  size_t data_end;    // end of the last tensor's data (only padding follows)
};

RichFile rich_valid_file(const std::string& dir) {
  Writer w = writer_with_all_values();
  w.add_tensor("t0", GgmlType::F32, {16, 3}, [](uint8_t* d) { std::memset(d, 3, 192); });
  w.add_tensor("t1", GgmlType::Q8_0, {64, 2}, [](uint8_t* d) { std::memset(d, 4, 136); });
  w.add_tensor("t2", GgmlType::F16, {5}, [](uint8_t* d) { std::memset(d, 5, 10); });
  const std::string p = dir + "/rich.gguf";
  w.write(p);
  RichFile r{read_bytes(p), 0, 0};
  const auto f = File::parse(r.bytes.data(), r.bytes.size(), "rich.gguf");
  const auto& t0 = f->tensors()[0];
  r.data_start = size_t(t0.data - r.bytes.data()) - t0.offset;
  for (const auto& t : f->tensors()) {
    r.data_end = std::max(r.data_end, size_t(t.data - r.bytes.data()) + t.nbytes);
  }
  return r;
}

TEST_F(GgufTest, EveryTruncationIsRejected) {
  const RichFile r = rich_valid_file(dir_.string());
  // Every cut inside the header (and its padding), then random cuts inside the tensor data.
  std::vector<size_t> cuts;
  for (size_t n = 0; n <= r.data_start; ++n) cuts.push_back(n);
  std::mt19937 rng(1);
  for (int k = 0; k < 200; ++k) cuts.push_back(r.data_start + rng() % (r.data_end - r.data_start));
  for (size_t n : cuts) {
    // A separate allocation of exactly n bytes so AddressSanitizer sees any read past the end.
    std::vector<uint8_t> cut(r.bytes.begin(), r.bytes.begin() + long(n));
    cut.shrink_to_fit();
    if (parse_error(cut, "cut.gguf").empty()) ADD_FAILURE() << "cut at " << n << " of " << r.bytes.size();
  }
}

TEST_F(GgufTest, RandomByteFlipsNeverCrash) {
  const RichFile r = rich_valid_file(dir_.string());
  std::mt19937 rng(7);
  int rejected = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<uint8_t> m = r.bytes;
    const int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) m[rng() % r.data_start] ^= uint8_t(1u << (rng() % 8));
    try {
      File::parse(m.data(), m.size(), "flip.gguf");
    } catch (const df::Error&) {
      ++rejected;
    }  // anything else escapes and fails the test
  }
  EXPECT_GT(rejected, 1000);  // many flips hit lengths, types or counts
}

TEST_F(GgufTest, ParsingALargeVocabularyIsFast) {
  std::vector<std::string> tokens(248320), merges(250000);
  // Mostly short strings as in real vocabularies, every 8th one past the small-string buffer.
  for (size_t k = 0; k < tokens.size(); ++k) {
    tokens[k] = "tok" + std::to_string(k * 2654435761u % 1000003) + (k % 8 ? "" : "_long_token_text");
  }
  for (size_t k = 0; k < merges.size(); ++k) {
    merges[k] = "\xc4\xa0t" + std::to_string(k) + (k % 8 ? " ab" : " abcdefghijklmnop");
  }
  Writer w;
  w.set("tokenizer.ggml.tokens", Value::of_string_array(tokens));
  w.set("tokenizer.ggml.merges", Value::of_string_array(merges));
  w.set("tokenizer.ggml.token_type", Value::of_int_array(ValueType::I32, std::vector<int64_t>(248320, 1)));
  w.write(path("vocab.gguf"));

  double best_ms = 1e9;
  for (int k = 0; k < 3; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto f = File::open(path("vocab.gguf"));
    const auto t1 = std::chrono::steady_clock::now();
    best_ms = std::min(best_ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
    ASSERT_EQ(f->get_string_array("tokenizer.ggml.tokens"), tokens);
    ASSERT_EQ(f->get_string_array("tokenizer.ggml.merges").back(), merges.back());
  }
  std::printf("parse of 248,320 tokens + 250,000 merges + 248,320 i32: %.1f ms\n", best_ms);
  EXPECT_LT(best_ms, 1000.0);  // loose: shared CPUs and sanitizer builds; typical is tens of ms
}

// ---------------------------------------------------------------------------------------------
// Committed corpus (tests/data/corrupt-gguf), generated from gguf_raw::corrupt_cases().

TEST(GgufCorpus, EveryCorpusFileIsRejected) {
  ASSERT_TRUE(fs::is_directory(kCorpusDir)) << kCorpusDir;
  int n = 0;
  for (const auto& entry : fs::directory_iterator(kCorpusDir)) {
    if (entry.path().extension() != ".gguf") continue;
    ++n;
    const std::string p = entry.path().string();
    const std::string msg = error_of([&] { File::open(p); });
    EXPECT_EQ(msg.rfind(p + ": ", 0), 0u) << msg;
  }
  EXPECT_EQ(n, int(gguf_raw::corrupt_cases().size()));
}

TEST(GgufCorpus, CorpusMatchesTheGenerator) {
  const std::string readme = [] {
    const auto b = read_bytes(kCorpusDir / "README.md");
    return std::string(b.begin(), b.end());
  }();
  for (const auto& c : gguf_raw::corrupt_cases()) {
    EXPECT_EQ(read_bytes(kCorpusDir / c.file), c.bytes)
        << c.file << " differs from the generator; rerun GgufCorpus.DISABLED_Regenerate";
    EXPECT_NE(readme.find("`" + c.file + "`"), std::string::npos) << c.file << " not in README.md";
  }
  EXPECT_EQ(read_bytes(kValidDir / "small.gguf"), gguf_raw::build(gguf_raw::valid_spec()));
}

TEST(GgufCorpus, ValidSeedParses) {
  const auto f = File::open((kValidDir / "small.gguf").string());
  EXPECT_EQ(f->tensors().size(), 2u);
}

// Run with --gtest_also_run_disabled_tests --gtest_filter=GgufCorpus.DISABLED_Regenerate
// after changing gguf_raw.h.
TEST(GgufCorpus, DISABLED_Regenerate) {
  fs::create_directories(kCorpusDir);
  for (const auto& entry : fs::directory_iterator(kCorpusDir)) {
    if (entry.path().extension() == ".gguf") fs::remove(entry.path());
  }
  std::string readme =
      "# Corrupt GGUF files\n\n"
      "Each file must be rejected by `df::gguf::File` with a `df::Error`. They are generated by\n"
      "`tests/gguf_raw.h` (run `test_gguf --gtest_also_run_disabled_tests "
      "--gtest_filter=GgufCorpus.DISABLED_Regenerate`)\n"
      "and serve as the seed corpus of `fuzz/gguf_fuzz.cpp`, together with\n"
      "`tests/data/valid-gguf/small.gguf` (the valid file they are mutated from).\n\n";
  for (const auto& c : gguf_raw::corrupt_cases()) {
    write_bytes(kCorpusDir / c.file, c.bytes);
    readme += "- `" + c.file + "`: " + c.what + "\n";
  }
  std::ofstream(kCorpusDir / "README.md") << readme;
  fs::create_directories(kValidDir);
  write_bytes(kValidDir / "small.gguf", gguf_raw::build(gguf_raw::valid_spec()));
}
