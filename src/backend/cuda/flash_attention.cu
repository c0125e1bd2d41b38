// Flash-style attention for prefill: calls of more than kFlashMinRows query rows on an f16 KV
// cache with head dim 64, 128 or 256 (attention.cu dispatches; fewer rows keep its fp32 kernel).
//
// A block takes `heads` query heads that share one KV head (a divisor of the GQA group, at most
// 8) and 16 * row_tiles consecutive rows of the call; each warp owns one m16 tile: 16 rows of
// one head. Keys go in steps of 64 (0, 64, 128, ... up to the largest pos of the block's rows):
// the K and V head rows of a step come from the paged cache into shared memory once for the whole
// block (cp.async, two stages: the next step loads while this one computes; a step may span
// cache blocks, so each key looks up its own slot), and every warp reads them with ldmatrix.
// Tensor cores (mma m16n8k16, f16 x f16 -> f32): S = Q K^T with q rounded to f16, then an online
// softmax per row in fp32 (exp2 of log2e-scaled scores; running max m and sum l), P rounded to
// f16 for O += P V; l sums the rounded P, so the weights that reach O are the ones normalised.
//
// Row invariance: a row's result depends only on its own q, pos and the cache. Its keys are
// visited in the same fixed steps whichever rows share its tile, every reduction (the dot
// products of an mma element, the max and sum over a row's four lanes) has a fixed order, and
// a step past pos[r] leaves the row's state bit for bit as it was: its scores are -inf, so m
// stays, the rescale factor is exp2(0) = 1, its P row is 0 and adds nothing to O (the cache
// rows of such a step are finite values of other rows' positions, or zeros loaded for keys
// past the block's range or without a block). So a row gives the same bits in any call of more
// than kFlashMinRows rows (tests/test_cuda_ops.cpp checks 40 vs 100 rows).
//
// A row that needs a position without a block (table entry < 0 or past n_blocks) comes out NaN,
// as in attention.cu: the block records the first such position of its range.
#include <climits>
#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/attention_span.cuh"

