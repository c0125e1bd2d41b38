// Device helpers shared by the CUDA kernel files: warp/block reductions, f16/bf16 loads and
// stores, the activation functions (with the CPU backend's formulas, in fp32).
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace df::cuda {

constexpr int kWarp = 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, n_warps = blockDim.x / kWarp;
  v = warp_sum(v);
  __syncthreads();  // part[] may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  v = lane < n_warps ? part[lane] : 0.0f;
  return warp_sum(v);
}

// IEEE half and bfloat16 bits -> float (both exact).
__device__ __forceinline__ float half_bits_to_float(uint16_t b) { return __half2float(__ushort_as_half(b)); }
__device__ __forceinline__ float bf16_bits_to_float(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }

// KV cache element access: float (exact) or f16 storage (round to nearest even, like util/half.h).
__device__ __forceinline__ float kv_load(const float* p) { return *p; }
__device__ __forceinline__ float kv_load(const uint16_t* p) { return half_bits_to_float(*p); }
__device__ __forceinline__ void kv_put(float* p, float x) { *p = x; }
__device__ __forceinline__ void kv_put(uint16_t* p, float x) { *p = __half_as_ushort(__float2half_rn(x)); }

// Accurate expf (not __expf): these feed outputs compared against the CPU to fp32 round-off.
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Programmatic dependent launch (sm_90): every kernel is launched with launch() below, so the
// next kernel of a stream (or of a captured graph) is scheduled while this one still runs,
// hiding the launch and ramp-up gap between the ~1,000 dependent kernels of a decode step.
// The rule that keeps this correct: a kernel calls pdl_wait() before it reads anything an
// earlier kernel writes, and before it writes anything (an earlier kernel may still read it).
// pdl_wait() returns once the previous kernel has completed and its writes are visible (so, by
// induction, every earlier kernel's); pdl_trigger() lets the next kernel be scheduled once all
// of this kernel's blocks have called it. Kernels call pdl_wait(); pdl_trigger(); first, so at
// most one kernel waits ahead; the matmul kernels trigger before they wait (their successor is
// small and starts at once when they end). Measured on the H200 (27B-shaped decode, demo
// target): this order 96.6 / 2420 tok/s; without the attribute 93.0 / 2160; every kernel
// triggering first 95.4 / 2320; plus an L2 prefetch of each matmul block's weights before its
// pdl_wait() 90.3 / 2360 (the prefetch costs more than it hides). Both are no-ops without a
// programmatic dependency (the first kernel after a copy, or a plain launch).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// kernel<<<grid, block, shared, s>>>(args...) with programmatic stream serialization allowed
// (see pdl_wait). A launch error is left for cudaGetLastError, as <<<>>> leaves it.
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t s, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = shared;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  (void)cudaLaunchKernelEx(&cfg, kernel, static_cast<Params>(args)...);
}

// Raises kKernel's dynamic shared memory limit to `bytes` (with carveout_max, also preferring all
// of the unified L1 as shared memory) on the current device. The attribute belongs to a (kernel,
// device) pair, so a process driving a second GPU must set it there too; it is set the first time
// a device asks and remembered per device (devices 0..63; any other asks every time), so the hot
// path is a cudaGetDevice and an atomic load. True where the device granted it; a refusal is
// taken off cudaGetLastError (not a launch's error), so the caller falls back, or lets a launch
// that needs the memory fail. `bytes` must be the same at every call for one kernel. Not a
// stream operation: legal during graph capture.
template <auto kKernel>
bool raise_smem_limit(int bytes, bool carveout_max = false) {
  const auto apply = [&] {
    const bool ok =
        cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) == cudaSuccess &&
        (!carveout_max || cudaFuncSetAttribute(kKernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                               int(cudaSharedmemCarveoutMaxShared)) == cudaSuccess);
    if (!ok) (void)cudaGetLastError();
    return ok;
  };
  static std::atomic<uint64_t> asked{0}, granted{0};  // a bit per device
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;  // its error stays for the caller to see
  if (device < 0 || device >= 64) return apply();
  const uint64_t bit = uint64_t(1) << device;
  if (asked.load(std::memory_order_acquire) & bit) return (granted.load(std::memory_order_relaxed) & bit) != 0;
  const bool ok = apply();  // two threads may both get here: setting it twice is harmless
  if (ok) granted.fetch_or(bit, std::memory_order_relaxed);
  asked.fetch_or(bit, std::memory_order_release);  // after granted: a reader that sees asked sees granted
  return ok;
}

inline unsigned ceil_div(int64_t a, int64_t b) { return unsigned((a + b - 1) / b); }

// The current device's SM count, for launch shapes that depend on how many blocks fill the GPU
// (132, an H100/H200's, if unknown). Not a stream operation: legal during graph capture.
inline int sm_count() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return 132;
  return n;
}

// Calls launch(first_output, outputs, blocks) for slices of n_out small enough for grid.y's
// 65535 blocks of out_per_block outputs each.
template <class F>
void for_output_slices(int64_t n_out, int64_t out_per_block, F&& launch) {
  const int64_t max_out = out_per_block * 65535;
  for (int64_t o = 0; o < n_out; o += max_out) {
    const int64_t n = n_out - o < max_out ? n_out - o : max_out;
    launch(o, n, ceil_div(n, out_per_block));
  }
}

}  // namespace df::cuda
