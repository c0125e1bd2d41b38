// Whether the steps of a speculative run can be replayed as CUDA graphs: the CUDA graph backend
// replays a step only when the step issues the same ops with the same arguments as one it has
// captured (backend/cuda/cuda_graphs.h), so a step whose ops depend on how many drafts were
// accepted gets a graph per count, each run op by op and captured before it is ever replayed.
// This test fingerprints every step on the CPU (op codes, matmul/embed rows and weights, copy
// pointers and sizes; upload contents are data, not ops) over a greedy DFlash run on the demo
// pair, and requires the commit steps (rollback copies + the drafter's ingest of the kept rows)
// to be one fingerprint although the kept counts vary.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>

#include "backend/forwarding_backend.h"
#include "engine/generator.h"
#include "spec/draft_source.h"
#include "spec/spec_decoder.h"
#include "support/demo_pair.h"

namespace df {
namespace {

// FNV-1a over the bytes of each value.
struct Fingerprint {
  uint64_t h = 1469598103934665603ull;
  template <class T>
  void add(const T& v) {
    const auto* p = reinterpret_cast<const unsigned char*>(&v);
    for (size_t i = 0; i < sizeof(T); ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
};

// Records one fingerprint per outermost step, and whether the step held a commit's indexed copy.
class TapeBackend final : public ForwardingBackend {
 public:
  explicit TapeBackend(Backend& inner) : ForwardingBackend(inner) {}
  struct Step {
    uint64_t fingerprint;
    bool commit;
  };
  std::vector<Step> steps;

  void begin_step() override {
    if (depth_++ == 0) f_ = Fingerprint{}, commit_ = false;
    ForwardingBackend::begin_step();
  }
  void end_step() override {
    ForwardingBackend::end_step();
    if (--depth_ == 0) steps.push_back({f_.h, commit_});
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    f_.add(dst), f_.add(src), f_.add(bytes);
    ForwardingBackend::copy(dst, src, bytes);
  }
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, int rows) override {
    f_.add(dst), f_.add(dst_pitch), f_.add(src), f_.add(src_pitch), f_.add(row_bytes), f_.add(rows);
    ForwardingBackend::copy_2d(dst, dst_pitch, src, src_pitch, row_bytes, rows);
  }
  void copy_2d_indexed(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, int rows,
                       const int32_t* index, size_t index_bytes) override {
    commit_ = depth_ > 0;
    f_.add(dst), f_.add(dst_pitch), f_.add(src), f_.add(src_pitch), f_.add(row_bytes), f_.add(rows), f_.add(index),
        f_.add(index_bytes);
    ForwardingBackend::copy_2d_indexed(dst, dst_pitch, src, src_pitch, row_bytes, rows, index, index_bytes);
  }
  void upload(void* dst, const void* src, size_t bytes) override {
    f_.add(dst), f_.add(bytes);  // where and how much, not what: uploads are a step's data
    ForwardingBackend::upload(dst, src, bytes);
  }

 private:
  void around(const OpCall& call, OpBody body) override {
    f_.add(int(call.op)), f_.add(call.weight), f_.add(call.rows);
    body();
  }
  Fingerprint f_;
  int depth_ = 0;
  bool commit_ = false;
};

TEST(SpecStepTapes, CommitStepsAreOneTapeWhateverTheKeptCount) {
  auto cpu = make_cpu_backend(1);
  TapeBackend be(*cpu);
  test::DemoPair demo(be);
  TargetModel& target = demo.target;
  const Tokenizer& tok = demo.tok;
  const std::vector<int32_t> prompt =
      tok.encode("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", false);

  constexpr int kCtx = 512, kTokens = 96;
  DFlashSource drafts(demo.draft, target, kCtx);
  SpecDecoder spec(target, drafts, &tok, kCtx, SpecOptions{false, 64, 0});  // always the full block
  GenerateOptions o;
  o.max_new_tokens = kTokens;
  o.sampling.temperature = 0;
  o.stop_at_eog = false;
  const GenerateStats st = spec.generate(prompt, o, [](int32_t) { return true; });
  ASSERT_GT(st.draft_steps, 4);

  std::set<int> kept_counts;
  for (const GenerateStats::Step& s : st.steps)
    if (s.drafts > 0) kept_counts.insert(s.committed);
  ASSERT_GE(kept_counts.size(), 3u) << "the run must commit several different row counts to test anything";
  std::map<uint64_t, int> commit_tapes;
  int commits = 0;
  for (const TapeBackend::Step& s : be.steps)
    if (s.commit) ++commit_tapes[s.fingerprint], ++commits;
  EXPECT_EQ(commits, st.draft_steps);
  EXPECT_EQ(commit_tapes.size(), 1u) << commit_tapes.size() << " different commit steps for " << kept_counts.size()
                                     << " kept counts: each would be its own CUDA graph";
}

}  // namespace
}  // namespace df
