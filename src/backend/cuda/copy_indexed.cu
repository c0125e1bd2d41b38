// copy_2d_indexed: copy_2d whose source row offset is read from device memory when the kernel
// runs (Backend::copy_2d_indexed). A speculative commit copies the kept row's checkpoint this way,
// so its step launches the same kernel with the same arguments for every kept count and one CUDA
// graph serves them all. 16-byte words where every address and length allows, else 4-byte words,
// else bytes; rows spread over grid.y, each row's words over grid.x.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace df::cuda {

namespace {

constexpr int kThreads = 256;

template <class Word>
__global__ void __launch_bounds__(kThreads)
    copy_2d_indexed_k(unsigned char* __restrict__ dst, size_t dst_pitch, const unsigned char* __restrict__ src,
                      size_t src_pitch, size_t words, int rows, const int32_t* __restrict__ index,
                      size_t index_bytes) {
  pdl_wait();
  pdl_trigger();
  const unsigned char* from = src + size_t(*index) * index_bytes;
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    const Word* s = reinterpret_cast<const Word*>(from + size_t(r) * src_pitch);
    Word* d = reinterpret_cast<Word*>(dst + size_t(r) * dst_pitch);
    for (size_t i = size_t(blockIdx.x) * kThreads + threadIdx.x; i < words; i += size_t(gridDim.x) * kThreads)
      d[i] = s[i];
  }
}

template <class Word>
void launch_words(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, int rows,
                  const int32_t* index, size_t index_bytes, cudaStream_t s) {
  const size_t words = row_bytes / sizeof(Word);
  const unsigned x = unsigned(std::min<size_t>((words + kThreads - 1) / kThreads, 1024));
  const unsigned y = unsigned(std::min(rows, 65535));
  launch(copy_2d_indexed_k<Word>, dim3(x, y), kThreads, 0, s, static_cast<unsigned char*>(dst), dst_pitch,
         static_cast<const unsigned char*>(src), src_pitch, words, rows, index, index_bytes);
}

// Whether every address the copy forms is a multiple of `a` (the index's multiple included).
bool aligned(const void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
             size_t index_bytes, size_t a) {
  return reinterpret_cast<uintptr_t>(dst) % a == 0 && reinterpret_cast<uintptr_t>(src) % a == 0 && dst_pitch % a == 0 &&
         src_pitch % a == 0 && row_bytes % a == 0 && index_bytes % a == 0;
}

}  // namespace

void copy_2d_indexed(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, int rows,
                     const int32_t* index, size_t index_bytes, cudaStream_t s) {
  if (rows <= 0 || row_bytes == 0) return;
  if (aligned(dst, dst_pitch, src, src_pitch, row_bytes, index_bytes, 16))
    launch_words<uint4>(dst, dst_pitch, src, src_pitch, row_bytes, rows, index, index_bytes, s);
  else if (aligned(dst, dst_pitch, src, src_pitch, row_bytes, index_bytes, 4))
    launch_words<uint32_t>(dst, dst_pitch, src, src_pitch, row_bytes, rows, index, index_bytes, s);
  else
    launch_words<unsigned char>(dst, dst_pitch, src, src_pitch, row_bytes, rows, index, index_bytes, s);
}

}  // namespace df::cuda
