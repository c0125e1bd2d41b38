#include "cli/loaded_model.h"

#include <CLI/CLI.hpp>

#include <charconv>
#include <filesystem>

#include "backend/profiling_backend.h"
#include "util/error.h"
#include "util/progress.h"

namespace df::cli {

namespace {

// Touch every page of tensor data so the first forward does not stall on page faults, and so
// the user sees load progress on large files.
void page_in(const gguf::File& f, bool show_progress) {
  size_t total = 0, done = 0;
  for (const auto& t : f.tensors()) total += t.nbytes;
  ProgressBar bar("loading", show_progress);
  volatile uint8_t sink = 0;
  for (const auto& t : f.tensors()) {
    for (size_t off = 0; off < t.nbytes; off += 4096) sink = sink + t.data[off];
    done += t.nbytes;
    bar.update(done, total);
  }
  bar.finish();
}

}  // namespace

LoadedModel load_tokenizer(const std::string& path) {
  LoadedModel m;
  m.file = gguf::File::open(path);
  m.tokenizer = std::make_unique<Tokenizer>(Vocab::from_gguf(*m.file));
  return m;
}

std::unique_ptr<Backend> make_backend(const LoadOptions& opt) {
  std::string dev = opt.device;
  if (dev == "auto") dev = cuda_device_count() > 0 ? "cuda" : "cpu";
  if (dev == "cpu") return make_cpu_backend(opt.threads);
  if (dev == "cuda" || dev.rfind("cuda:", 0) == 0) {
    int index = 0;
    if (dev.size() > 5) {
      const char* b = dev.data() + 5;
      auto [end, ec] = std::from_chars(b, dev.data() + dev.size(), index);
      if (ec != std::errc() || end != dev.data() + dev.size() || index < 0) fail("--device '{}': bad GPU index", opt.device);
    }
    const int n = cuda_device_count();
    if (index >= n) fail("--device '{}': {} CUDA device(s) available", opt.device, n);
    return make_cuda_backend(index, opt.cuda_graphs == "on", opt.weight_layout == "tiles", opt.prefill_matmul == "f16");
  }
  fail("--device must be auto, cpu, cuda or cuda:N, not '{}'", opt.device);
}

void add_backend_flags(CLI::App* cmd, LoadOptions& opt) {
  cmd->add_option("--device", opt.device, "auto (cuda when a GPU is present), cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("-t,--threads", opt.threads, "CPU threads (0 = all cores)")->capture_default_str();
  cmd->add_option("--kv-type", opt.kv_type,
                  "KV cache type: f16, f32 (exact) or q8_0 (34 bytes per 32 elements, ~half of f16; "
                  "head dims multiple of 32)")
      ->capture_default_str();
  cmd->add_option("--cuda-graphs", opt.cuda_graphs,
                  "on: each decode/verify step on CUDA is captured once as a CUDA graph and replayed (same "
                  "results, far fewer launches); off: every kernel is launched directly (no effect on the CPU, "
                  "nor under bench --profile)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  cmd->add_option("--weight-layout", opt.weight_layout,
                  "tiles: on CUDA, Q4_K, Q5_K, IQ4_XS and Q8_0 matrices are repacked at load into 16-row tiles, "
                  "which the kernels read faster (Q4_K: same results; Q5_K, IQ4_XS, Q8_0: only tiles take the "
                  "integer kernels, with the CPU's 8-bit activations, else the f16 ones); gguf: kept in the "
                  "file's row layout (no effect on the CPU)")
      ->check(CLI::IsMember({"tiles", "gguf"}))
      ->capture_default_str();
  cmd->add_option("--prefill-matmul", opt.prefill_matmul,
                  "f16: on a Hopper GPU (sm_90a), prompt segments of 128 or more tokens multiply tiled Q4_K "
                  "matrices as an f16 tensor-core GEMM on dequantized weights (faster prefill; those rows' sums "
                  "differ from decode rows' by rounding); int8: the integer kernels decode uses (prompt rows' "
                  "products get decode rows' bits). Decode and verify rows always take the integer kernels")
      ->check(CLI::IsMember({"f16", "int8"}))
      ->capture_default_str();
}

LoadedModel load_model(const std::string& path, const LoadOptions& opt) {
  ModelOptions mo;
  mo.max_batch_rows = opt.max_batch_rows;
  if (opt.kv_type == "f16") {
    mo.kv_type = GgmlType::F16;
  } else if (opt.kv_type == "f32") {
    mo.kv_type = GgmlType::F32;
  } else if (opt.kv_type == "q8_0") {
    mo.kv_type = GgmlType::Q8_0;
  } else {
    fail("--kv-type must be f16, f32 or q8_0, not '{}'", opt.kv_type);
  }
  LoadedModel m = load_tokenizer(path);
  m.backend = make_backend(opt);
  if (opt.profile) m.backend = std::make_unique<ProfilingBackend>(std::move(m.backend));
  page_in(*m.file, opt.progress);
  m.model = std::make_unique<TargetModel>(*m.file, *m.backend, mo);
  return m;
}

std::string default_model_path() {
  // Both directories are compiled in (CMakeLists.txt sets them on the deltaflash target).
  const std::string trained = std::string(DELTAFLASH_SOURCE_DIR) + "/models/demo/qwen35-demo-target-q8_0.gguf";
  std::error_code ec;
  if (std::filesystem::is_regular_file(trained, ec)) return trained;
  return std::string(DELTAFLASH_BUILD_DIR) + "/models/demo-qwen35-tiny.gguf";
}

std::vector<int32_t> parse_token_list(const std::string& s) {
  std::vector<int32_t> out;
  const char* p = s.data();
  const char* end = p + s.size();
  while (p < end) {
    while (p < end && (*p == ' ' || *p == ',' || *p == '[' || *p == ']' || *p == '\n')) ++p;
    if (p == end) break;
    int32_t v = 0;
    auto [next, ec] = std::from_chars(p, end, v);
    if (ec != std::errc() || v < 0) fail("invalid token list '{}': expected comma-separated non-negative integers", s);
    out.push_back(v);
    p = next;
  }
  return out;
}

}  // namespace df::cli
