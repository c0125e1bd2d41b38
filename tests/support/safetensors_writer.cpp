#include "support/safetensors_writer.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>

namespace df::test {

std::string safetensors_file(const std::vector<StEntry>& entries) {
  nlohmann::json header = nlohmann::json::object();
  std::string blob;
  for (const StEntry& e : entries) {
    header[e.name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {blob.size(), blob.size() + e.bytes.size()}}};
    blob += e.bytes;
  }
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  std::string out(8, '\0');
  const uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);
  return out + h + blob;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string f32_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

}  // namespace df::test
