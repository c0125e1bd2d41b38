// Writing small safetensors checkpoints in tests (the converter's inputs).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace df::test {

struct StEntry {
  std::string name;
  std::string dtype;            // "F32", "F16", "BF16", ...
  std::vector<int64_t> shape;   // outermost first
  std::string bytes;            // raw little-endian data
};

// A whole safetensors file from entries, in order.
std::string safetensors_file(const std::vector<StEntry>& entries);
void write_file(const std::string& path, const std::string& bytes);
std::string f32_bytes(const std::vector<float>& v);

}  // namespace df::test
