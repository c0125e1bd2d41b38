// The order top_k_rows sorts by, shared by the CPU and CUDA backends so both pick the same
// candidates: a float's order key, an unsigned integer that compares like the value (+0 and -0
// equal, every NaN below -inf), then the lower id on equal keys (Sampler's by_logit order).
#pragma once
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define DF_TOPK_HD __host__ __device__ __forceinline__
#else
#define DF_TOPK_HD inline
#endif

namespace df {

// The most candidates top_k_rows returns per row: the largest top_k the device path serves
// (llama.cpp's default is 40; 256 covers every sampler setting seen in practice).
constexpr int kMaxDeviceTopK = 256;

// Keys of numbers are >= order_key(-inf) = 0x007fffff; NaN gets 1, so 0 stays free as a
// "no candidate" sentinel below everything (the CUDA merge pads short lists with it).
constexpr uint32_t kTopKNanKey = 1;

DF_TOPK_HD uint32_t top_k_key_of_bits(uint32_t b) {
  if ((b & 0x7fffffffu) > 0x7f800000u) return kTopKNanKey;  // NaN (tested on bits: fast-math safe)
  if ((b & 0x7fffffffu) == 0) return 0x80000000u;          // -0 sorts as +0
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);        // negatives reversed below positives
}

#ifndef __CUDA_ARCH__
inline uint32_t top_k_key(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return top_k_key_of_bits(b);
}
#endif

}  // namespace df