namespace df::cuda {

namespace {

constexpr int kKeys = 64;         // keys per step
constexpr int kTileRows = 16;     // query rows of one warp (one m16 tile)
constexpr int kMaxWarps = 8;      // register budget: ~255 per thread at 256 threads (D = 256)
constexpr int kBaseWarps = 4;     // small GQA groups take more row tiles per block, up to this
constexpr float kLog2e = 1.4426950408889634f;

// Shared memory: two stages of [K tile | V tile], then each warp's 16 q rows, all f16 rows of D
// halves plus 16 bytes, so the eight 16-byte rows an ldmatrix phase reads fall in distinct bank
// groups (a row of 2D bytes is a multiple of 128).
template <int D>
struct Smem {
  static constexpr int kRowBytes = 2 * D + 16;
  static constexpr int kTileBytes = kKeys * kRowBytes;  // one K or V tile
  static constexpr int kStageBytes = 2 * kTileBytes;
  static constexpr int kQBytes = kTileRows * kRowBytes;  // one warp's q rows
  static constexpr size_t bytes(int warps) { return 2 * size_t(kStageBytes) + size_t(warps) * kQBytes; }
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; zeros when !live (src must still be mapped).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool live) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(live ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all_but_newest() {
  asm volatile("cp.async.wait_group 1;\n" ::: "memory");
}

// Four 8x8 b16 matrices: lane l gives the address of row l % 8 of matrix l / 8 and receives, of
// each matrix, row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 (.trans: of the transpose).
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// d += a b for one m16n8k16 tile: a 16x16 f16 row-major, b 16x8 f16 column-major, d f32.
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t half2_bits(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }

// Where the block's K/V head rows are and which positions it covers.
struct KvSource {
  const uint8_t* k;
  const uint8_t* v;
  size_t token_bytes, head_offset;  // head_offset: where the block's KV head starts in a token row
  const int32_t* table;
  int n_blocks, block_tokens;
  int last;  // the largest pos of the block's rows: keys past it are loaded as zeros
};

// Keys first..first+63 into a stage; zeros for keys past src.last or without a block (the
// first of the latter goes to *missing).
template <int D>
__device__ __forceinline__ void load_step(uint32_t stage, int first, const KvSource& src, int* missing) {
  constexpr int kChunks = D / 8;  // 16-byte pieces of a head row
  for (int i = threadIdx.x; i < kKeys * kChunks; i += blockDim.x) {
    const int key = i / kChunks, chunk = i % kChunks, p = first + key;
    const int64_t slot = p <= src.last ? kv_slot(src.table, src.n_blocks, src.block_tokens, p) : -1;
    if (slot < 0 && p <= src.last && chunk == 0) atomicMin(missing, p);
    const bool live = slot >= 0;
    const size_t at = live ? size_t(slot) * src.token_bytes + src.head_offset + size_t(chunk) * 16 : 0;
    const uint32_t dst = stage + uint32_t(key * Smem<D>::kRowBytes + chunk * 16);
    cp_async16(dst, src.k + at, live);
    cp_async16(dst + Smem<D>::kTileBytes, src.v + at, live);
  }
}

// Grid: x = groups of 16 * row_tiles rows (the last rows first: with causal positions they have
// the most keys), y = KV head x chunk of `heads` query heads. heads * row_tiles warps.
template <int D>
__global__ void __launch_bounds__(kMaxWarps* kWarp, 1)
    flash_attention_k(const float* __restrict__ q, size_t q_row_stride, size_t q_head_stride, int rows,
                      const int32_t* __restrict__ pos, int n_head, int group, int heads, int row_tiles,
                      KvSource src, size_t head_bytes, float scale, float* __restrict__ out) {
  using S = Smem<D>;
  pdl_wait();
  pdl_trigger();
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ int s_last, s_missing;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int g = lane / 4, c = lane % 4;  // mma fragment coordinates: rows g, g + 8; columns 2c, 2c + 1
  const int chunks = group / heads;
  const int kvh = blockIdx.y / chunks;
  const int h = kvh * group + (blockIdx.y % chunks) * heads + warp / row_tiles;
  const int block_rows = kTileRows * row_tiles;
  const int r_block = (gridDim.x - 1 - blockIdx.x) * block_rows;
  const int r_warp = r_block + kTileRows * (warp % row_tiles);
  const uint32_t s_base = smem_addr(smem);
  uint8_t* q_tile = smem + 2 * S::kStageBytes + warp * S::kQBytes;
  const uint32_t s_q = smem_addr(q_tile);

  if (threadIdx.x == 0) s_last = -1, s_missing = INT_MAX;
  __syncthreads();
  if (int(threadIdx.x) < block_rows && r_block + int(threadIdx.x) < rows) atomicMax(&s_last, pos[r_block + threadIdx.x]);
  __syncthreads();
  src.last = s_last;
  src.head_offset = size_t(kvh) * head_bytes;
  const int n_steps = src.last < 0 ? 0 : src.last / kKeys + 1;
  if (n_steps > 0) load_step<D>(s_base, 0, src, &s_missing);
  cp_async_commit();

  // This warp's q rows as f16 (zeros past the call's last row); read after the first barrier.
  for (int i = lane; i < kTileRows * D / 2; i += kWarp) {
    const int rr = i / (D / 2), d = 2 * (i % (D / 2)), r = r_warp + rr;
    float2 x = make_float2(0.0f, 0.0f);
    if (r < rows) {
      const float* qh = q + size_t(r) * q_row_stride + size_t(h) * q_head_stride + d;
      x = make_float2(qh[0], qh[1]);
    }
    *reinterpret_cast<__half2*>(q_tile + rr * S::kRowBytes + 2 * d) = __floats2half2_rn(x.x, x.y);
  }

  const int row_lo = r_warp + g, row_hi = row_lo + 8;
  const int pos_lo = row_lo < rows ? pos[row_lo] : -1, pos_hi = row_hi < rows ? pos[row_hi] : -1;
  const int warp_last = __reduce_max_sync(0xffffffffu, max(pos_lo, pos_hi));
  const float score_scale = scale * kLog2e;

  float o[D / 8][4];
#pragma unroll
  for (int t = 0; t < D / 8; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // l: this lane's columns only

  for (int step = 0; step < n_steps; ++step) {
    const int first = step * kKeys;
    if (step + 1 < n_steps) load_step<D>(s_base + uint32_t(((step + 1) & 1) * S::kStageBytes), first + kKeys, src, &s_missing);
    cp_async_commit();  // possibly empty: the wait below always leaves exactly the newest group
    cp_async_wait_all_but_newest();
    __syncthreads();  // this step's K/V (and, on the first, every warp's q) visible to all
    if (first <= warp_last) {  // else every row of the warp is past its pos: a no-op, skipped
      const uint32_t s_k = s_base + uint32_t((step & 1) * S::kStageBytes), s_v = s_k + S::kTileBytes;
      // S = Q K^T: sc[j] holds keys first + 8j + 2c, +1 of rows g (0, 1) and g + 8 (2, 3).
      float sc[kKeys / 8][4];
#pragma unroll
      for (int j = 0; j < kKeys / 8; ++j) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
      for (int kd = 0; kd < D / 16; ++kd) {
        uint32_t a[4];  // rows 0-7 / 8-15 x dims 0-7 / 8-15 of this 16-dim slice
        ldsm_x4(a, s_q + uint32_t((lane % 16) * S::kRowBytes + (kd * 16 + (lane / 16) * 8) * 2));
#pragma unroll
        for (int np = 0; np < kKeys / 16; ++np) {
          uint32_t b[4];  // keys np*16 + 0-7 x dims 0-7, 8-15; keys + 8-15 x the same
          ldsm_x4(b, s_k + uint32_t((np * 16 + (lane / 16) * 8 + lane % 8) * S::kRowBytes +
                                    (kd * 16 + ((lane / 8) % 2) * 8) * 2));
          mma_f16(sc[2 * np], a, b[0], b[1]);
          mma_f16(sc[2 * np + 1], a, b[2], b[3]);
        }
      }
      // Online softmax in the log2 domain; keys past a row's pos are -inf.
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = first + 8 * j + 2 * c + (e & 1);
          const float x = key <= (e < 2 ? pos_lo : pos_hi) ? sc[j][e] * score_scale : -INFINITY;
          sc[j][e] = x;
          mx[e / 2] = fmaxf(mx[e / 2], x);
        }
      float base[2], alpha[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
        const float m_new = fmaxf(m[i], mx[i]);
        base[i] = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet: weights 0, not NaN
        alpha[i] = exp2f(m[i] - base[i]);               // 1 when the max stays, 0 on the first key
        m[i] = m_new;
        l[i] *= alpha[i];
      }
      // P as f16 A fragments: 16 keys per k-slice, pa[kk] = {row g, row g+8} x {keys 0-7, 8-15}.
      uint32_t pa[kKeys / 16][4];
#pragma unroll
      for (int j = 0; j < kKeys / 8; ++j) {
        const __half2 lo = __floats2half2_rn(exp2f(sc[j][0] - base[0]), exp2f(sc[j][1] - base[0]));
        const __half2 hi = __floats2half2_rn(exp2f(sc[j][2] - base[1]), exp2f(sc[j][3] - base[1]));
        const float2 fl = __half22float2(lo), fh = __half22float2(hi);
        l[0] += fl.x;
        l[0] += fl.y;
        l[1] += fh.x;
        l[1] += fh.y;
        pa[j / 2][(j % 2) * 2] = half2_bits(lo);
        pa[j / 2][(j % 2) * 2 + 1] = half2_bits(hi);
      }
#pragma unroll
      for (int t = 0; t < D / 8; ++t) {
        o[t][0] *= alpha[0];
        o[t][1] *= alpha[0];
        o[t][2] *= alpha[1];
        o[t][3] *= alpha[1];
      }
      // O += P V: V rows are keys, so B fragments come transposed.
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk)
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t b[4];  // keys 0-7, 8-15 x dims dp*16 + 0-7; the same keys x dims + 8-15
          ldsm_x4_trans(b, s_v + uint32_t((kk * 16 + ((lane / 8) % 2) * 8 + lane % 8) * S::kRowBytes +
                                          (dp * 16 + (lane / 16) * 8) * 2));
          mma_f16(o[2 * dp], pa[kk], b[0], b[1]);
          mma_f16(o[2 * dp + 1], pa[kk], b[2], b[3]);
        }
    }
    __syncthreads();  // every warp is done with this stage before the next step refills it
  }

