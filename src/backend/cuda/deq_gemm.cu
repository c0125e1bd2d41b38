// The prompt GEMM for Q4_K weights in their tile layout (quant/q4k_tiles.h): each block
// dequantizes its 128 weight rows to f16 in shared memory, one 64-element slice at a time, and
// multiplies them with 128 activation rows (f16, to_half_rows' scaled copies) by mma.sync
// m16n8k16 with fp32 sums.
//
// Why. The integer GEMM (imma_gemm.cu) applies each 32-element sub-block's scale to each
// output's exact integer sum: per output and sub-block one multiply-add on the integer pipe,
// plus a float part per super-block. Nsight Compute on it (H100, ffn gate/up, 512 rows): ~15
// instructions per m16n8k32 mma, IMAD a quarter of them, so it runs at ~150 TOPS whatever the
// occupancy. Here a weight element is dequantized once per block (amortised over 128 activation
// rows) and the inner loop is ldmatrix and mma only: ~3 instructions per m16n8k16 mma.
//
// Not routed (measured, session 11: 1.0-1.3x the integer GEMM on an H100, docs/performance.md).
// The integer kernels give every row the same bits whatever the row count, which speculation's
// exactness needs among the forwards that decode and verify. This kernel's rows are
// batch-invariant among themselves (a row's sums depend on its own activations and the weights
// only: the mma computes each output column independently and the k order is fixed) but are not
// the integer kernels' bits, so a backend could take it only for forwards of prompt rows alone.
// At its measured speed that trade does not pay; it stays here, tested
// (CudaOps.DeqGemmQ4kAgainstExactAndBatchInvariant) and timed (bench/matmul_kernels), as the
// f16 path's baseline for a wgmma version.
//
// Precision. The weight w = d sc q - dmin m is formed in f16: d sc and dmin m each rounded to
// f16 once per sub-block (2^-11 relative), then one fused multiply-add per element. Activations
// are f16 (11-bit significand; rows scaled by a power of two into range, as in mma_matmul.cu), so
// both operands are more precise than the integer path's 8-bit activations.
//
// Shapes. Block: 128 outputs (eight 16-row tiles) x 256 activation rows, 16 warps of 64 x 32
// (4 m-tiles x 4 n-tiles), so each dequantized element serves 256 rows; 128 registers a thread,
// so the 16 warps (4 a scheduler) hide each other's mma and ldmatrix latencies. Per 64-element slice (a Q4_K sub-block pair: 512 quant bytes a tile,
// plus its 16 headers) a stage holds the tiles' quants, headers and the activations; the loop
// per slice: wait, barrier, start the copy of the slice two ahead, mma on the slice dequantized
// last time, dequantize the next slice into the other buffer (a thread: half a row's sub-block).
// Shared memory 165 KiB: one block an SM. Rows of 144 bytes (64 halves + 16 padding) keep ldmatrix free of bank conflicts.
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

#include "backend/cuda/common.cuh"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/imma_common.cuh"
#include "backend/cuda/imma_tiles.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/q4k_half.cuh"
#include "quant/q4k_tiles.h"

