// top_k_rows: the k largest values of each row, in the order of backend/top_k_order.h (value
// descending, lower id first on equal values, NaN last), in two kernels:
//   1. chunk_top_k: one block per (chunk of kChunk values, row) finds the chunk's top k;
//   2. merge_top_k: one block per row finds the top k of its chunks' lists.
// Both run the same block routine, a radix select: four passes of 8-bit histograms over the
// order keys find the k-th largest key T and how many of the keys equal to T to take; a
// gather pass collects the keys above T (any order) and the first of those equal to T in index
// order; a bitonic sort of the <= 256 candidates on (key, ~index) gives the final order.
// Equal keys are taken in index order, and a chunk's list is sorted with its ids ascending on
// equal keys while chunks follow each other in id order: so in the merge, index order on equal
// keys is id order, and the result is exactly the host's partial sort. A 248K row is 61 chunks:
// ~61 blocks per row instead of one block reading the row five times.
#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/top_k_order.h"

namespace df::cuda {

namespace {

constexpr int kChunk = 4096;       // values per chunk block
constexpr int kChunkThreads = 256;  // kChunk / kChunkThreads values per thread: one tile
constexpr int kMergeThreads = 1024;
constexpr int kMergePer = 8;  // keys a merge thread loads before processing them (hides L2 latency)
constexpr int kBins = 256;

int chunk_count(int n) { return (n + kChunk - 1) / kChunk; }

// A candidate as one sortable word: key high, ~index low, so descending order is key
// descending, then index ascending. 0 is below every real candidate (keys are >= 1).
__device__ __forceinline__ uint64_t candidate(uint32_t key, uint32_t index) {
  return (uint64_t(key) << 32) | uint64_t(~index);
}
__device__ __forceinline__ uint32_t candidate_index(uint64_t c) { return ~uint32_t(c); }
__device__ __forceinline__ uint32_t candidate_key(uint64_t c) { return uint32_t(c >> 32); }

// Order keys of a float row (stage 1).
struct RowKeys {
  const float* v;
  __device__ __forceinline__ uint32_t operator()(int i) const { return top_k_key_of_bits(__float_as_uint(v[i])); }
};
// Order keys already computed (stage 2: the chunks' lists).
struct ListKeys {
  const uint32_t* k;
  __device__ __forceinline__ uint32_t operator()(int i) const { return k[i]; }
};

// Shared state of block_top_k (one per block).
struct SelectShared {
  uint32_t hist[kBins];
  uint32_t warp_ties[32];
  uint32_t bin, left;  // the chosen bin of a pass and the rank still to find inside it
  uint32_t n_above;
  uint64_t cand[kMaxDeviceTopK];
};

// The top k (1 <= k <= min(m, kMaxDeviceTopK)) of keys(0..m-1) into sh.cand[0..k), sorted
// descending as candidate words. Every thread of the block calls it (it synchronises).
// Tiles of kThreads * kPer indices: index base + j * kThreads + threadIdx.x for j < kPer, so the
// kPer loads of a thread are issued together and each warp's loads are coalesced.
template <int kThreads, int kPer, class Keys>
__device__ void block_top_k(const Keys& keys, int m, int k, SelectShared& sh) {
  constexpr int kWarps = kThreads / kWarp;
  constexpr int kTile = kThreads * kPer;
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;

  // --- radix select: after the pass at `shift`, every key matching prefix on mask's bits is a
  // candidate for the k-th largest, which is the left-th largest of them.
  uint32_t prefix = 0, mask = 0, left = uint32_t(k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = tid; b < kBins; b += kThreads) sh.hist[b] = 0;
    __syncthreads();
    for (int base = 0; base < m; base += kTile) {
      uint32_t key[kPer];
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int i = base + j * kThreads + tid;
        key[j] = i < m ? keys(i) : 0u;
      }
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const bool take = base + j * kThreads + tid < m && (key[j] & mask) == prefix;
        const unsigned takers = __ballot_sync(0xffffffffu, take);
        if (take) {
          // One atomic per distinct bin in the warp: logits crowd a few bins in the first pass.
          const uint32_t bin = (key[j] >> shift) & (kBins - 1);
          const unsigned peers = __match_any_sync(takers, bin);
          if (lane == __ffs(peers) - 1) atomicAdd(&sh.hist[bin], uint32_t(__popc(peers)));
        }
      }
    }
    __syncthreads();
    if (warp == 0) {
      // Lane l holds bins 255 - 8l down to 248 - 8l: counting from the top, lanes in order.
      uint32_t c[kBins / kWarp], sum = 0;
#pragma unroll
      for (int j = 0; j < kBins / kWarp; ++j) sum += c[j] = sh.hist[kBins - 1 - (kBins / kWarp) * lane - j];
      uint32_t incl = sum;
#pragma unroll
      for (int o = 1; o < kWarp; o <<= 1) {
        const uint32_t t = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += t;
      }
      uint32_t cum = incl - sum;  // candidates in higher bins
      if (cum < left && left <= incl) {  // exactly one lane: the counts add up to >= left
#pragma unroll
        for (int j = 0; j < kBins / kWarp; ++j) {
          if (cum + c[j] >= left) {
            sh.bin = uint32_t(kBins - 1 - (kBins / kWarp) * lane - j);
            sh.left = left - cum;
            break;
          }
          cum += c[j];
        }
      }
    }
    __syncthreads();  // hist is cleared again only after every thread passed this point
    prefix |= sh.bin << shift;
    mask |= uint32_t(kBins - 1) << shift;
    left = sh.left;
  }

  // --- gather: the k - left keys above T = prefix (slots from an atomic counter), then the
  // first `left` keys equal to T in index order (slots by their rank among T's).
  const uint32_t threshold = prefix, n_above = uint32_t(k) - left;
  if (tid == 0) sh.n_above = 0;
  __syncthreads();
  uint32_t ties_before = 0;  // keys equal to T at lower indices (same in every thread)
  for (int base = 0; base < m; base += kTile) {
    uint32_t key[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = base + j * kThreads + tid;
      key[j] = i < m ? keys(i) : 0u;  // 0 is below T (T >= 1): never taken
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const uint32_t i = uint32_t(base + j * kThreads + tid);
      if (key[j] > threshold) sh.cand[atomicAdd(&sh.n_above, 1u)] = candidate(key[j], i);
      const bool tie = key[j] == threshold;
      const unsigned ties = __ballot_sync(0xffffffffu, tie);
      if (lane == 0) sh.warp_ties[warp] = uint32_t(__popc(ties));
      __syncthreads();
      uint32_t rank = ties_before + uint32_t(__popc(ties & ((1u << lane) - 1u))), total = 0;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const uint32_t t = sh.warp_ties[w];
        if (w < warp) rank += t;
        total += t;
      }
      if (tie && rank < left) sh.cand[n_above + rank] = candidate(key[j], i);
      ties_before += total;
      __syncthreads();  // warp_ties is rewritten next
    }
  }

  // --- bitonic sort, descending, of the k candidates padded with 0 to a power of two.
  int p = 1;
  while (p < k) p *= 2;
  for (int i = k + tid; i < p; i += kThreads) sh.cand[i] = 0;
  __syncthreads();
  for (int size = 2; size <= p; size *= 2) {
    for (int half = size / 2; half > 0; half /= 2) {
      for (int t = tid; t < p / 2; t += kThreads) {
        const int lo = (t / half) * 2 * half + t % half, hi = lo + half;
        const bool descending = (lo & size) == 0;
        const uint64_t a = sh.cand[lo], b = sh.cand[hi];
        if (descending ? a < b : a > b) {
          sh.cand[lo] = b;
          sh.cand[hi] = a;
        }
      }
      __syncthreads();
    }
  }
}

