// The tensor-core matmul: y[r][o] = sum_k W[o][k] x[r][k] for the quantized types of
// mv_units.cuh (Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, IQ4_XS) and F16, every row count.
//
// Why. A decode step reads each weight byte once; a verify step of R <= 32 rows must too, and
// must not cost R times the arithmetic on CUDA cores. Here each weight element is dequantized
// once (mv_units.cuh, the same decode as the fp32 kernels) and multiplied with up to 32
// activation rows by mma.sync m16n8k16 (f16 inputs, fp32 accumulation): the per-row cost is a
// quarter of an instruction per weight element instead of one FFMA.
//
// Layout. Warp tile: MT m-tiles of 16 outputs x NT n-tiles of 8 activation rows. Lane (g, c) =
// (lane / 4, lane % 4) owns weight rows g and g + 8 of each m-tile and, per step, unit 4s + c of
// those rows (four lanes of a row read neighbouring units). One unit quad q of run k (4
// consecutive elements e..e+3) fills the lane's A fragment slots {2c, 2c+1, 2c+8, 2c+9}; the
// B fragment takes the same elements e..e+3 of activation row g: the mma's k dimension is a
// permutation of the row's elements, the same for A and B, so the dot product is unchanged.
// Activations are converted to f16 once per call (row-major, rows padded to 8 with zeros) so a
// lane's four B values are one 8-byte load.
//
// K is split over the S warps of a block (warp w takes steps w, w + S, ...); the block sums the
// warps' partial tiles in warp order through shared memory. S is 16 for weights with few
// outputs (so a 1024-output matrix still fills the GPU) and 8 otherwise: a property of the
// weight's shape, never of the row count. MT is 1 for up to 8 rows (more blocks in flight for
// decode) and 2 above (each activation load feeds two m-tiles).
//
// Batch invariance. A row's result depends only on its own activations: the mma computes each
// output column independently, the step order and the split are fixed by the weight's shape,
// and the final sum runs in warp order. Rows in calls of 1, 8, 17 or 40 give the same bits
// (tests/test_cuda_ops.cpp RowsAreBatchInvariant), which speculation's exactness relies on.
//
// Precision. Weights are dequantized exactly (fp32, as the CPU does) and then rounded to f16
// (2^-11 relative); activations are rounded to f16 (2^-11 relative); products and sums are fp32.
// Against the CPU backend, which rounds activations to 8 bits, this is the more accurate side.
//
// Range. A row whose largest |x| would not fit f16 (>= 65504: SwiGLU outputs of large models can
// get there) is scaled by 2^-k first, the smallest k that fits, and its sums by 2^k after: both
// exact, so such a row keeps f16's relative precision instead of turning into inf. Rows that fit
// (k = 0) are computed exactly as without the scaling, and k depends on the row alone.
#include <cuda_fp16.h>

#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mv_units.cuh"
#include "backend/cuda/wgmma_layout.h"
#include "backend/cuda/wgmma_q6k_layout.h"
#include "backend/cuda/wgmma_q80_layout.h"

