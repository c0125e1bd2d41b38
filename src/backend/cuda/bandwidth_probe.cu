// The device's read bandwidth, for benches that judge decode kernels: a decode step only reads
// its weights, so a read-only stream is the roofline they are compared with (a copy both reads
// and writes, and runs at a different rate).
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"

namespace df::cuda {

namespace {

// Each thread sums its share of 16-byte words, four loads in flight; the sum goes to *sink
// only if it is a value no input produces, so the loads cannot be removed.
__global__ void read_probe_k(const uint4* __restrict__ p, size_t n, unsigned* sink) {
  pdl_wait();
  pdl_trigger();
  unsigned acc = 0;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = __ldg(p + i), b = __ldg(p + i + stride), c = __ldg(p + i + 2 * stride), d = __ldg(p + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = __ldg(p + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (acc == 0x9E3779B9u) *sink = acc;
}

// The Q4_K decode kernel's weight reads without its arithmetic (imma_matmul.cu: a block per 16
// outputs, warp w taking slots w, w + 8, ... of one super-block each here), over the same bytes
// read in one of two layouts: kTile false, the GGUF rows (a lane reads the 16-byte headers of
// rows g, g + 8 and 8 bytes of each of their 32-byte quant runs, as the kernel does); kTile true,
// a layout repacked so that a tile's super-block (16 rows x 144 bytes) is 2304 consecutive bytes
// a warp reads in 4.5 coalesced 512-byte loads. kAhead super-blocks' loads are issued before
// their sum, as a kernel keeping that many in flight would. Tells how much of the kernel's time
// its access pattern alone costs.
template <bool kTile, int kAhead>
__global__ void __launch_bounds__(256, 3)
    q4k_pattern_probe_k(const uint8_t* __restrict__ w, int64_t n_out, size_t row_bytes, int n_sb, unsigned* sink) {
  pdl_wait();
  pdl_trigger();
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32, n_warps = int(blockDim.x) / 32;
  const int g = lane / 4, c = lane % 4;
  const int64_t tile = blockIdx.y;
  unsigned acc = 0;
  for (int sb0 = warp; sb0 < n_sb; sb0 += n_warps * kAhead) {
    uint4 h[kAhead][2];
    uint2 q[kAhead][4][2];
#pragma unroll
    for (int a = 0; a < kAhead; ++a) {
      const int sb = min(sb0 + a * n_warps, n_sb - 1);
      if constexpr (kTile) {
        const uint8_t* base = w + (size_t(tile) * size_t(n_sb) + size_t(sb)) * 2304;
        h[a][0] = __ldg(reinterpret_cast<const uint4*>(base + 16 * lane));
        h[a][1] = __ldg(reinterpret_cast<const uint4*>(base + 512 + 16 * lane));
        const uint4 u = __ldg(reinterpret_cast<const uint4*>(base + 1024 + 16 * lane));
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(base + 1536 + 16 * lane));
        q[a][0][0] = make_uint2(u.x, u.y), q[a][0][1] = make_uint2(u.z, u.w);
        q[a][1][0] = make_uint2(v.x, v.y), q[a][1][1] = make_uint2(v.z, v.w);
        q[a][2][0] = __ldg(reinterpret_cast<const uint2*>(base + 2048 + 8 * lane));
        q[a][2][1] = q[a][3][0] = q[a][3][1] = make_uint2(0, 0);
      } else {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int64_t o = min(tile * 16 + g + 8 * hh, n_out - 1);
          const uint8_t* row = w + size_t(o) * row_bytes + size_t(sb) * 144;
          h[a][hh] = __ldg(reinterpret_cast<const uint4*>(row));
#pragma unroll
          for (int i = 0; i < 4; ++i) q[a][i][hh] = __ldg(reinterpret_cast<const uint2*>(row + 16 + 8 * c + 32 * i));
        }
      }
    }
#pragma unroll
    for (int a = 0; a < kAhead; ++a)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        acc ^= h[a][hh].x ^ h[a][hh].y ^ h[a][hh].z ^ h[a][hh].w;
#pragma unroll
        for (int i = 0; i < 4; ++i) acc ^= q[a][i][hh].x ^ q[a][i][hh].y;
      }
  }
  if (acc == 0x9E3779B9u) *sink = acc;
}

}  // namespace

void q4k_pattern_probe(const void* w, int64_t n_in, int64_t n_out, size_t row_bytes, bool tile_layout, int ahead,
                       unsigned* sink, cudaStream_t s) {
  const int n_sb = int(n_in / 256);
  const dim3 grid(1, unsigned((n_out + 15) / 16));
  const unsigned threads = 32u * unsigned(std::min(n_sb, 8));
  const auto* p = static_cast<const uint8_t*>(w);
  if (tile_layout && ahead > 1) launch(q4k_pattern_probe_k<true, 3>, grid, threads, 0, s, p, n_out, row_bytes, n_sb, sink);
  else if (tile_layout) launch(q4k_pattern_probe_k<true, 1>, grid, threads, 0, s, p, n_out, row_bytes, n_sb, sink);
  else if (ahead > 1) launch(q4k_pattern_probe_k<false, 3>, grid, threads, 0, s, p, n_out, row_bytes, n_sb, sink);
  else launch(q4k_pattern_probe_k<false, 1>, grid, threads, 0, s, p, n_out, row_bytes, n_sb, sink);
}

void read_probe(const void* data, size_t bytes, unsigned* sink, cudaStream_t s) {
  launch(read_probe_k, dim3(unsigned(sm_count()) * 8), dim3(256), 0, s, static_cast<const uint4*>(data), bytes / sizeof(uint4), sink);
}

}  // namespace df::cuda
