// Binding GGUF tensors to backend weights, shared by the target and the drafter: every tensor is
// checked for presence, type and exact shape before use, with errors naming the file and tensor.
#pragma once
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gguf/gguf.h"

namespace df {

class Binder {
 public:
  // Small tensors converted to f32 are allocated on `be` and recorded in `owned` (caller frees).
  Binder(const gguf::File& f, Backend& be, std::vector<void*>& owned) : f_(f), be_(be), owned_(owned) {}

  const gguf::TensorInfo& find(const std::string& name, const std::vector<int64_t>& ne) const;
  // A matrix of the products (Backend::upload_matrix: maybe in a backend's own layout).
  Weight matrix(const std::string& name, int64_t n_in, int64_t n_out) const;
  // An embedding table (rows read by embed(), and maybe products too: GGUF rows, weight_data).
  Weight embedding(const std::string& name, int64_t n_in, int64_t n_out) const;
  bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }
  // Small tensors (norms, gates, conv kernels) are converted to f32 once.
  const float* vector(const std::string& name, const std::vector<int64_t>& ne) const;

 private:
  Weight host_weight(const std::string& name, int64_t n_in, int64_t n_out) const;  // data: the mapped bytes

  const gguf::File& f_;
  Backend& be_;
  std::vector<void*>& owned_;
};

}  // namespace df