namespace df::cuda {

namespace {

constexpr int kMaxNt = 4;     // n-tiles per launch group: 32 activation rows
constexpr int kRowsPerGroup = 8 * kMaxNt;

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// d += a * b for one m16n8k16 tile (f16 inputs, fp32 accumulators).
__device__ __forceinline__ void mma_16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

constexpr float kHalfMax = 65504.0f;

// One block per row: x[r] (fp32, n values) -> xh[r] (f16) scaled by 2^-k[r], k[r] the smallest
// k >= 0 with max |x[r]| * 2^-k < 65504 (rows past `rows`: zeros, k = 0), in kOrder's order of
// k (kernels.h HalfOrder). n % 4 == 0.
template <HalfOrder kOrder>
__global__ void to_half_rows(const float* __restrict__ x, int rows, int n, __half* __restrict__ xh,
                             int* __restrict__ row_shift) {
  pdl_wait();
  pdl_trigger();
  const int r = blockIdx.x;
  const float4* xr = reinterpret_cast<const float4*>(x + int64_t(r) * n);
  uint2* hr = reinterpret_cast<uint2*>(xh + int64_t(r) * n);
  const bool live = r < rows;
  float amax = 0.0f;
  if (live)
    for (int i = threadIdx.x; i < n / 4; i += blockDim.x) {
      const float4 v = xr[i];
      amax = fmaxf(amax, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
    }
  // block_sum's pattern with max: every thread gets the row's largest magnitude.
  __shared__ float part[32];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, n_warps = blockDim.x / kWarp;
  amax = warp_max(amax);
  if (lane == 0) part[warp] = amax;
  __syncthreads();
  amax = warp_max(lane < n_warps ? part[lane] : 0.0f);
  int k = 0;
  while (k < 126 && !(ldexpf(amax, -k) < kHalfMax)) ++k;  // NaN/inf rows stop at 126 and stay so
  const float scale = ldexpf(1.0f, -k);
  for (int i = threadIdx.x; i < n / 4; i += blockDim.x) {
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (live) v = xr[i];
    uint2 h;
    h.x = pack_half2(v.x * scale, v.y * scale);
    h.y = pack_half2(v.z * scale, v.w * scale);
    if constexpr (kOrder != HalfOrder::kNatural) {
      // The orders keep the pairs (4i, 4i + 1) and (4i + 2, 4i + 3) together at even positions
      // (tests/test_wgmma_layout.cpp, test_wgmma_q6k_layout.cpp, test_wgmma_q80_layout.cpp): two
      // 4-byte stores.
      const int e = 4 * i;
      int at, at2;
      if constexpr (kOrder == HalfOrder::kQ4k) {
        at = (e & ~63) + int(wgmma::fragment_k_position(uint32_t(e & 63)));
        at2 = at + 8;
      } else if constexpr (kOrder == HalfOrder::kQ6k) {
        const int sb = e / 256;
        at = (e & ~255) + int(wgmma::q6k_fragment_k_position(sb, uint32_t(e & 255)));
        at2 = (e & ~255) + int(wgmma::q6k_fragment_k_position(sb, uint32_t((e & 255) + 2)));
      } else {
        at = (e & ~63) + int(wgmma::q80_fragment_k_position(uint32_t(e & 63)));
        at2 = (e & ~63) + int(wgmma::q80_fragment_k_position(uint32_t((e & 63) + 2)));
      }
      uint32_t* h32 = reinterpret_cast<uint32_t*>(hr);
      h32[at / 2] = h.x;
      h32[at2 / 2] = h.y;
    } else {
      hr[i] = h;
    }
  }
  if (threadIdx.x == 0) row_shift[r] = k;
}

template <GgmlType T, int MT, int NT, int kSplit>
__global__ void __launch_bounds__(kSplit* kWarp)
    mma_kernel(const uint8_t* __restrict__ w, size_t row_bytes, unsigned n_units, int64_t n_out,
               const __half* __restrict__ xh, const int* __restrict__ row_shift, int n_in, int rows_pad, int rows,
               float* __restrict__ y, int64_t y_stride) {
  pdl_trigger();  // first: the next kernel may be scheduled while this one waits (see common.cuh)
  using Un = mv::Unit<T>;
  constexpr int kRegs = MT * NT * 4;
  __shared__ float part[kSplit][kRegs][kWarp];

  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int g = lane / 4, c = lane % 4;
  const int64_t o0 = int64_t(blockIdx.y) * (16 * MT);
  const int r0 = int(blockIdx.x) * kRowsPerGroup;
  const int nt_live = min(NT, (rows_pad - r0) / 8);  // n-tiles with rows (uniform)

  const uint8_t* wr[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h)  // tails: computed from the last row, not stored
      wr[mt][h] = w + size_t(min(o0 + mt * 16 + g + 8 * h, n_out - 1)) * row_bytes;
  pdl_wait();
  const __half* xr[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) xr[nt] = xh + size_t(r0 + min(nt, nt_live - 1) * 8 + g) * size_t(n_in);

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[mt][nt][j] = 0.0f;

  // Step s covers units 4s..4s+3 of each row (lane c takes 4s + c); the last may be short.
  const unsigned n_steps = (n_units + 3) / 4;
  auto unit_of = [&](unsigned s) { return min(4 * s + unsigned(c), n_units - 1); };
  auto load = [&](unsigned s, uint32_t (&raw)[MT][2][Un::kWords]) {
    const unsigned u = unit_of(s);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) Un::load(wr[mt][h], u, raw[mt][h]);
  };
  auto compute = [&](unsigned s, const uint32_t (&raw)[MT][2][Un::kWords]) {
    const unsigned u = unit_of(s);
    const bool live = 4 * s + unsigned(c) < n_units;  // lanes past the end add zeros
    typename Un::Pre pre[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) Un::prepare(raw[mt][h], u, pre[mt][h]);
#pragma unroll
    for (int k = 0; k < Un::kRuns; ++k) {
      const int64_t e0 = Un::run_start(u, k);
#pragma unroll
      for (int q = 0; q < Un::kRun / 4; ++q) {
        uint32_t b[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          uint2 v = make_uint2(0u, 0u);  // padding rows are zeros: not loaded (decode has 1 row of 8)
          if (live && r0 + nt * 8 + g < rows) v = __ldg(reinterpret_cast<const uint2*>(xr[nt] + e0 + 4 * q));
          b[nt][0] = v.x;
          b[nt][1] = v.y;
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          float v0[4], v1[4];
          Un::decode(raw[mt][0], pre[mt][0], u, k, q, v0);
          Un::decode(raw[mt][1], pre[mt][1], u, k, q, v1);
          uint32_t a[4] = {pack_half2(v0[0], v0[1]), pack_half2(v1[0], v1[1]), pack_half2(v0[2], v0[3]),
                           pack_half2(v1[2], v1[3])};
          if (!live) a[0] = a[1] = a[2] = a[3] = 0u;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            if (nt < nt_live) mma_16816(acc[mt][nt], a, b[nt][0], b[nt][1]);
        }
      }
    }
  };

  for (unsigned s = unsigned(warp); s < n_steps; s += kSplit) {
    uint32_t raw[MT][2][Un::kWords];
    load(s, raw);
    compute(s, raw);
  }

  // Sum the warps' tiles in warp order; thread t of the block finishes elements t, t + 256, ...
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int j = 0; j < 4; ++j) part[warp][(mt * NT + nt) * 4 + j][lane] = acc[mt][nt][j];
  __syncthreads();
  for (int i = int(threadIdx.x); i < kRegs * kWarp; i += kSplit * kWarp) {
    const int reg = i / kWarp, l = i % kWarp;
    const int mt = reg / (NT * 4), nt = (reg / 4) % NT, j = reg % 4;
    const int64_t o = o0 + mt * 16 + l / 4 + 8 * (j / 2);
    const int r = r0 + nt * 8 + 2 * (l % 4) + (j % 2);
    if (nt >= nt_live || o >= n_out || r >= rows) continue;
    float sum = part[0][reg][l];
#pragma unroll
    for (int w2 = 1; w2 < kSplit; ++w2) sum += part[w2][reg][l];
    y[int64_t(r) * y_stride + o] = ldexpf(sum, row_shift[r]);  // k = 0 for rows that fit f16
  }
}

template <GgmlType T, int NT, int kSplit>
void mma_launch(const Weight& w, const __half* xh, const int* row_shift, int rows, int rows_pad, float* y,
                cudaStream_t s) {
  constexpr int MT = (NT == 1 || kSplit == 16) ? 1 : 2;  // shared memory: kSplit * MT * NT * 512 bytes
  const unsigned n_units = unsigned(w.n_in / mv::Unit<T>::kElems);
  const unsigned groups = ceil_div(rows, kRowsPerGroup);
  const auto* wd = static_cast<const uint8_t*>(w.data);
  for_output_slices(w.n_out, 16 * MT, [&](int64_t o, int64_t n, unsigned blocks) {
    launch(mma_kernel<T, MT, NT, kSplit>, dim3(groups, blocks), kSplit * kWarp, 0, s,
        wd + size_t(o) * w.row_bytes, w.row_bytes, n_units, n, xh, row_shift, int(w.n_in), rows_pad, rows, y + o,
        w.n_out);
  });
}

}  // namespace

