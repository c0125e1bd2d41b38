// Memory management of the CPU backend: plain host memory.
#include "backend/cpu/cpu_backend.h"

#include <cstdlib>
#include <cstring>

#include "util/error.h"

namespace df {

void* CpuBackend::alloc(size_t bytes) {
  // 64-byte alignment keeps AVX-512 loads on one cache line.
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (p == nullptr) fail("out of host memory allocating {} bytes", bytes);
  std::memset(p, 0, bytes);
  return p;
}

void CpuBackend::release(void* p) { std::free(p); }
void CpuBackend::upload(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::download(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::copy(void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }

void CpuBackend::copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                         int rows) {
  for (int r = 0; r < rows; ++r)
    std::memcpy(static_cast<char*>(dst) + size_t(r) * dst_pitch, static_cast<const char*>(src) + size_t(r) * src_pitch,
                row_bytes);
}

void CpuBackend::copy_2d_indexed(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                                 int rows, const int32_t* index, size_t index_bytes) {
  copy_2d(dst, dst_pitch, static_cast<const char*>(src) + size_t(*index) * index_bytes, src_pitch, row_bytes, rows);
}

std::unique_ptr<Backend> make_cpu_backend(int n_threads) { return std::make_unique<CpuBackend>(n_threads); }

}  // namespace df
