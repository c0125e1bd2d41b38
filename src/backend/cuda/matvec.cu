// The fast matmul: y[r][o] = sum_k W[o][k] x[r][k] for the weight types of mv_units.cuh
// (Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, IQ4_XS, F32, F16, BF16), any number of rows.
//
// Layout. A warp owns G output rows and up to NR activation rows; lane l walks units l, l + 32,
// ... of its G weight rows (mv_units.cuh), so every weight byte is read once per group of NR
// rows, by aligned 16/8/4-byte loads of neighbouring addresses across the warp. Each lane
// dequantizes a quad of 4 elements for its G rows and multiplies it with a float4 of each
// activation row (G outputs share every activation load; x is small and stays in L1/L2).
// Rows beyond 16 run as further groups of 16 (grid.x, fastest-varying so the groups of one
// weight slice run together and re-read W from L2).
//
// Summation order, the same for every NR, G and unroll: acc[o][r] = fma(w_e, x_e, acc) over the
// lane's elements in order (units ascending, then runs, then quads, then elements), then the
// xor-butterfly sum over lanes. So a row's result does not depend on how many rows share the
// launch (batch invariance: tests/test_cuda_ops.cpp).
//
// Bandwidth reasoning (H200, 132 SMs, ~4 TB/s for a read stream). Decode (NR = 1) needs ~3-4
// MB of loads in flight; a row's lane has one unit per step, so with G = 2 rows per warp the
// loop issues U = 2 steps of loads before using them (n_out x 32 lanes x ~64 bytes in flight,
// ~10 MB for 5120 outputs). Per Q4_K element the decode costs ~3.4 instructions (PRMT into the
// 2^23 magic, FFMA, FADD) plus one FFMA per row: ~10^13 elements/s of issue, above the ~7e12
// elements/s that 4 TB/s of Q4_K carries. At 16 rows the FFMAs (16 per element) dominate: the
// kernel is compute-bound there (fp32 FFMA), the price of results that match the fp32 product.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mv_units.cuh"

namespace df::cuda {

namespace {

constexpr int kMvWarps = 4;    // warps per block
constexpr int kRowGroup = 16;  // activation rows per launch group

// Outputs per warp (G), unit steps in flight per lane (U), register budget (min blocks per SM).
template <int NR>
struct MvShape {
  static constexpr int G = NR <= 2 ? 2 : 4;
  static constexpr int U = NR <= 2 ? 2 : 1;
  static constexpr int kMinBlocks = NR <= 2 ? 4 : 1;
};

template <GgmlType T, int NR>
__global__ void __launch_bounds__(kMvWarps* kWarp, MvShape<NR>::kMinBlocks)
    mv_kernel(const uint8_t* __restrict__ w, size_t row_bytes, unsigned n_units, int64_t n_out,
              const float* __restrict__ x, int n_in, int rows, float* __restrict__ y, int64_t y_stride) {
  pdl_wait();
  pdl_trigger();
  using Un = mv::Unit<T>;
  constexpr int G = MvShape<NR>::G, U = MvShape<NR>::U;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t o0 = (int64_t(blockIdx.y) * kMvWarps + warp) * G;
  if (o0 >= n_out) return;  // the whole warp
  const int r0 = int(blockIdx.x) * kRowGroup;
  const int nr = min(NR, rows - r0);
  const uint8_t* wr[G];
#pragma unroll
  for (int g = 0; g < G; ++g) wr[g] = w + size_t(min(o0 + g, n_out - 1)) * row_bytes;  // tails: computed, not stored
  const float* xg = x + int64_t(r0) * n_in;
  int xo[NR];  // row offsets; rows past nr repeat the last one (computed, not stored)
#pragma unroll
  for (int r = 0; r < NR; ++r) xo[r] = min(r, nr - 1) * n_in;
  const bool vec_x = reinterpret_cast<uintptr_t>(x) % 16 == 0 && n_in % 4 == 0;  // uniform

  float acc[G][NR];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int r = 0; r < NR; ++r) acc[g][r] = 0.0f;

