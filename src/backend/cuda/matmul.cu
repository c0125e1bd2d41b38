// y[r][o] = sum_k W[o][k] x[r][k] with W in its file format, dequantized on the fly.
//
// The generic kernels. Weights that the fast kernels take (matvec.cu: Q4_K, Q5_K, Q6_K, Q8_0,
// Q4_0, IQ4_XS, F32, F16, BF16 with aligned rows) never come here; the rest (Q4_1, Q5_0, Q5_1,
// Q2_K, Q3_K, IQ4_NL, and odd shapes) do, for every row count.
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
//
// rows > kManyRows (prefill, block formats): matmul_many below. W is dequantized slice by slice
// into f32 scratch (deq32, so exact values) and x copied next to it, both chunk-interleaved: in
// each run of 32 chunks (1024 elements) element e of chunk kb*32 + l sits at kb*1024 + e*width + l
// (width = the run's chunk count, 32 but in the last run), so the lane that owns chunk class l
// reads coalesced words. gemm_chunked then sums exactly like matmul_blocks -- lane l takes chunks
// l, l + 32, ... in order, an fmaf chain from 0 per chunk added into its accumulator, then
// warp_sum -- so every row's result is bit-identical whatever the row count (batching never
// changes a sequence's numbers), while each warp does 8 outputs x 8 rows from registers.
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/kernels.h"

#include <algorithm>

