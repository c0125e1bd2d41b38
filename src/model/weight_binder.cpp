#include "model/weight_binder.h"

#include "quant/dequant.h"
#include "util/error.h"

namespace df {

namespace {
std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}
}  // namespace

const gguf::TensorInfo& Binder::find(const std::string& name, const std::vector<int64_t>& ne) const {
  const gguf::TensorInfo* t = f_.find_tensor(name);
  if (t == nullptr) fail("{}: missing tensor '{}' (expected shape {})", f_.path(), name, shape_str(ne));
  bool ok = true;
  for (size_t i = 0; i < ne.size(); ++i) ok = ok && t->ne[i] == ne[i];
  for (size_t i = ne.size(); i < 4; ++i) ok = ok && t->ne[i] == 1;
  if (!ok) fail("{}: tensor '{}' has shape {}, expected {}", f_.path(), name, t->shape_string(), shape_str(ne));
  if (!type_traits(t->type).supported)
    fail("{}: tensor '{}' has type {}, which deltaflash cannot compute with", f_.path(), name, type_name(t->type));
  return *t;
}

Weight Binder::host_weight(const std::string& name, int64_t n_in, int64_t n_out) const {
  const gguf::TensorInfo& t = find(name, {n_in, n_out});
  Weight w;
  w.type = t.type;
  w.n_in = n_in;
  w.n_out = n_out;
  w.row_bytes = row_size(t.type, n_in);
  w.data = t.data;
  return w;
}

Weight Binder::matrix(const std::string& name, int64_t n_in, int64_t n_out) const {
  return be_.upload_matrix(host_weight(name, n_in, n_out));
}

Weight Binder::embedding(const std::string& name, int64_t n_in, int64_t n_out) const {
  Weight w = host_weight(name, n_in, n_out);
  w.data = be_.weight_data(w.data, w.row_bytes * size_t(n_out));
  return w;
}

const float* Binder::vector(const std::string& name, const std::vector<int64_t>& ne) const {
  const gguf::TensorInfo& t = find(name, ne);
  std::vector<float> host(size_t(t.n_elements()));
  const int64_t row = t.ne[0];
  const size_t rb = row_size(t.type, row);
  for (int64_t r = 0; r < t.n_elements() / row; ++r) dequantize_row(t.type, t.data + r * rb, host.data() + r * row, row);
  void* dev = be_.alloc(host.size() * sizeof(float));
  be_.upload(dev, host.data(), host.size() * sizeof(float));
  owned_.push_back(dev);
  return static_cast<const float*>(dev);
}

}  // namespace df
