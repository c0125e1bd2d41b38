// y[r][o] = sum_k W[o][k] x[r][k] with W in its file format, dequantized on the fly.
//
// The simple correct version: one warp per output row. For block formats each lane
// dequantizes 32-element chunks of that row (chunk = lane, lane + 32, ...) and dots each chunk
// with up to kRowsPerPass activation rows, so one pass reads every weight byte once for all of
// them; more rows take more passes (blockIdx.y), which re-read W (mostly from L2). Activations
// and accumulation stay fp32: no activation quantization here, unlike the CPU backend, so these
// results sit closer to the exact product than the CPU's (the op tests check both).
//
// Bandwidth: rows > 1 (prefill) still use this kernel, with lanes byte-loading their own blocks
// (~130-230 GB/s on an H200). rows == 1 (decode) uses matvec_blocks below: cp.async 16-byte
// staging through shared memory, bit-identical sums, ~410-730 GB/s for Q4_K/Q5_K/Q6_K/Q8_0 on an
// H200 (IQ4_XS ~210): now bound by dequant instructions, not by memory. Next: integer dot of the
// quants with per-sub-block scale (fewer float ops), several rows per warp, a rows <= 16 variant.
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/kernels.h"

namespace df::cuda {

namespace {

constexpr int kRowsPerPass = 16;  // activation rows sharing one read of a weight row
constexpr int kWarpsPerBlock = 4;  // output rows per thread block

template <GgmlType T>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp)
    matmul_blocks(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_chunks, int64_t n_in, int64_t n_out,
                  const float* __restrict__ x, int rows, float* __restrict__ y) {
  const int lane = threadIdx.x % kWarp;
  const int64_t o = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (o >= n_out) return;
  const int r0 = blockIdx.y * kRowsPerPass;
  const int nr = min(kRowsPerPass, rows - r0);
  const uint8_t* wr = w + o * row_bytes;
  const float* xb = x + int64_t(r0) * n_in;
  float acc[kRowsPerPass];
#pragma unroll
  for (int r = 0; r < kRowsPerPass; ++r) acc[r] = 0.0f;
  for (int64_t c = lane; c < n_chunks; c += kWarp) {
    float v[32];
    deq32<T>(wr, c, v);
#pragma unroll
    for (int r = 0; r < kRowsPerPass; ++r) {
      if (r < nr) {
        const float* xr = xb + r * n_in + c * 32;
        float s = 0.0f;
#pragma unroll
        for (int l = 0; l < 32; ++l) s = fmaf(v[l], xr[l], s);
        acc[r] += s;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerPass; ++r) {
    const float s = warp_sum(acc[r]);
    if (lane == 0 && r < nr) y[int64_t(r0 + r) * n_out + o] = s;
  }
}

// F32 / F16 / BF16: lanes stride over the row element by element (coalesced; any n_in).
template <GgmlType T>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp)
    matmul_float(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_in, int64_t n_out,
                 const float* __restrict__ x, int rows, float* __restrict__ y) {
  const int lane = threadIdx.x % kWarp;
  const int64_t o = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  if (o >= n_out) return;
  const int r0 = blockIdx.y * kRowsPerPass;
  const int nr = min(kRowsPerPass, rows - r0);
  const uint8_t* wr = w + o * row_bytes;
  const float* xb = x + int64_t(r0) * n_in;
  float acc[kRowsPerPass];
#pragma unroll
  for (int r = 0; r < kRowsPerPass; ++r) acc[r] = 0.0f;
  for (int64_t k = lane; k < n_in; k += kWarp) {
    const float wv = load_float_elem<T>(wr, k);
#pragma unroll
    for (int r = 0; r < kRowsPerPass; ++r)
      if (r < nr) acc[r] = fmaf(wv, xb[r * n_in + k], acc[r]);
  }
#pragma unroll
  for (int r = 0; r < kRowsPerPass; ++r) {
    const float s = warp_sum(acc[r]);
    if (lane == 0 && r < nr) y[int64_t(r0 + r) * n_out + o] = s;
  }
}


// Decode path (one activation row, block formats): one warp per output row, 8 rows per block.
// Each warp stages tiles of its row (kTileChunks chunks = 2 KiB or less) into its own two slices
// of shared memory with 16-byte cp.async (double-buffered: the next tile streams in while this one
// is computed; byte loads only for a tile's unaligned first/last 16 bytes, as blocks are just
// 2-byte aligned), then every lane dequantizes its chunks from shared memory with
// the same deq32 as above and dots them with x (float4 loads through the read-only cache). Lane l
// takes chunks l, l + 32, ... in the same order as matmul_blocks, so the sums are bit-identical.
constexpr int kMvWarps = 8;
constexpr int kTileChunks = 64;  // 2 chunks per lane per tile

template <GgmlType T>
struct MvTile {
  static constexpr int kPerBlock = BlockInfo<T>::elems / 32;  // chunks per block
  static constexpr int bytes = kTileChunks / kPerBlock * BlockInfo<T>::bytes;
  static constexpr int stride = (bytes + 16 + 15) / 16 * 16;  // room for the 0..15 byte offset
};

// Stages bytes [src, src + nbytes) into buf + (src & 15): 16-byte cp.async for the whole
// aligned words (they land while the warp works on the previous tile), byte loads for the at most
// two partial words at the ends.
__device__ __forceinline__ int mv_stage(const uint8_t* src, int nbytes, uint8_t* buf, int lane) {
  const int a = int(reinterpret_cast<uintptr_t>(src) & 15);
  const uint8_t* base = src - a;
  const int end = a + nbytes;
  const int nwords = (end + 15) / 16;
  for (int i = lane; i < nwords; i += kWarp) {
    const int lo = 16 * i, hi = lo + 16;
    if (lo >= a && hi <= end) {
      const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(buf + lo));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(base + lo) : "memory");
    } else {
      for (int k = max(lo, a); k < min(hi, end); ++k) buf[k] = base[k];
    }
  }
  asm volatile("cp.async.commit_group;\n" ::: "memory");
  return a;
}

