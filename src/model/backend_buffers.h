// Scratch buffers on a backend, released together: the activations a model's forward reuses.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "backend/backend.h"

namespace df {

class BackendBuffers {
 public:
  explicit BackendBuffers(Backend& be) : be_(be) {}
  ~BackendBuffers() {
    for (void* p : bufs_) be_.release(p);
  }
  BackendBuffers(const BackendBuffers&) = delete;
  BackendBuffers& operator=(const BackendBuffers&) = delete;

  // n elements of T (at least one), zero-initialised, owned until destruction or release().
  template <typename T>
  T* make(size_t n) {
    void* p = be_.alloc(std::max<size_t>(n, 1) * sizeof(T));
    bufs_.push_back(p);
    return static_cast<T*>(p);
  }
  void release(void* p) {
    const auto it = std::find(bufs_.begin(), bufs_.end(), p);
    if (it == bufs_.end()) return;
    be_.release(p);
    bufs_.erase(it);
  }

 private:
  Backend& be_;
  std::vector<void*> bufs_;
};

}  // namespace df
