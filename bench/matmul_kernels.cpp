// Each CUDA matmul kernel on the weight shapes of a 27B-shaped decode, verify and prefill step,
// timed alone: the integer tensor-core kernels (imma_matmul.cu for Q4_K, which sends calls of
// more than 32 rows to the prefill GEMM, imma_gemm.cu, that GEMM also alone, without the
// activation quantization; imma_q6k.cu for Q6_K, every row count; imma_iq4xs.cu and
// imma_iq4xs_gemm.cu for IQ4_XS, on its tile layout alone), the f16 tensor-core one
// (mma_matmul.cu) and the fp32 CUDA-core one (matvec.cu), wherever each takes the weight (so
// Q4_K and Q6_K show the f16 kernel they replace too). Prints microseconds, weight bytes per second against the
// device's copy bandwidth (the decode measure) and TFLOPS-equivalent, 2 n_in n_out rows / time
// (the prefill measure), so a kernel change is judged in one call without a model. Q8_0's
// integer kernels (imma_q80.cu, and imma_q80_gemm.cu above 32 rows) read only the tile layout
// (quant/q80_tiles.h): its "tile layout" lines, beside the f16 kernel on GGUF rows that they
// replace, and "GEMM alone" on tiles. For Q6_K the
// imma lines of more than 32 rows are the prefill GEMM (imma_q6k_gemm.cu) with its activation
// quantizer; "ffn down" and "attn k" (the shape of attn_v) at 512 and 4096 rows are the ones its
// block shapes were chosen for; its "tile layout" lines (quant/q6k_tiles.h, as Q4_K's: the same
// bits, checked here) and "GEMM alone" (on tiles, x quantized before) are the kTiles variants
// of imma_q6k.cu and imma_q6k_gemm.cu. Q5_K takes the integer kernels in its tile layout only
// (quant/q5k_tiles.h): its imma lines are the "tile layout" ones (the decode kernel, the GEMM
// above 32 rows) and the GEMM alone on the tiles. The f16 prompt GEMMs on dequantized tiles (not
// routed; their activation conversion included): deq_gemm.cu and deq_wgmma.cu for Q4_K,
// deq_wgmma_q6k.cu for Q6_K, deq_wgmma_iq4xs.cu for IQ4_XS, deq_wgmma_q5k.cu for Q5_K,
// deq_wgmma_q80.cu for Q8_0, beside the integer GEMM lines of their type. Weights rotate over
// copies larger than the L2 cache, as a decode step streams each weight once.
//
//   matmul_kernels [--reps N] [--type T] [--matrix M] [--rows R] [--kernel K]
//     (built with the CUDA backend; run on the GPU machine). The filters keep the lines whose type
//     name is T, matrix name contains M, row count is R, kernel name contains K (so a profiler
//     such as Nsight Compute can be pointed at one kernel's launches).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/kernels.h"
#include "quant/iq4xs_tiles.h"
#include "quant/q4k_tiles.h"
#include "quant/q5k_tiles.h"
#include "quant/q6k_tiles.h"
#include "quant/q80_tiles.h"
#include "quant/quantize.h"
#include "quant/types.h"

