// Read-only access to Hugging Face safetensors checkpoints: one file, or the shards listed by
// model.safetensors.index.json. Files are memory-mapped; the header (8-byte little-endian length,
// then JSON {name: {dtype, shape, data_offsets}}) is validated completely on open, so a corrupt
// or truncated file is a df::Error naming the file and tensor, never an out-of-bounds read.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace df {
class MappedFile;
}

namespace df::convert {

enum class StDtype { BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64 };
const char* dtype_name(StDtype t);  // as the header spells it: "BF16"
size_t dtype_size(StDtype t);       // bytes per element
bool is_float_readable(StDtype t);  // F16, BF16, F32, F64: what read_as_f32 converts

struct StTensor {
  std::string name;
  StDtype dtype = StDtype::F32;
  std::vector<int64_t> shape;  // outermost first, as PyTorch prints it; the last dim is contiguous
  const uint8_t* data = nullptr;  // into the mapping; not aligned in general
  size_t nbytes = 0;
  std::string file;            // the file it lives in, for messages

  int64_t n_elements() const;
  std::string shape_string() const;  // "[64, 1, 4]"
};

// Converts elements [first, first + n) of t to float. Throws df::Error for dtypes other than
// F16, BF16, F32, F64, naming the tensor.
void read_as_f32(const StTensor& t, int64_t first, int64_t n, float* dst);

class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  // Parses a buffer the caller keeps alive (tests). `name` is used in messages.
  static std::unique_ptr<SafetensorsFile> parse(const uint8_t* data, size_t size, const std::string& name);
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const std::vector<StTensor>& tensors() const { return tensors_; }  // in data-offset order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }  // "__metadata__"

 private:
  SafetensorsFile() = default;
  void parse_all(const uint8_t* data, size_t size);

  std::string path_;
  std::unique_ptr<MappedFile> mapping_;
  std::vector<StTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Every tensor of a checkpoint directory: model.safetensors.index.json (sharded; each weight
// must be in the shard its weight_map names), else model.safetensors, else all *.safetensors.
class Checkpoint {
 public:
  static std::unique_ptr<Checkpoint> open(const std::string& dir);
  ~Checkpoint();

  const std::vector<const StTensor*>& tensors() const { return order_; }
  const StTensor* find(std::string_view name) const;
  const std::vector<std::string>& files() const { return files_; }

 private:
  Checkpoint() = default;
  void add(std::unique_ptr<SafetensorsFile> f);

  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::vector<const StTensor*> order_;
  std::map<std::string, const StTensor*, std::less<>> by_name_;
  std::vector<std::string> files_;
};

}  // namespace df::convert