namespace df::cuda {

namespace {

constexpr int kBM = 128, kBN = 256, kBK = 64;  // outputs, activation rows, elements per slice
constexpr int kWarps = 16, kThreads = kWarps * kWarp;
constexpr int kMT = 4, kNT = 4;          // a warp's m-tiles and n-tiles: 64 x 32
constexpr int kTiles = kBM / kQ4kTileRows;  // weight tiles a block
constexpr int kPitch = kBK * 2 + 16;     // bytes per f16 row in shared memory (conflict-free ldmatrix)
constexpr int kStages = 3;

// One stage: the slice's quants of the block's 8 tiles (512 bytes each), their headers (16 rows x
// 16 bytes each), the activations (128 rows x 64 halves). Then the two dequantized weight buffers.
constexpr int kQ = 0;
constexpr int kH = kQ + kTiles * kQ4kTileQuantStride;
constexpr int kX = kH + kTiles * kQ4kTileRows * 16;
constexpr int kStageBytes = kX + kBN * kPitch;
constexpr int kA = kStages * kStageBytes;
constexpr int kABytes = kBM * kPitch;
constexpr int kSmemBytes = kA + 2 * kABytes;
static_assert(kSmemBytes <= 227 * 1024, "one block an SM");

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__global__ void __launch_bounds__(kThreads, 1)
    deq_gemm_q4k_kernel(const Segments segs, int n_sb, const __half* __restrict__ xh, const int* __restrict__ row_shift,
                        int n_in, int rows_pad, int rows) {
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t smem_s = uint32_t(__cvta_generic_to_shared(smem));
  const int tid = int(threadIdx.x), lane = tid % kWarp, warp = tid / kWarp;
  const BlockSegment bs = block_segment(segs, kBM);
  const int r0 = int(blockIdx.x) * kBN;
  const int n_slices = n_sb * 4;

  // Copies of slice k (super-block k / 4, pair k % 4) into stage st: tiles past the weight's end
  // and activation rows past rows_pad come in as zeros.
  auto load_w = [&](int st, int k) {
    const int sb = k / 4, pair = k % 4;
    const uint32_t dst = smem_s + st * kStageBytes;
#pragma unroll
    for (int i = tid; i < kTiles * (kQ4kTileQuantStride / 16 + kQ4kTileRows); i += kThreads) {
      const int t = i % kTiles, chunk = i / kTiles;  // quants: chunks 0..31; headers: 32..47
      const bool live = bs.o0 + kQ4kTileRows * t < bs.n_out;
      const int64_t tile = live ? bs.o0 / kQ4kTileRows + t : 0;
      const uint8_t* sbp = bs.w + (size_t(tile) * size_t(n_sb) + size_t(sb)) * kQ4kTileBytes;
      if (chunk < kQ4kTileQuantStride / 16)
        cp_async16(dst + kQ + t * kQ4kTileQuantStride + 16 * chunk, sbp + kQ4kTileQuantStride * pair + 16 * chunk, live);
      else
        cp_async16(dst + kH + t * 256 + 16 * (chunk - 32), sbp + kQ4kTileHeaders + 16 * (chunk - 32), live);
    }
  };
  // Thread t copies 16-byte chunk t % 8 of activation rows t / 8 + 64 j (j < 4) each slice.
  const int x_row = tid / 8, x_chunk = tid % 8;
  constexpr int kXRowsPerPass = kThreads / 8;
  const __half* const x_src = xh + size_t(r0 + x_row) * size_t(n_in) + 8 * x_chunk;
  auto load_x = [&](int st, int k) {
    const uint32_t dst = smem_s + st * kStageBytes + kX + x_row * kPitch + 16 * x_chunk;
#pragma unroll
    for (int j = 0; j < kBN / kXRowsPerPass; ++j) {
      const bool live = r0 + x_row + kXRowsPerPass * j < rows_pad;
      cp_async16(dst + kXRowsPerPass * j * kPitch,
                 live ? x_src + size_t(kXRowsPerPass * j) * size_t(n_in) + size_t(k) * kBK : xh, live);
    }
  };
  // Dequantizes slice k (in stage st) into A buffer ab: thread t takes row t / 4, sub-block
  // 2 pair + (t / 2) % 2 of it (the low nibbles of the row's 32 quant bytes, or the high ones),
  // elements 16 (t % 2) .. + 15 of that.
  auto dequant = [&](int st, int k, int ab) {
    const int row = tid / 4, part = (tid / 2) % 2, quarter = tid % 2;
    const int t = row / kQ4kTileRows, g = row % 8, h = (row / 8) % 2;
    const uint8_t* stage = smem + st * kStageBytes;
    __half2 sc, mn;
    sub_block_scale(stage + kH + t * 256 + 16 * (row % kQ4kTileRows), 2 * (k % 4) + part, sc, mn);
    uint8_t* a_row = smem + kA + ab * kABytes + row * kPitch + 64 * part;
#pragma unroll
    for (int cc = 0; cc < 2; ++cc) {  // elements 8c .. 8c + 7 (quant bytes of lane 4g + c, half h)
      const int c = 2 * quarter + cc;
      const uint2 q = *reinterpret_cast<const uint2*>(stage + kQ + t * kQ4kTileQuantStride + 16 * (4 * g + c) + 8 * h);
      *reinterpret_cast<uint4*>(a_row + 16 * c) = q4k_eight_halves(q, 4 * part, sc, mn);
    }
  };

  // Weights first (immutable: they may load before the previous kernel ends), then activations.
  for (int st = 0; st < kStages - 1; ++st)
    if (st < n_slices) load_w(st, st);
  pdl_wait();
  pdl_trigger();
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < n_slices) load_x(st, st);
    cp_async_commit();
  }
  cp_async_wait<kStages - 2>();
  __syncthreads();
  dequant(0, 0, 0);

  float acc[kMT][kNT][4];
  zero_accumulators(acc);

