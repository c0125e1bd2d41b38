// Quant parity with llama.cpp's ggml (prebuilt libraries, through llama-peer): blocks that
// ggml quantized dequantize to bit-identical floats in ours, for every format both support;
// and tensors of a model file quantized by llama_model_quantize dequantize identically.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "gguf/gguf.h"
#include "quant/dequant.h"
#include "support/subprocess.h"

namespace df {
namespace {

using test::run_command;
using test::TempDir;

void write_bytes(const std::string& path, const void* data, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), std::streamsize(n));
  ASSERT_TRUE(f.good()) << path;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// Bitwise float comparison: -0.0 vs 0.0 or NaN payloads would count as different.
size_t count_bit_differences(const std::vector<float>& a, const std::vector<float>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], 4) != 0;
  return n;
}

class QuantRowParity : public ::testing::TestWithParam<const char*> {};

TEST_P(QuantRowParity, GgmlQuantizedBlocksDequantizeIdentically) {
  const std::string name = GetParam();
  const GgmlType type = *type_from_name(name);
  TempDir dir;
  const int64_t n_per_row = 1024, rows = 24;
  std::mt19937 rng(99);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::vector<float> src(size_t(n_per_row * rows));
  for (size_t i = 0; i < src.size(); ++i) src[i] = gauss(rng) * (i % 97 == 0 ? 8.0f : 1.0f);  // some outliers
  for (int64_t i = 0; i < n_per_row; ++i) src[size_t(i)] = 0.0f;  // an all-zero row
  write_bytes(dir.file("in.f32"), src.data(), src.size() * 4);
  run_command(std::string(DELTAFLASH_LLAMA_PEER) + " quantize-row " + name + " " + dir.file("in.f32") + " " +
              dir.file("q.bin") + " " + std::to_string(n_per_row));
  run_command(std::string(DELTAFLASH_LLAMA_PEER) + " dequant " + name + " " + dir.file("q.bin") + " " +
              dir.file("ref.f32") + " " + std::to_string(src.size()));
  const std::vector<uint8_t> q = read_bytes(dir.file("q.bin"));
  ASSERT_EQ(q.size(), row_size(type, n_per_row) * size_t(rows));
  const std::vector<float> ref = test::read_f32_file(dir.file("ref.f32"));
  std::vector<float> ours(src.size());
  for (int64_t r = 0; r < rows; ++r)
    dequantize_row(type, q.data() + size_t(r) * row_size(type, n_per_row), ours.data() + r * n_per_row, n_per_row);
  EXPECT_EQ(count_bit_differences(ours, ref), 0u);
}

INSTANTIATE_TEST_SUITE_P(Types, QuantRowParity,
                         ::testing::Values("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K", "q5_K",
                                           "q6_K", "iq4_nl", "iq4_xs", "f16", "bf16"));

class ModelQuantParity : public ::testing::TestWithParam<const char*> {};

TEST_P(ModelQuantParity, LlamaModelQuantizeTensorsDequantizeIdentically) {
  TempDir dir;
  const std::string f32 = dir.file("f32.gguf"), q = dir.file("q.gguf");
  run_command(std::string(DELTAFLASH_BIN) + " make-model --arch qwen35 --shape tiny --type f32 --seed 3 -o " + f32);
  run_command(std::string(DELTAFLASH_LLAMA_PEER) + " quantize " + f32 + " " + q + " " + GetParam());
  auto file = gguf::File::open(q);
  int quantized = 0;
  for (const auto& t : file->tensors()) {
    if (t.type == GgmlType::F32) continue;
    ++quantized;
    write_bytes(dir.file("t.bin"), t.data, t.nbytes);
    run_command(std::string(DELTAFLASH_LLAMA_PEER) + " dequant " + type_name(t.type) + " " + dir.file("t.bin") + " " +
                dir.file("t.f32") + " " + std::to_string(t.n_elements()));
    const std::vector<float> ref = test::read_f32_file(dir.file("t.f32"));
    std::vector<float> ours(size_t(t.n_elements()));
    const int64_t row = t.ne[0];
    for (int64_t r = 0; r < t.n_elements() / row; ++r)
      dequantize_row(t.type, t.data + size_t(r) * row_size(t.type, row), ours.data() + r * row, row);
    EXPECT_EQ(count_bit_differences(ours, ref), 0u) << t.name << " (" << type_name(t.type) << ")";
  }
  EXPECT_GT(quantized, 5);
}

INSTANTIATE_TEST_SUITE_P(Ftypes, ModelQuantParity, ::testing::Values("q8_0", "q4_k_m", "q5_k_m", "q6_k", "iq4_xs", "q4_0"));

}  // namespace
}  // namespace df