// Stage 1: the top min(k, chunk length) of chunk blockIdx.x of row blockIdx.y, as order keys
// and ids at list (row * n_chunks + chunk) * k; a short chunk's list is padded with key 0.
__global__ void __launch_bounds__(kChunkThreads)
    chunk_top_k(const float* __restrict__ x, int n, size_t stride, int k, uint32_t* __restrict__ list_keys,
                int32_t* __restrict__ list_ids) {
  pdl_wait();
  pdl_trigger();
  __shared__ SelectShared sh;
  const int begin = int(blockIdx.x) * kChunk, m = min(kChunk, n - begin), kc = min(k, m);
  block_top_k<kChunkThreads, kChunk / kChunkThreads>(RowKeys{x + size_t(blockIdx.y) * stride + begin}, m, kc, sh);
  const size_t out = (size_t(blockIdx.y) * gridDim.x + blockIdx.x) * size_t(k);
  for (int j = threadIdx.x; j < k; j += kChunkThreads) {
    const uint64_t c = sh.cand[j];
    list_keys[out + j] = j < kc ? candidate_key(c) : 0u;
    list_ids[out + j] = j < kc ? begin + int(candidate_index(c)) : -1;
  }
}

// Stage 2: the top k of row blockIdx.x's n_chunks lists; ids and the values read back from x
// (bit for bit: the keys fold -0 into +0 and every NaN into one).
__global__ void __launch_bounds__(kMergeThreads)
    merge_top_k(const float* __restrict__ x, size_t stride, int k, int n_chunks, const uint32_t* __restrict__ list_keys,
                const int32_t* __restrict__ list_ids, int32_t* __restrict__ ids, float* __restrict__ vals) {
  pdl_wait();
  pdl_trigger();
  __shared__ SelectShared sh;
  const int row = int(blockIdx.x), m = n_chunks * k;
  const size_t first = size_t(row) * size_t(m);
  block_top_k<kMergeThreads, kMergePer>(ListKeys{list_keys + first}, m, k, sh);
  for (int j = threadIdx.x; j < k; j += kMergeThreads) {
    const int32_t id = list_ids[first + candidate_index(sh.cand[j])];
    ids[size_t(row) * k + j] = id;
    vals[size_t(row) * k + j] = x[size_t(row) * stride + size_t(id)];
  }
}

}  // namespace

// Scratch: [ids rows*k][vals rows*k][list keys rows*chunks*k][list ids rows*chunks*k], 4-byte words.
size_t top_k_scratch_bytes(int rows, int n, int k) {
  const size_t lists = size_t(rows) * size_t(chunk_count(n)) * size_t(k);
  return (2 * size_t(rows) * size_t(k) + 2 * lists) * sizeof(uint32_t);
}

void top_k_rows(const float* x, int rows, int n, size_t stride, int k, void* scratch, cudaStream_t s) {
  const int n_chunks = chunk_count(n);
  int32_t* ids = static_cast<int32_t*>(scratch);
  float* vals = reinterpret_cast<float*>(ids + size_t(rows) * k);
  uint32_t* list_keys = reinterpret_cast<uint32_t*>(vals + size_t(rows) * k);
  int32_t* list_ids = reinterpret_cast<int32_t*>(list_keys + size_t(rows) * n_chunks * k);
  launch(chunk_top_k, dim3(unsigned(n_chunks), unsigned(rows)), kChunkThreads, 0, s, x, n, stride, k, list_keys,
         list_ids);
  launch(merge_top_k, unsigned(rows), kMergeThreads, 0, s, x, stride, k, n_chunks,
         static_cast<const uint32_t*>(list_keys), static_cast<const int32_t*>(list_ids), ids, vals);
}

}  // namespace df::cuda