// Chunk c of a staged tile: deq32, except Q4_K reads its 32 quant bytes as two 16-byte words
// when they are 16-byte aligned (rows of 144-byte blocks from an aligned base); same values.
template <GgmlType T>
__device__ __forceinline__ void mv_deq(const uint8_t* tb, int c, float* v) {
  if constexpr (T == GgmlType::Q4_K) {
    const uint8_t* b = tb + (c / 8) * 144;
    const int j = c % 8;
    const uint8_t* q = b + 16 + 32 * (j / 2);
    if ((reinterpret_cast<uintptr_t>(q) & 15) == 0) {
      const float d = ld_half(b), dmin = ld_half(b + 2);
      int sc, mn;
      k4_scale_min(b + 4, j, sc, mn);
      const float d1 = __fmul_rn(d, float(sc)), m1 = __fmul_rn(dmin, float(mn));
      const int sh = 4 * (j % 2);
      uint32_t wq[8];
      *reinterpret_cast<uint4*>(wq) = *reinterpret_cast<const uint4*>(q);
      *reinterpret_cast<uint4*>(wq + 4) = *reinterpret_cast<const uint4*>(q + 16);
#pragma unroll
      for (int l = 0; l < 32; ++l) {
        const int x = int((wq[l / 4] >> (8 * (l % 4) + sh)) & 15);
        v[l] = __fsub_rn(__fmul_rn(d1, float(x)), m1);
      }
      return;
    }
  }
  deq32<T>(tb, c, v);
}

template <GgmlType T>
__global__ void __launch_bounds__(kMvWarps* kWarp)
    matvec_blocks(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_chunks, int64_t n_out,
                  const float* __restrict__ x, float* __restrict__ y) {
  using B = BlockInfo<T>;
  using Tile = MvTile<T>;
  __shared__ __align__(16) uint8_t sbuf[kMvWarps * 2 * Tile::stride];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t o = int64_t(blockIdx.x) * kMvWarps + warp;
  if (o >= n_out) return;  // whole warp; no block-wide barrier below
  uint8_t* bufs = sbuf + warp * 2 * Tile::stride;
  const uint8_t* wr = w + o * row_bytes;
  auto tile_bytes = [&](int64_t t0) {
    return int(min(int64_t(kTileChunks), n_chunks - t0)) / Tile::kPerBlock * B::bytes;
  };
  int a_next = mv_stage(wr, tile_bytes(0), bufs, lane);
  float acc = 0.0f;
  int buf_i = 0;
  for (int64_t t0 = 0; t0 < n_chunks; t0 += kTileChunks) {
    const int nch = int(min(int64_t(kTileChunks), n_chunks - t0));
    const int a = a_next;
    if (t0 + kTileChunks < n_chunks) {
      const int64_t t1 = t0 + kTileChunks;
      a_next = mv_stage(wr + (t1 / Tile::kPerBlock) * B::bytes, tile_bytes(t1), bufs + (buf_i ^ 1) * Tile::stride,
                        lane);
      asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    } else {
      asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    }
    __syncwarp();
    const uint8_t* tb = bufs + buf_i * Tile::stride + a;  // same alignment mod 16 as in global memory
    for (int c = lane; c < nch; c += kWarp) {
      float v[32];
      mv_deq<T>(tb, c, v);
      const float4* xr = reinterpret_cast<const float4*>(x + (t0 + c) * 32);
      float s = 0.0f;
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        const float4 xv = __ldg(xr + q);
        s = fmaf(v[4 * q + 0], xv.x, s);
        s = fmaf(v[4 * q + 1], xv.y, s);
        s = fmaf(v[4 * q + 2], xv.z, s);
        s = fmaf(v[4 * q + 3], xv.w, s);
      }
      acc += s;
    }
    __syncwarp();  // this buffer is read before a later tile is staged into it
    buf_i ^= 1;
  }
  acc = warp_sum(acc);
  if (lane == 0) y[o] = acc;
}

}  // namespace

bool matmul_supports(GgmlType t) {
  return dispatch_weight_type(t, [](auto) {});
}

bool matmul(const Weight& w, const float* x, int rows, float* y, cudaStream_t s) {
  const dim3 grid(ceil_div(w.n_out, kWarpsPerBlock), ceil_div(rows, kRowsPerPass));
  const dim3 block(kWarpsPerBlock * kWarp);
  const auto* wd = static_cast<const uint8_t*>(w.data);
  return dispatch_weight_type(w.type, [&](auto tag) {
    constexpr GgmlType T = decltype(tag)::value;
    if constexpr (is_float_format(T)) {
      matmul_float<T><<<grid, block, 0, s>>>(wd, w.row_bytes, w.n_in, w.n_out, x, rows, y);
    } else if (rows == 1 && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
      matvec_blocks<T><<<ceil_div(w.n_out, kMvWarps), kMvWarps * kWarp, 0, s>>>(wd, w.row_bytes, w.n_in / 32,
                                                                                 w.n_out, x, y);
    } else {
      matmul_blocks<T><<<grid, block, 0, s>>>(wd, w.row_bytes, w.n_in / 32, w.n_in, w.n_out, x, rows, y);
    }
  });
}

}  // namespace df::cuda
