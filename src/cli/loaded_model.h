// Opening a model file for the CLI commands: the GGUF, its tokenizer, the backend and the
// target model, with a progress bar while the weights are paged in.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"
#include "gguf/gguf.h"
#include "model/target_model.h"
#include "tokenizer/tokenizer.h"

namespace CLI {
class App;
}

namespace df::cli {

// Prompt rows per prefill forward when one request has the device (run, bench's -b): larger
// chunks run the prompt GEMMs nearer their peak (27B shape, H100: a 4096-token prompt at 3026
// tok/s in chunks of 512, 3491 in 2048, 3501 in 4096; docs/performance.md, session 11) for
// ~0.4 MB of activation buffers a row. The server keeps 512 (serve -b): its decode rows share
// each prefill step, and a 2048-row step would stall them ~4x longer.
constexpr int kSingleRequestPromptChunk = 2048;

struct LoadedModel {
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<TargetModel> model;
};

// How run, bench and logits open a model; the flags are registered by add_backend_flags.
struct LoadOptions {
  std::string device = "auto";  // auto (cuda when a GPU is present, else cpu) | cpu | cuda[:N]
  int threads = 0;              // CPU threads, 0 = all cores
  std::string kv_type = "f16";  // KV cache storage: f16 | f32 | q8_0
  int max_batch_rows = 512;     // largest prefill chunk
  bool progress = true;         // progress bar while loading
  bool profile = false;         // wrap the backend in a ProfilingBackend (bench)
  std::string cuda_graphs = "on";  // on: CUDA steps replay as CUDA graphs | off: direct launches
  std::string weight_layout = "tiles";  // tiles: Q4_K, Q5_K, IQ4_XS, Q8_0 repacked for the CUDA kernels | gguf: as in the file
  std::string prefill_matmul = "f16";   // f16: long prompt chunks' Q4_K products as an f16 GEMM (Hopper) | int8: decode's kernels
};

// Adds --device, --threads, --kv-type, --cuda-graphs, --weight-layout and --prefill-matmul to a subcommand.
void add_backend_flags(CLI::App* cmd, LoadOptions& opt);

LoadedModel load_model(const std::string& path, const LoadOptions& opt);
// Only the file and tokenizer (tokenize/inspect need no weights).
LoadedModel load_tokenizer(const std::string& path);

// The model used when -m is not given: the trained demo target
// <source dir>/models/demo/qwen35-demo-target-q8_0.gguf when it exists, else the tiny
// random-weight demo model generated in the build dir.
std::string default_model_path();

// Parses "1,2,3" into token ids; throws df::Error on anything else.
std::vector<int32_t> parse_token_list(const std::string& s);

}  // namespace df::cli