namespace {

using df::GgmlType;
using df::Weight;

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "matmul_kernels: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

struct Shape {
  const char* what;
  int64_t n_in, n_out;
};

// Decode-step matrices of the 27B shape (hidden 5120, FFN 17408, 24 x 256 attention, 48 x 128
// DeltaNet values), one of each size class.
const Shape kShapes[] = {{"ffn gate/up", 5120, 17408}, {"ffn down", 17408, 5120}, {"gdn qkv", 5120, 10240},
                         {"attn/gdn out", 6144, 5120}, {"attn k", 5120, 1024}, {"gdn beta", 5120, 48}};
const GgmlType kTypes[] = {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::IQ4_XS};
// 512: a prefill chunk; 4096: the tensor-core kernels only (the fp32 one stops at 512).
const int kRows[] = {1, 4, 8, 16, 32, 128, 512, 4096};
constexpr int kMvMaxRows = 512;
constexpr size_t kRotateBytes = size_t(512) << 20;  // > the H200's 50 MB L2, ten times over

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Milliseconds of `reps` calls of run(i) back to back on the default stream, after one untimed.
template <class F>
float stream_ms(int reps, F run) {
  cudaEvent_t t0, t1;
  cudaEventCreate(&t0);
  cudaEventCreate(&t1);
  run(-1);
  cudaEventRecord(t0);
  for (int i = 0; i < reps; ++i) run(i);
  cudaEventRecord(t1);
  check(cudaEventSynchronize(t1), "bandwidth probe");
  float ms = 0;
  cudaEventElapsedTime(&ms, t0, t1);
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  return ms;
}

constexpr size_t kProbeBytes = size_t(1) << 30;
constexpr int kProbeReps = 10;

double copy_gb_s() {
  void *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, kProbeBytes), "cudaMalloc");
  check(cudaMalloc(&b, kProbeBytes), "cudaMalloc");
  check(cudaMemset(a, 1, kProbeBytes), "cudaMemset");
  const float ms = stream_ms(kProbeReps, [&](int i) {
    cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, kProbeBytes, cudaMemcpyDeviceToDevice);
  });
  cudaFree(a);
  cudaFree(b);
  return 2.0 * double(kProbeBytes) * kProbeReps / (ms / 1e3) / 1e9;  // bytes read + written
}