bool mma_supports(const Weight& w) { return mv::tensor_core_supports(w.type, w.n_in, w.row_bytes, w.data); }

// The f16 activations, then one int per row (its range shift k).
size_t mma_scratch_bytes(const Weight& w, int rows) {
  const size_t rows_pad = size_t((rows + 7) / 8 * 8);
  return rows_pad * size_t(w.n_in) * sizeof(__half) + rows_pad * sizeof(int);
}

void to_half_rows_scaled(const float* x, int rows, int rows_pad, int n, __half* xh, int* row_shift, cudaStream_t s,
                         HalfOrder order) {
  const int threads = std::min(1024, std::max(kWarp, (n / 4 + kWarp - 1) / kWarp * kWarp));
  launch(order == HalfOrder::kQ6k   ? to_half_rows<HalfOrder::kQ6k>
         : order == HalfOrder::kQ4k ? to_half_rows<HalfOrder::kQ4k>
         : order == HalfOrder::kQ80 ? to_half_rows<HalfOrder::kQ80>
                                    : to_half_rows<HalfOrder::kNatural>,
         unsigned(rows_pad), unsigned(threads), 0, s, x, rows, n, xh, row_shift);
}

void mma_matmul(const Weight& w, const float* x, int rows, float* y, void* scratch, cudaStream_t s) {
  const int rows_pad = (rows + 7) / 8 * 8;
  auto* xh = static_cast<__half*>(scratch);
  auto* row_shift = reinterpret_cast<int*>(xh + size_t(rows_pad) * size_t(w.n_in));  // 4-aligned: n_in % 4 == 0
  to_half_rows_scaled(x, rows, rows_pad, int(w.n_in), xh, row_shift, s);
  mv::dispatch_unit_type(w.type, [&](auto tag) {
    constexpr GgmlType T = decltype(tag)::value;
    if constexpr (T != GgmlType::F32 && T != GgmlType::BF16) {
      // Steps of 4 units; a 16-way split needs at least 2 steps a warp to pay.
      const int64_t steps = (w.n_in / mv::Unit<T>::kElems + 3) / 4;
      if (w.n_out <= 4096 && steps >= 32) {
        if (rows <= 8) mma_launch<T, 1, 16>(w, xh, row_shift, rows, rows_pad, y, s);
        else if (rows <= 16) mma_launch<T, 2, 16>(w, xh, row_shift, rows, rows_pad, y, s);
        else mma_launch<T, 4, 16>(w, xh, row_shift, rows, rows_pad, y, s);
      } else {
        if (rows <= 8) mma_launch<T, 1, 8>(w, xh, row_shift, rows, rows_pad, y, s);
        else if (rows <= 16) mma_launch<T, 2, 8>(w, xh, row_shift, rows, rows_pad, y, s);
        else mma_launch<T, 4, 8>(w, xh, row_shift, rows, rows_pad, y, s);
      }
    }
  });
}

}  // namespace df::cuda