  const int missing = s_missing;  // every load_step's atomicMin came before the last barrier
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = i == 0 ? row_lo : row_hi, p = i == 0 ? pos_lo : pos_hi;
    if (r >= rows) continue;
    const bool bad = p < 0 || p >= missing;
    const float inv = 1.0f / l[i];
    float* orow = out + (int64_t(r) * n_head + h) * D + 2 * c;
#pragma unroll
    for (int t = 0; t < D / 8; ++t) {
      orow[8 * t] = bad ? NAN : o[t][2 * i] * inv;
      orow[8 * t + 1] = bad ? NAN : o[t][2 * i + 1] * inv;
    }
  }
}

template <int D>
void launch_flash(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos, int n_head,
                  const KvLayerView& kv, const int32_t* table, int n_blocks, float scale, float* out, cudaStream_t s) {
  constexpr auto kernel = flash_attention_k<D>;
  // Above the default 48 KiB for D >= 128; a refusal shows as the launch error, which the caller checks.
  (void)raise_smem_limit<kernel>(int(Smem<D>::bytes(kMaxWarps)), /*carveout_max=*/true);
  const int group = n_head / kv.n_head_kv;
  int heads = 1;  // the largest divisor of the group that fits the warps of a block
  for (int d = 1; d <= kMaxWarps && d <= group; ++d)
    if (group % d == 0) heads = d;
  const int row_tiles = heads >= kBaseWarps ? 1 : kBaseWarps / heads;
  const int warps = heads * row_tiles;
  const KvSource src{static_cast<const uint8_t*>(kv.k), static_cast<const uint8_t*>(kv.v), kv.token_bytes(), 0,
                     table, n_blocks, kv.block_tokens, -1};
  const dim3 grid{ceil_div(rows, kTileRows * row_tiles), unsigned(kv.n_head_kv * (group / heads))};
  launch(kernel, grid, warps * kWarp, Smem<D>::bytes(warps), s, q, q_row_stride, q_head_stride, rows, pos, n_head,
         group, heads, row_tiles, src, kv.head_bytes(), scale, out);
}

}  // namespace

bool flash_attention_supports(const KvLayerView& kv) {
  const bool dim_ok = kv.head_dim == 64 || kv.head_dim == 128 || kv.head_dim == 256;
  const bool aligned = reinterpret_cast<uintptr_t>(kv.k) % 16 == 0 && reinterpret_cast<uintptr_t>(kv.v) % 16 == 0;
  return kv.type == GgmlType::F16 && dim_ok && aligned;
}

void flash_attention(const float* q, size_t q_row_stride, size_t q_head_stride, int rows, const int32_t* pos,
                     int n_head, const KvLayerView& kv, const int32_t* table, int n_blocks, float scale, float* out,
                     cudaStream_t s) {
  switch (kv.head_dim) {
    case 64: launch_flash<64>(q, q_row_stride, q_head_stride, rows, pos, n_head, kv, table, n_blocks, scale, out, s); break;
    case 128: launch_flash<128>(q, q_row_stride, q_head_stride, rows, pos, n_head, kv, table, n_blocks, scale, out, s); break;
    default: launch_flash<256>(q, q_row_stride, q_head_stride, rows, pos, n_head, kv, table, n_blocks, scale, out, s); break;
  }
}

}  // namespace df::cuda
