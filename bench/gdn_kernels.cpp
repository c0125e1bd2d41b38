// The chunked delta rule (deltanet_chunked.cu: prepare + state per piece) timed alone at the
// 27B shape, one layer (n_k 16, n_v 48, d_k = d_v = 128), for 64-4096 rows, and the recurrent
// one (deltanet.cu) for 1-512 rows (decode and verify widths with keep_state, as a verify's
// rows, and without, as decode and commit; 64-512 rows beside the chunked form, for the prompt
// length where prefill should switch forms): the median of --reps calls, each between its own
// two events (launch latency included), and the same calls back to back in a stream. Inputs as
// a forward gives them: q and k L2-normalised per head (q scaled by 1/sqrt(d_k)), decays e^g
// with g in [-1.5, 0], beta in [0.05, 0.95]. Correctness lives in test_cuda_ops (CudaOps.GdnDeltaRuleChunkedKernels); this
// only reports whether the outputs of the last call are finite.
//
//   gdn_kernels [--reps N] [--rows R]   (built with the CUDA backend; run on the GPU machine)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <utility>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/kernels.h"

namespace {

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "gdn_kernels: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

template <class T>
T* upload(const std::vector<T>& v) {
  T* p = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(v.size(), 1) * sizeof(T)), "cudaMalloc");
  check(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20, only_rows = 0;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (std::strcmp(argv[i], "--reps") == 0 && has_value) reps = std::max(3, std::atoi(argv[++i]));
    else if (std::strcmp(argv[i], "--rows") == 0 && has_value) only_rows = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: gdn_kernels [--reps N] [--rows R]\n");
      return 2;
    }
  }
  const df::GdnShape sh{16, 48, 128, 128};
  if (!df::cuda::gdn_chunked_supports(sh)) {
    std::fprintf(stderr, "gdn_kernels: the chunked kernels do not take the 27B shape\n");
    return 1;
  }
  std::printf("delta rule alone, one layer, n_k %d n_v %d d_k %d d_v %d; us: median of %d calls, each\n"
              "between its own two events; in a stream: %d calls back to back, divided by %d\n\n",
              sh.n_k, sh.n_v, sh.d_k, sh.d_v, reps, reps, reps);
  std::printf("| rows | us alone (median) | us in a stream | outputs finite |\n|---|---|---|---|\n");
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> gate(-1.5f, 0.0f), bet(0.05f, 0.95f);
  cudaStream_t s;
  check(cudaStreamCreate(&s), "stream");
  // Above 32 rows both forms: where the recurrent one (inputs staged 16 rows at a time) stops
  // being the faster is the prompt length at which prefill should switch to the chunked one.
  for (const auto& [rows, recurrent] : std::initializer_list<std::pair<int, bool>>{
           {1, true}, {2, true}, {4, true}, {8, true}, {16, true}, {32, true}, {64, true}, {64, false}, {128, true},
           {128, false}, {512, true}, {512, false}, {4096, false}}) {
    if (only_rows != 0 && rows != only_rows) continue;
    const size_t cd = size_t(sh.conv_dim());
    std::vector<float> qkv(size_t(rows) * cd), g(size_t(rows) * sh.n_v), beta(g.size()), S0(sh.state_floats());
    for (float& x : qkv) x = normal(rng);
    for (int t = 0; t < rows; ++t)
      for (int part = 0; part < 2; ++part)
        for (int h = 0; h < sh.n_k; ++h) {
          float* v = &qkv[size_t(t) * cd + size_t(part * sh.n_k + h) * sh.d_k];
          double nn = 0;
          for (int i = 0; i < sh.d_k; ++i) nn += double(v[i]) * v[i];
          const double f = (part == 0 ? 1.0 / std::sqrt(double(sh.d_k)) : 1.0) / std::sqrt(nn);
          for (int i = 0; i < sh.d_k; ++i) v[i] = float(v[i] * f);
        }
    for (float& x : g) x = gate(rng);
    for (float& x : beta) x = bet(rng);
    for (float& x : S0) x = 0.3f * normal(rng);
    float *qkv_d = upload(qkv), *g_d = upload(g), *beta_d = upload(beta), *S_d = upload(S0);
    float *out_d = nullptr, *scratch = nullptr;
    const size_t n_out = size_t(rows) * sh.n_v * sh.d_v;
    check(cudaMalloc(reinterpret_cast<void**>(&out_d), n_out * sizeof(float)), "cudaMalloc (out)");
    check(cudaMalloc(reinterpret_cast<void**>(&scratch), df::cuda::gdn_chunked_scratch_bytes(sh, rows)),
          "cudaMalloc (scratch)");
    bool keep_state = false;
    auto run = [&] {  // S carries over from call to call, as consecutive prompt chunks and steps do
      if (recurrent) df::cuda::gdn_delta_rule(sh, qkv_d, cd, g_d, beta_d, rows, S_d, out_d, keep_state, nullptr, s);
      else df::cuda::gdn_delta_rule_chunked(sh, qkv_d, cd, g_d, beta_d, rows, S_d, out_d, scratch, s);
    };
    for (const bool keep : {false, true}) {
    if (keep && (!recurrent || rows > 32)) break;  // keep_state: verify widths only
    keep_state = keep;
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    std::vector<float> us;
    for (int r = -2; r < reps; ++r) {  // two warm-ups
      cudaEventRecord(a, s);
      run();
      cudaEventRecord(b, s);
      check(cudaEventSynchronize(b), "gdn_delta_rule_chunked");
      float ms = 0;
      cudaEventElapsedTime(&ms, a, b);
      if (r >= 0) us.push_back(ms * 1e3f);
    }
    cudaEventRecord(a, s);
    for (int r = 0; r < reps; ++r) run();
    cudaEventRecord(b, s);
    check(cudaEventSynchronize(b), "gdn_delta_rule_chunked (stream)");
    check(cudaGetLastError(), "launch");
    float stream_ms = 0;
    cudaEventElapsedTime(&stream_ms, a, b);
    std::vector<float> out(n_out);
    check(cudaMemcpy(out.data(), out_d, n_out * sizeof(float), cudaMemcpyDeviceToHost), "download");
    const bool finite = std::all_of(out.begin(), out.end(), [](float x) { return std::isfinite(x); });
    std::sort(us.begin(), us.end());
    std::printf("| %d%s | %.1f | %.1f | %s |\n", rows,
                !recurrent ? " (chunked)" : keep_state ? " (recurrent, keep_state)" : " (recurrent)",
                us[us.size() / 2], 1e3 * double(stream_ms) / reps, finite ? "yes" : "NO");
    std::fflush(stdout);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    }  // keep_state
    for (float* p : {qkv_d, g_d, beta_d, S_d, out_d, scratch}) cudaFree(p);
  }
  cudaStreamDestroy(s);
  return 0;
}