namespace df::cuda {

namespace {

constexpr int kRowsPerPass = 16;  // activation rows sharing one read of a weight row
constexpr int kWarpsPerBlock = 4;  // output rows per thread block

template <GgmlType T>
__global__ void __launch_bounds__(kWarpsPerBlock* kWarp)
    matmul_blocks(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_chunks, int64_t n_in, int64_t n_out,
                  const float* __restrict__ x, int rows, float* __restrict__ y) {
  pdl_wait();
  pdl_trigger();
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
  pdl_wait();
  pdl_trigger();
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
  pdl_wait();
  pdl_trigger();
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


// --- multi-row path (see the top of the file) ---
constexpr int kGemmOut = 8;    // outputs per warp tile
constexpr int kGemmRows = 8;   // activation rows per warp tile
constexpr int kGemmWarps = 4;  // warps per block: same outputs, consecutive row tiles
constexpr int kDqThreads = 256;

__device__ __forceinline__ int64_t interleaved(int64_t n_chunks, int64_t c, int e) {
  const int64_t kb = c / 32;
  const int64_t width = min(int64_t(32), n_chunks - kb * 32);
  return kb * 1024 + e * width + (c % 32);
}

// One thread per 32-element chunk of rows [0, n) of w; consecutive threads write consecutive words.
template <GgmlType T>
__global__ void __launch_bounds__(kDqThreads)
    dequant_interleaved(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_chunks, int64_t total_chunks,
                        float* __restrict__ dst) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = int64_t(blockIdx.x) * kDqThreads + threadIdx.x;
  if (i >= total_chunks) return;
  const int64_t o = i / n_chunks, c = i % n_chunks;
  float v[32];
  deq32<T>(w + o * row_bytes, c, v);
  float* d = dst + o * n_chunks * 32;
#pragma unroll
  for (int e = 0; e < 32; ++e) d[interleaved(n_chunks, c, e)] = v[e];
}

__global__ void interleave_rows(const float* __restrict__ x, int64_t n_chunks, int64_t total, float* __restrict__ dst) {
  pdl_wait();
  pdl_trigger();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t n_in = n_chunks * 32;
  const int64_t r = i / n_in, k = i % n_in;
  dst[r * n_in + interleaved(n_chunks, k / 32, int(k % 32))] = x[i];
}

// y[r][o] for o < n, r < rows (y has row stride y_stride); w and x interleaved as above.
__global__ void __launch_bounds__(kGemmWarps* kWarp)
    gemm_chunked(const float* __restrict__ w, int64_t n_chunks, int64_t n, const float* __restrict__ x, int rows,
                 float* __restrict__ y, int64_t y_stride) {
  pdl_wait();
  pdl_trigger();
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t o0 = int64_t(blockIdx.y) * kGemmOut;
  const int r0 = (blockIdx.x * kGemmWarps + warp) * kGemmRows;
  if (r0 >= rows) return;  // whole warp
  const int64_t n_in = n_chunks * 32;
  const float* wp[kGemmOut];
  const float* xp[kGemmRows];
#pragma unroll
  for (int i = 0; i < kGemmOut; ++i) wp[i] = w + min(o0 + i, n - 1) * n_in;  // tails: computed, not stored
#pragma unroll
  for (int j = 0; j < kGemmRows; ++j) xp[j] = x + int64_t(min(r0 + j, rows - 1)) * n_in;
  float acc[kGemmOut][kGemmRows];
#pragma unroll
  for (int i = 0; i < kGemmOut; ++i)
#pragma unroll
    for (int j = 0; j < kGemmRows; ++j) acc[i][j] = 0.0f;
  for (int64_t kb = 0; kb * 32 < n_chunks; ++kb) {
    const int width = int(min(int64_t(32), n_chunks - kb * 32));
    if (lane < width) {
      const int64_t base = kb * 1024 + lane;
      float s[kGemmOut][kGemmRows];
#pragma unroll
      for (int i = 0; i < kGemmOut; ++i)
#pragma unroll
        for (int j = 0; j < kGemmRows; ++j) s[i][j] = 0.0f;
#pragma unroll 2
      for (int e = 0; e < 32; ++e) {
        const int64_t at = base + int64_t(e) * width;
        float wv[kGemmOut], xv[kGemmRows];
#pragma unroll
        for (int i = 0; i < kGemmOut; ++i) wv[i] = wp[i][at];
#pragma unroll
        for (int j = 0; j < kGemmRows; ++j) xv[j] = __ldg(xp[j] + at);
#pragma unroll
        for (int i = 0; i < kGemmOut; ++i)
#pragma unroll
          for (int j = 0; j < kGemmRows; ++j) s[i][j] = fmaf(wv[i], xv[j], s[i][j]);
      }
#pragma unroll
      for (int i = 0; i < kGemmOut; ++i)
#pragma unroll
        for (int j = 0; j < kGemmRows; ++j) acc[i][j] += s[i][j];
    }
  }
#pragma unroll
  for (int i = 0; i < kGemmOut; ++i)
#pragma unroll
    for (int j = 0; j < kGemmRows; ++j) {
      const float t = warp_sum(acc[i][j]);
      if (lane == 0 && o0 + i < n && r0 + j < rows) y[int64_t(r0 + j) * y_stride + o0 + i] = t;
    }
}

// Output rows per slice: the W slice fits kManyScratchFloats and one launch's grid.y.
int64_t many_slice(const Weight& w) {
  const int64_t by_scratch = std::max<int64_t>(1, int64_t(kManyScratchFloats) / w.n_in);
  return std::min({w.n_out, by_scratch, int64_t(65535) * kGemmOut});
}

}  // namespace

bool matmul_many_supports(const Weight& w) {
  return !is_float_format(w.type) && w.n_in % 32 == 0 && w.n_in > 0 && dispatch_weight_type(w.type, [](auto) {});
}

size_t matmul_many_scratch(const Weight& w, int rows) {
  return size_t(many_slice(w)) * size_t(w.n_in) + size_t(rows) * size_t(w.n_in);
}

void matmul_many(const Weight& w, const float* x, int rows, float* y, float* scratch, cudaStream_t s) {
  const int64_t n_chunks = w.n_in / 32, slice = many_slice(w);
  float* ws = scratch;
  float* xs = scratch + size_t(slice) * size_t(w.n_in);
  const int64_t nx = int64_t(rows) * w.n_in;
  launch(interleave_rows, ceil_div(nx, 256), 256, 0, s, x, n_chunks, nx, xs);
  const auto* wd = static_cast<const uint8_t*>(w.data);
  for (int64_t o0 = 0; o0 < w.n_out; o0 += slice) {
    const int64_t n = std::min(slice, w.n_out - o0);
    dispatch_weight_type(w.type, [&](auto tag) {
      constexpr GgmlType T = decltype(tag)::value;
      if constexpr (!is_float_format(T)) {
        const int64_t total = n * n_chunks;
        launch(dequant_interleaved<T>, ceil_div(total, kDqThreads), kDqThreads, 0, s, wd + size_t(o0) * w.row_bytes,
                                                                                   w.row_bytes, n_chunks, total, ws);
      }
    });
    const dim3 grid(ceil_div(rows, kGemmRows * kGemmWarps), ceil_div(n, kGemmOut));
    launch(gemm_chunked, grid, kGemmWarps * kWarp, 0, s, ws, n_chunks, n, xs, rows, y + o0, w.n_out);
  }
}

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
      launch(matmul_float<T>, grid, block, 0, s, wd, w.row_bytes, w.n_in, w.n_out, x, rows, y);
    } else if (rows == 1 && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
      launch(matvec_blocks<T>, ceil_div(w.n_out, kMvWarps), kMvWarps * kWarp, 0, s, wd, w.row_bytes, w.n_in / 32,
                                                                                 w.n_out, x, y);
    } else {
      launch(matmul_blocks<T>, grid, block, 0, s, wd, w.row_bytes, w.n_in / 32, w.n_in, w.n_out, x, rows, y);
    }
  });
}

}  // namespace df::cuda