  const int wm0 = (warp / 8) * 64, wn0 = (warp % 8) * 32;
  for (int k = 0; k < n_slices; ++k) {
    cp_async_wait<0>();  // slice k + 1 has landed (this thread's copies)
    __syncthreads();     // ... everyone's; slice k is dequantized; slice k - 1's stage and buffer are free
    const int next = k + kStages - 1;
    if (next < n_slices) {
      load_w(next % kStages, next);
      load_x(next % kStages, next);
    }
    cp_async_commit();

    const uint32_t a_s = smem_s + kA + (k & 1) * kABytes, x_s = smem_s + (k % kStages) * kStageBytes + kX;
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      uint32_t af[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
        ldsm_x4(af[mt], a_s + (wm0 + 16 * mt + (lane & 15)) * kPitch + 2 * (16 * ks + 8 * (lane >> 4)));
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {  // a pair of n-tiles: one ldmatrix.x4 gives their B
        uint32_t bf[4];
        ldsm_x4(bf, x_s + (wn0 + 16 * np + (lane & 7) + 8 * (lane >> 4)) * kPitch +
                        2 * (16 * ks + 8 * ((lane >> 3) & 1)));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma_f16(acc[mt][2 * np], af[mt], bf[0], bf[1]);
          mma_f16(acc[mt][2 * np + 1], af[mt], bf[2], bf[3]);
        }
      }
    }
    if (k + 1 < n_slices) dequant((k + 1) % kStages, k + 1, (k + 1) & 1);
  }

  // Outputs: accumulator j of (mt, nt) is output wm0 + 16 mt + g + 8 (j / 2), activation row
  // wn0 + 8 nt + 2 c + j % 2, scaled back by the row's power of two (exact).
  const int g = lane / 4, c = lane % 4;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int jr = 0; jr < 2; ++jr) {
      const int r = r0 + wn0 + 8 * nt + 2 * c + jr;
      if (r >= rows) continue;
      const float scale = ldexpf(1.0f, row_shift[r]);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int jo = 0; jo < 2; ++jo) {
          const int64_t o = bs.o0 + wm0 + 16 * mt + g + 8 * jo;
          if (o < bs.n_out) bs.y[int64_t(r) * bs.y_stride + o] = acc[mt][nt][2 * jo + jr] * scale;
        }
    }
}

}  // namespace

bool deq_gemm_supports(const Weight& w) {
  return w.type == GgmlType::Q4_K && w.tiles && w.n_in % kSb == 0;
}

size_t deq_gemm_scratch_bytes(int64_t n_in, int rows) {
  const size_t rows_pad = size_t(rows + 7) / 8 * 8;
  return (rows_pad * size_t(n_in) * sizeof(__half) + 255) / 256 * 256 + rows_pad * sizeof(int);
}

namespace {
bool deq_kernel_takes(const Weight& w, GgmlType type) {
  switch (type) {
    case GgmlType::Q4_K: return deq_gemm_supports(w);
    case GgmlType::Q6_K: return deq_wgmma_q6k_supports(w);
    case GgmlType::IQ4_XS: return deq_wgmma_iq4xs_supports(w);
    case GgmlType::Q5_K: return deq_wgmma_q5k_supports(w);
    case GgmlType::Q8_0: return deq_wgmma_q80_supports(w);
    default: return false;
  }
}
}  // namespace

HalfOperands half_operands(const Weight* const* ws, int n, const float* x, int rows, void* scratch, cudaStream_t s,
                           const char* what, HalfOrder order, GgmlType type) {
  const int64_t n_in = ws[0]->n_in;
  for (int i = 0; i < n; ++i)
    if (!deq_kernel_takes(*ws[i], type) || ws[i]->n_in != n_in)
      throw std::invalid_argument(std::string(what) + ": " + type_name(type) + " tile weights of one n_in only");
  const int rows_pad = (rows + 7) / 8 * 8;
  auto* xh = static_cast<__half*>(scratch);
  auto* shift = reinterpret_cast<int*>(static_cast<uint8_t*>(scratch) +
                                       (size_t(rows_pad) * size_t(n_in) * sizeof(__half) + 255) / 256 * 256);
  to_half_rows_scaled(x, rows, rows_pad, int(n_in), xh, shift, s, order);
  return {xh, shift, n_in, rows_pad};
}

void deq_gemm_group(const Weight* const* ws, float* const* ys, int n, const float* x, int rows, void* scratch,
                    cudaStream_t s) {
  if (n == 0 || rows == 0) return;
  const HalfOperands h = half_operands(ws, n, x, rows, scratch, s, "deq_gemm_group", HalfOrder::kNatural, GgmlType::Q4_K);
  (void)raise_smem_limit<deq_gemm_q4k_kernel>(kSmemBytes, /*carveout_max=*/true);
  for_each_launch(ws, ys, n, [&](const Segments& segs) {
    const Segments t = segments_in_blocks_of(segs, kBM);
    launch(deq_gemm_q4k_kernel, dim3(ceil_div(rows, kBN), unsigned(t.first_block[t.n])), dim3(kThreads), kSmemBytes,
           s, t, int(h.n_in / kSb), h.xh, h.shift, int(h.n_in), h.rows_pad, rows);
  });
}

}  // namespace df::cuda
