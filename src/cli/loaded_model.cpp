#include "cli/loaded_model.h"

#include <charconv>

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

LoadedModel load_model(const std::string& path, int threads, int max_batch_rows, bool show_progress,
                       const std::string& kv_type) {
  LoadedModel m = load_tokenizer(path);
  page_in(*m.file, show_progress);
  m.backend = make_cpu_backend(threads);
  ModelOptions opt;
  opt.max_batch_rows = max_batch_rows;
  if (kv_type == "f16") {
    opt.kv_type = GgmlType::F16;
  } else if (kv_type == "f32") {
    opt.kv_type = GgmlType::F32;
  } else {
    fail("--kv-type must be f16 or f32, not '{}'", kv_type);
  }
  m.model = std::make_unique<TargetModel>(*m.file, *m.backend, opt);
  return m;
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