// The read-only rate over 1 GiB (the decode roofline: a decode step only reads its weights).
double read_gb_s() {
  void* a = nullptr;
  unsigned* sink = nullptr;
  check(cudaMalloc(&a, kProbeBytes), "cudaMalloc");
  check(cudaMalloc(reinterpret_cast<void**>(&sink), sizeof(unsigned)), "cudaMalloc");
  check(cudaMemset(a, 1, kProbeBytes), "cudaMemset");
  const float ms = stream_ms(kProbeReps, [&](int) { df::cuda::read_probe(a, kProbeBytes, sink, nullptr); });
  cudaFree(a);
  cudaFree(sink);
  return double(kProbeBytes) * kProbeReps / (ms / 1e3) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 30, only_rows = 0;
  std::string only_type, only_matrix, only_kernel;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--reps") == 0 && has_value) reps = std::max(3, std::atoi(argv[++i]));
    else if (std::strcmp(argv[i], "--type") == 0 && has_value) only_type = argv[++i];
    else if (std::strcmp(argv[i], "--matrix") == 0 && has_value) only_matrix = argv[++i];
    else if (std::strcmp(argv[i], "--rows") == 0 && has_value) only_rows = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--kernel") == 0 && has_value) only_kernel = argv[++i];
    else {
      std::fprintf(stderr, "usage: matmul_kernels [--reps N] [--type T] [--matrix M] [--rows R] [--kernel K]\n");
      return 2;
    }
  }
  const double copy = copy_gb_s(), read = read_gb_s();
  std::printf("copy bandwidth %.0f GB/s (read + written); read-only bandwidth %.0f GB/s\n", copy, read);
  std::printf("us alone: median of %d calls, each between its own two events (launch latency included); us in a\n"
              "stream: %d calls back to back between two events, divided by %d (as a step runs them; the GB/s,\n"
              "%% and TFLOPS columns use this)\n\n", reps, reps, reps);
  std::printf("| type | matrix | n_in x n_out | rows | kernel | us alone | us in a stream | weight GB/s | %% of copy | %% of read | TFLOPS |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|\n");
  cudaStream_t s;
  check(cudaStreamCreate(&s), "stream");
  unsigned* sink = nullptr;  // the probes' never-written output
  check(cudaMalloc(reinterpret_cast<void**>(&sink), sizeof(unsigned)), "cudaMalloc (sink)");
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (GgmlType t : kTypes) {
    if (!only_type.empty() && only_type != df::type_name(t)) continue;
    for (const Shape& sh : kShapes) {
      if (!only_matrix.empty() && std::string(sh.what).find(only_matrix) == std::string::npos) continue;
      const size_t row_bytes = df::row_size(t, sh.n_in), w_bytes = row_bytes * size_t(sh.n_out);
      // One quantized matrix, copied until the copies outgrow the L2 cache.
      std::vector<uint8_t> host(w_bytes);
      std::vector<float> src(static_cast<size_t>(sh.n_in));
      for (int64_t o = 0; o < sh.n_out; ++o) {
        for (float& f : src) f = normal(rng);
        df::quantize_row(t, src.data(), host.data() + size_t(o) * row_bytes, sh.n_in);
      }
      const size_t stride = (w_bytes + 255) / 256 * 256;
      const int copies = int(std::max<size_t>(1, kRotateBytes / stride));
      uint8_t* dev = nullptr;
      check(cudaMalloc(reinterpret_cast<void**>(&dev), stride * size_t(copies)), "cudaMalloc (weights)");
      check(cudaMemcpy(dev, host.data(), w_bytes, cudaMemcpyHostToDevice), "upload");
      for (int c = 1; c < copies; ++c)
        check(cudaMemcpy(dev + stride * size_t(c), dev, w_bytes, cudaMemcpyDeviceToDevice), "replicate");
      const int max_rows = kRows[std::size(kRows) - 1];
      std::vector<float> xh(size_t(max_rows) * size_t(sh.n_in));
      for (float& f : xh) f = normal(rng) * 50.0f;
      float *x = nullptr, *y = nullptr;
      void* scratch = nullptr;
      check(cudaMalloc(reinterpret_cast<void**>(&x), xh.size() * sizeof(float)), "cudaMalloc (x)");
      check(cudaMalloc(reinterpret_cast<void**>(&y), size_t(max_rows) * size_t(sh.n_out) * sizeof(float)), "cudaMalloc (y)");
      check(cudaMemcpy(x, xh.data(), xh.size() * sizeof(float), cudaMemcpyHostToDevice), "upload x");
      Weight w0{t, sh.n_in, sh.n_out, dev, row_bytes};
      // Q4_K, Q5_K, Q6_K, IQ4_XS, Q8_0: the same copies in the tile layout (quant/q4k_tiles.h,
      // q5k_tiles.h, q6k_tiles.h, iq4xs_tiles.h, q80_tiles.h), as CudaBackend::upload_matrix
      // stores them (the integer kernels of Q5_K, IQ4_XS and Q8_0 read only those).
      const bool q5k = t == GgmlType::Q5_K, q6k = t == GgmlType::Q6_K, iq4 = t == GgmlType::IQ4_XS,
                 q80 = t == GgmlType::Q8_0;
      const bool tiles_only = q5k || iq4 || q80;  // no GGUF-row integer kernel to compare with
      Weight tile_probe = w0;  // (imma_supports: whether the tile kernels take it)
      tile_probe.tiles = true;
      uint8_t* tiles_dev = nullptr;
      size_t tiles_stride = 0;
      if ((t == GgmlType::Q4_K || q6k || tiles_only) && df::cuda::imma_supports(tile_probe)) {
        const int n_sb = int(sh.n_in / 256);
        std::vector<uint8_t> tiles(q5k   ? df::q5k_tiles_bytes(sh.n_out, n_sb)
                                   : q6k ? df::q6k_tiles_bytes(sh.n_out, n_sb)
                                   : iq4 ? df::iq4xs_tiles_bytes(sh.n_out, n_sb)
                                   : q80 ? df::q80_tiles_bytes(sh.n_out, n_sb)
                                         : df::q4k_tiles_bytes(sh.n_out, n_sb));
        if (q5k) df::q5k_to_tiles(host.data(), sh.n_out, n_sb, tiles.data());
        else if (q6k) df::q6k_to_tiles(host.data(), sh.n_out, n_sb, tiles.data());
        else if (iq4) df::iq4xs_to_tiles(host.data(), sh.n_out, n_sb, tiles.data());
        else if (q80) df::q80_to_tiles(host.data(), sh.n_out, n_sb, tiles.data());
        else df::q4k_to_tiles(host.data(), sh.n_out, n_sb, tiles.data());
        tiles_stride = (tiles.size() + 255) / 256 * 256;
        check(cudaMalloc(reinterpret_cast<void**>(&tiles_dev), tiles_stride * size_t(copies)), "cudaMalloc (tiles)");
        for (int c = 0; c < copies; ++c)
          check(cudaMemcpy(tiles_dev + tiles_stride * size_t(c), tiles.data(), tiles.size(), cudaMemcpyHostToDevice),
                "upload tiles");
      }
      // The tile copy holding the same weight as GGUF copy w (as CudaBackend::upload_matrix stores it).
      auto tiles_of = [&](const Weight& w) {
        const size_t copy = size_t(static_cast<const uint8_t*>(w.data) - dev) / stride;
        return Weight{t, sh.n_in, sh.n_out, tiles_dev + tiles_stride * copy, row_bytes, /*tiles=*/true};
      };
      auto imma = [&](const Weight& w, int rows) {
        const Weight* ws[1] = {&w};
        float* ys[1] = {y};
        df::cuda::imma_matmul_group(ws, ys, 1, x, rows, scratch, s);
      };
      const size_t scratch_bytes =
          std::max({df::cuda::imma_scratch_bytes(w0, max_rows), df::cuda::mma_scratch_bytes(w0, max_rows),
                    df::cuda::imma_q80_scratch_bytes(sh.n_in, max_rows), df::cuda::deq_gemm_scratch_bytes(sh.n_in, max_rows)});
      check(cudaMalloc(&scratch, scratch_bytes), "cudaMalloc (scratch)");

      struct Kernel {
        const char* name;
        bool takes;
        int min_rows, max_rows;
        std::function<void(int)> prepare;  // untimed, before the timed calls of a row count
        std::function<void(const Weight&, int)> run;
      };
      // The Q4_K decode kernel's reads alone, in its layout and in a tile-contiguous one.
      auto probe = [&](const char* name, bool tile, int ahead) {
        return Kernel{name, t == GgmlType::Q4_K && sh.n_out % 16 == 0, 1, 1, nullptr,
                      [&, tile, ahead](const Weight& w, int) {
                        df::cuda::q4k_pattern_probe(w.data, sh.n_in, sh.n_out, row_bytes, tile, ahead, sink, s);
                      }};
      };
      // The GEMMs alone: Q4_K on GGUF rows, Q5_K, Q6_K, IQ4_XS and Q8_0 on tiles (the only layout
      // the GEMMs of Q5_K, IQ4_XS and Q8_0 read); Q6_K and Q8_0 with their own activation formats.
      // Q6_K's GEMM picks its block shape itself (no shape lines).
      auto gemm_quantize = [&](int rows) {
        if (q80) df::cuda::imma_quantize_q80(x, sh.n_in, rows, scratch, s);
        else if (q6k) df::cuda::imma_quantize_q6k(x, sh.n_in, rows, scratch, s);
        else df::cuda::imma_quantize(x, sh.n_in, rows, scratch, s);
      };
      auto gemm_weight = [&](const Weight& w) { return tiles_only || q6k ? tiles_of(w) : w; };
      const bool gemm_alone = (t == GgmlType::Q4_K && df::cuda::imma_supports(w0)) ||
                              ((tiles_only || q6k) && tiles_dev != nullptr);
      auto gemm_shape = [&](const char* name, df::cuda::ImmaGemmShape shape) {
        return Kernel{name, gemm_alone && !q6k, 128, max_rows, gemm_quantize, [&, shape](const Weight& w, int rows) {
                        df::cuda::imma_gemm_quantized(gemm_weight(w), y, rows, scratch, s, shape);
                      }};
      };
      // A prompt GEMM on dequantized tiles of type `type` (deq_gemm.cu, deq_wgmma.cu: Q4_K;
      // deq_wgmma_q6k.cu: Q6_K; deq_wgmma_iq4xs.cu: IQ4_XS; deq_wgmma_q5k.cu: Q5_K;
      // deq_wgmma_q80.cu: Q8_0): same inputs, same scratch.
      using DeqGroup = void (*)(const Weight* const*, float* const*, int, const float*, int, void*, cudaStream_t);
      auto deq = [&](const char* name, GgmlType type, DeqGroup group) {
        return Kernel{name, t == type && tiles_dev != nullptr, df::cuda::kImmaGemmMinRows + 1, max_rows,
                      nullptr, [&, group](const Weight& w, int rows) {
                        const Weight tw = tiles_of(w);
                        const Weight* ws[1] = {&tw};
                        float* ys[1] = {y};
                        group(ws, ys, 1, x, rows, scratch, s);
                      }};
      };
      // The Q4_K / Q5_K tile decode kernel with 1, 2 or 4 m-tile groups a CUDA block (x quantized
      // before; imma_decode_quantized): the groups of a block share their activation reads.
      const bool decode_groups = (t == GgmlType::Q4_K || q5k) && tiles_dev != nullptr;
      auto decode_shape = [&](const char* name, int groups, int blocks_per_sm = 0) {
        return Kernel{name, decode_groups, blocks_per_sm == 0 ? 1 : 9, blocks_per_sm == 0 ? df::cuda::kImmaGemmMinRows : 16,
                      [&](int rows) { df::cuda::imma_quantize(x, sh.n_in, rows, scratch, s); },
                      [&, groups, blocks_per_sm](const Weight& w, int rows) {
                        df::cuda::imma_decode_quantized(tiles_of(w), y, rows, scratch, s, {groups, blocks_per_sm});
                      }};
      };
      const Kernel kernels[] = {
          {"imma (int8 tensor cores)", df::cuda::imma_supports(w0), 1, max_rows, nullptr,
           [&](const Weight& w, int rows) {
             const Weight* ws[1] = {&w};
             float* ys[1] = {y};
             df::cuda::imma_matmul_group(ws, ys, 1, x, rows, scratch, s);
           }},
          {q6k ? "imma GEMM alone, tile layout (x quantized before)" : "imma GEMM alone (x quantized before)", gemm_alone,
           df::cuda::kImmaGemmMinRows + 1, max_rows, gemm_quantize,
           [&](const Weight& w, int rows) { df::cuda::imma_gemm_quantized(gemm_weight(w), y, rows, scratch, s); }},
          // The same GEMM in each of its block shapes (the default picks one of the first two).
          gemm_shape(q80 ? "imma GEMM 128x64, 8 warps" : "imma GEMM 128x64, 4 warps",
                     df::cuda::ImmaGemmShape::k128x64Warps4),
          gemm_shape("imma GEMM 128x128, 8 warps", df::cuda::ImmaGemmShape::k128x128Warps8),
          gemm_shape("imma GEMM 128x128, 16 warps", df::cuda::ImmaGemmShape::k128x128Warps16),
          {q5k   ? "imma, tile layout (quant/q5k_tiles.h)"
           : q6k ? "imma, tile layout (quant/q6k_tiles.h)"
           : iq4 ? "imma, tile layout (quant/iq4xs_tiles.h)"
           : q80 ? "imma, tile layout (quant/q80_tiles.h)"
                 : "imma, tile layout (quant/q4k_tiles.h)",
           tiles_dev != nullptr, 1, max_rows, nullptr, [&](const Weight& w, int rows) { imma(tiles_of(w), rows); }},
          decode_shape("imma decode alone, tiles, 1 group a block (x quantized before)", 1),
          decode_shape("imma decode alone, tiles, 2 groups a block (x quantized before)", 2),
          decode_shape("imma decode alone, tiles, 4 groups a block (x quantized before)", 4),
          decode_shape("imma decode alone, tiles, 1 group a block, 3 blocks an SM (x quantized before)", 1, 3),
          decode_shape("imma decode alone, tiles, 2 groups a block, 3 blocks an SM (x quantized before)", 2, 3),
          probe("probe: reads only, GGUF rows, 1 super-block in flight", false, 1),
          probe("probe: reads only, GGUF rows, 3 in flight", false, 3),
          probe("probe: reads only, tile-contiguous, 1 in flight", true, 1),
          probe("probe: reads only, tile-contiguous, 3 in flight", true, 3),
          // The prompt GEMMs on dequantized Q4_K tiles (f16 mma.sync, and Hopper's warpgroup mma
          // on sm_90a) and Q6_K, IQ4_XS, Q5_K and Q8_0 tiles (wgmma), their activation conversion included.
          deq("f16 GEMM on dequantized tiles (deq_gemm.cu)", GgmlType::Q4_K, df::cuda::deq_gemm_group),
          deq("f16 wgmma GEMM on dequantized tiles (deq_wgmma.cu)", GgmlType::Q4_K, df::cuda::deq_wgmma_group),
          deq("f16 wgmma GEMM on dequantized tiles, 128-output blocks (deq_wgmma.cu)", GgmlType::Q4_K,
              df::cuda::deq_wgmma_narrow_group),
          deq("f16 wgmma GEMM on dequantized tiles (deq_wgmma_q6k.cu)", GgmlType::Q6_K, df::cuda::deq_wgmma_q6k_group),
          deq("f16 wgmma GEMM on dequantized tiles (deq_wgmma_iq4xs.cu)", GgmlType::IQ4_XS,
              df::cuda::deq_wgmma_iq4xs_group),
          deq("f16 wgmma GEMM on dequantized tiles (deq_wgmma_q5k.cu)", GgmlType::Q5_K, df::cuda::deq_wgmma_q5k_group),
          deq("f16 wgmma GEMM on dequantized tiles (deq_wgmma_q80.cu)", GgmlType::Q8_0, df::cuda::deq_wgmma_q80_group),
          {"mma (f16 tensor cores)", df::cuda::mma_supports(w0), 1, max_rows, nullptr,
           [&](const Weight& w, int rows) { df::cuda::mma_matmul(w, x, rows, y, scratch, s); }},
          {"mv (fp32 CUDA cores)", df::cuda::mv_supports(w0), 1, kMvMaxRows, nullptr,
           [&](const Weight& w, int rows) { df::cuda::mv_matmul(w, x, rows, y, s); }}};
      if (tiles_dev != nullptr && !tiles_only && only_kernel.empty()) {  // the tile kernel gives the GGUF kernel's bits (others: tiles only)
        std::string verdict = "equal";
        for (int rows : {1, 2, 8, 9, 16, 32, 33, 512}) {
          const size_t n = size_t(rows) * size_t(sh.n_out);
          std::vector<float> a(n), b(n);
          imma(w0, rows);
          check(cudaMemcpyAsync(a.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost, s), "download");
          check(cudaMemsetAsync(y, 0xFF, n * sizeof(float), s), "poison");
          imma(tiles_of(w0), rows);
          check(cudaMemcpyAsync(b.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost, s), "download");
          check(cudaStreamSynchronize(s), "tile check");
          if (std::memcmp(a.data(), b.data(), n * sizeof(float)) != 0) verdict = "DIFFER at " + std::to_string(rows) + " rows";
        }
        std::printf("| %s | %s | %lld x %lld | 1-512 | tile layout vs GGUF rows, same bits: %s | | | | | | |\n",
                    df::type_name(t), sh.what, static_cast<long long>(sh.n_in), static_cast<long long>(sh.n_out),
                    verdict.c_str());
      }
      if (decode_groups) {  // every block shape of the decode kernel gives the same bits
        std::string verdict = "equal";
        for (int rows : {1, 2, 8, 9, 16, 32}) {
          const size_t n = size_t(rows) * size_t(sh.n_out);
          std::vector<float> a(n), b(n);
          df::cuda::imma_quantize(x, sh.n_in, rows, scratch, s);
          const df::cuda::ImmaDecodeShape shapes[] = {{1, 0}, {2, 0}, {4, 0}, {1, 3}, {2, 3}};  // {1, 0}: the reference
          for (const df::cuda::ImmaDecodeShape& shape : shapes) {
            const bool reference = &shape == &shapes[0];
            check(cudaMemsetAsync(y, 0xFF, n * sizeof(float), s), "poison");
            df::cuda::imma_decode_quantized(tiles_of(w0), y, rows, scratch, s, shape);
            check(cudaMemcpyAsync((reference ? a : b).data(), y, n * sizeof(float), cudaMemcpyDeviceToHost, s),
                  "download");
            check(cudaStreamSynchronize(s), "decode shape check");
            if (!reference && std::memcmp(a.data(), b.data(), n * sizeof(float)) != 0)
              verdict = "DIFFER at " + std::to_string(rows) + " rows, " + std::to_string(shape.groups_per_block) +
                        " groups, " + std::to_string(shape.blocks_per_sm) + " blocks an SM";
          }
        }
        std::printf("| %s | %s | %lld x %lld | 1-32 | decode kernel, 2 and 4 groups a block, 3 blocks an SM vs 1 group, same bits: %s | | | | | | |\n",
                    df::type_name(t), sh.what, static_cast<long long>(sh.n_in), static_cast<long long>(sh.n_out),
                    verdict.c_str());
      }
      for (int rows : kRows) {
        if (only_rows != 0 && rows != only_rows) continue;
        for (const Kernel& k : kernels) {
          if (!k.takes || rows < k.min_rows || rows > k.max_rows) continue;
          if (!only_kernel.empty() && std::string(k.name).find(only_kernel) == std::string::npos) continue;
          if (k.prepare) k.prepare(rows);
          cudaEvent_t a, b;
          cudaEventCreate(&a);
          cudaEventCreate(&b);
          std::vector<float> us;
          for (int r = -2; r < reps; ++r) {  // two warm-ups
            const Weight w{t, sh.n_in, sh.n_out, dev + stride * size_t((r + 2) % copies), row_bytes};
            cudaEventRecord(a, s);
            k.run(w, rows);
            cudaEventRecord(b, s);
            check(cudaEventSynchronize(b), k.name);
            float ms = 0;
            cudaEventElapsedTime(&ms, a, b);
            if (r >= 0) us.push_back(ms * 1e3f);
          }
          // The same calls back to back: what a step sees (launches overlap, no host in between).
          cudaEventRecord(a, s);
          for (int r = 0; r < reps; ++r)
            k.run(Weight{t, sh.n_in, sh.n_out, dev + stride * size_t(r % copies), row_bytes}, rows);
          cudaEventRecord(b, s);
          check(cudaEventSynchronize(b), k.name);
          float stream_ms = 0;
          cudaEventElapsedTime(&stream_ms, a, b);
          check(cudaGetLastError(), k.name);
          cudaEventDestroy(a);
          cudaEventDestroy(b);
          const double alone_us = median(us), t_us = 1e3 * double(stream_ms) / reps;
          const double gb_s = double(w_bytes) / (t_us * 1e-6) / 1e9;
          const double tflops = 2.0 * double(sh.n_in) * double(sh.n_out) * rows / (t_us * 1e-6) / 1e12;
          std::printf("| %s | %s | %lld x %lld | %d | %s | %.1f | %.1f | %.0f | %.1f | %.1f | %.1f |\n", df::type_name(t),
                      sh.what, static_cast<long long>(sh.n_in), static_cast<long long>(sh.n_out), rows, k.name,
                      alone_us, t_us, gb_s, 100.0 * gb_s / copy, 100.0 * gb_s / read, tflops);
        }
      }
      std::fflush(stdout);
      cudaFree(tiles_dev);
      cudaFree(scratch);
      cudaFree(y);
      cudaFree(x);
      cudaFree(dev);
    }
  }
  cudaFree(sink);
  cudaStreamDestroy(s);
  return 0;
}