  for (unsigned base = unsigned(lane); base < n_units; base += U * kWarp) {
    uint32_t raw[U][G][Un::kWords];
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const unsigned u = base + unsigned(j * kWarp);
      if (u < n_units) {
#pragma unroll
        for (int g = 0; g < G; ++g) Un::load(wr[g], u, raw[j][g]);
      }
    }
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const unsigned u = base + unsigned(j * kWarp);
      if (u >= n_units) break;
      typename Un::Pre pre[G];
#pragma unroll
      for (int g = 0; g < G; ++g) Un::prepare(raw[j][g], u, pre[g]);
#pragma unroll
      for (int k = 0; k < Un::kRuns; ++k) {
        const int e0 = int(Un::run_start(u, k));
#pragma unroll
        for (int q = 0; q < Un::kRun / 4; ++q) {
          float v[G][4];
#pragma unroll
          for (int g = 0; g < G; ++g) Un::decode(raw[j][g], pre[g], u, k, q, v[g]);
#pragma unroll
          for (int r = 0; r < NR; ++r) {
            const float* xp = xg + xo[r] + e0 + 4 * q;
            float4 xv;
            if (vec_x) {
              xv = __ldg(reinterpret_cast<const float4*>(xp));
            } else {
              xv = make_float4(__ldg(xp), __ldg(xp + 1), __ldg(xp + 2), __ldg(xp + 3));
            }
#pragma unroll
            for (int g = 0; g < G; ++g) {
              acc[g][r] = __fmaf_rn(v[g][0], xv.x, acc[g][r]);
              acc[g][r] = __fmaf_rn(v[g][1], xv.y, acc[g][r]);
              acc[g][r] = __fmaf_rn(v[g][2], xv.z, acc[g][r]);
              acc[g][r] = __fmaf_rn(v[g][3], xv.w, acc[g][r]);
            }
          }
        }
      }
    }
  }

  // Every lane ends with the same sums (xor butterfly); lanes take turns storing them.
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int r = 0; r < NR; ++r) {
      const float s = warp_sum(acc[g][r]);
      if (lane == (g * NR + r) % kWarp && r < nr && o0 + g < n_out) y[int64_t(r0 + r) * y_stride + o0 + g] = s;
    }
}

template <GgmlType T, int NR>
void mv_launch(const Weight& w, const float* x, int rows, float* y, cudaStream_t s) {
  constexpr int G = MvShape<NR>::G;
  const unsigned n_units = unsigned(w.n_in / mv::Unit<T>::kElems);
  const unsigned groups = ceil_div(rows, kRowGroup);
  const auto* wd = static_cast<const uint8_t*>(w.data);
  for_output_slices(w.n_out, int64_t(kMvWarps) * G, [&](int64_t o, int64_t n, unsigned blocks) {
    launch(mv_kernel<T, NR>, dim3(groups, blocks), kMvWarps * kWarp, 0, s, wd + size_t(o) * w.row_bytes, w.row_bytes,
                                                                      n_units, n, x, int(w.n_in), rows, y + o, w.n_out);
  });
}

}  // namespace

bool mv_supports(const Weight& w) {
  // Offsets are 32-bit inside the kernel: 16 rows of n_in floats must fit.
  return w.n_in > 0 && w.n_in <= (int64_t(1) << 26) && mv::unit_supports(w.type, w.n_in, w.row_bytes, w.data);
}

void mv_matmul(const Weight& w, const float* x, int rows, float* y, cudaStream_t s) {
  mv::dispatch_unit_type(w.type, [&](auto tag) {
    constexpr GgmlType T = decltype(tag)::value;
    if (rows <= 1) {
      mv_launch<T, 1>(w, x, rows, y, s);
    } else if (rows <= 2) {
      mv_launch<T, 2>(w, x, rows, y, s);
    } else if (rows <= 4) {
      mv_launch<T, 4>(w, x, rows, y, s);
    } else if (rows <= 8) {
      mv_launch<T, 8>(w, x, rows, y, s);
    } else {
      mv_launch<T, 16>(w, x, rows, y, s);
    }
  });
}

}  // namespace df::cuda
