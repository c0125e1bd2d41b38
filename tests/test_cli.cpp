// End-to-end checks of the CLI on a generated model: the commands the README documents work,
// their outputs agree with each other and with the library, and bad input gives a clear
// error (exit code 1, a message naming the problem), never a crash.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

#include "engine/generator.h"
#include "gguf/gguf.h"
#include "model/target_model.h"
#include "support/subprocess.h"
#include "tokenizer/tokenizer.h"

namespace df {
namespace {

using test::run_command;
using test::TempDir;

const std::string kBin = DELTAFLASH_BIN;

// Runs a command expected to fail; returns its output (stdout+stderr) and exit status.
std::pair<std::string, int> run_failing(const std::string& cmd) {
  FILE* p = popen(("(" + cmd + ") 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  return {out, pclose(p)};
}

class Cli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    model_ = dir_->file("m.gguf");
    run_command(kBin + " make-model --arch qwen35 --shape tiny --type q8_0 --seed 5 -o " + model_);
  }
  static void TearDownTestSuite() { delete dir_; }
  static TempDir* dir_;
  static std::string model_;
};
TempDir* Cli::dir_ = nullptr;
std::string Cli::model_;

TEST_F(Cli, RunPrintsStatsJson) {
  const std::string out = run_command(kBin + " run -m " + model_ + " -p 'Hello world' -n 12 --temp 0 --stats-json");
  const size_t brace = out.rfind("{\"");
  ASSERT_NE(brace, std::string::npos) << out;
  const auto j = nlohmann::json::parse(out.substr(brace, out.find('\n', brace) - brace));
  EXPECT_GT(j.at("prompt_tokens").get<int>(), 0);
  EXPECT_GE(j.at("generated_tokens").get<int>(), 1);
  EXPECT_LE(j.at("generated_tokens").get<int>(), 12);
  EXPECT_GT(j.at("prefill_tok_s").get<double>(), 0);
  EXPECT_TRUE(j.contains("decode_tok_s"));
}

// "abc def" and its 16-token greedy continuation, decoded, computed in-process (what `run -p
// 'abc def' -n 16 --temp 0` must print).
std::string library_greedy_text(const std::string& model, const ModelOptions& mo) {
  auto file = gguf::File::open(model);
  auto be = make_cpu_backend(1);
  TargetModel tm(*file, *be, mo);
  Tokenizer tok(Vocab::from_gguf(*file));
  Generator gen(tm, &tok, 256);
  GenerateOptions opt;
  opt.max_new_tokens = 16;
  opt.sampling.temperature = 0;
  std::string text = "abc def";
  StreamDecoder dec(tok);
  gen.generate(tok.encode("abc def"), opt, [&](int32_t t) {
    if (!tok.is_eog(t)) text += dec.push(t);
    return true;
  });
  return text + dec.flush();
}

TEST_F(Cli, GreedyRunIsReproducibleAndMatchesLibrary) {
  // Greedy text from the CLI equals the decoded greedy continuation computed in-process.
  const std::string a = run_command(kBin + " run -m " + model_ + " -p 'abc def' -n 16 --temp 0 2>/dev/null");
  const std::string b = run_command(kBin + " run -m " + model_ + " -p 'abc def' -n 16 --temp 0 2>/dev/null");
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, library_greedy_text(model_, ModelOptions{}) + "\n");
}

// A backend flag that must not change the text: greedy output with `flag value` equals the
// default's, and `flag bad` is refused with a message naming the flag.
void expect_same_text_and_refusal(const std::string& model, const std::string& flag, const std::string& value,
                                  const std::string& bad) {
  const std::string base = run_command(kBin + " run -m " + model + " -p 'abc def' -n 24 --temp 0 2>/dev/null");
  const std::string with =
      run_command(kBin + " run -m " + model + " -p 'abc def' -n 24 --temp 0 " + flag + " " + value + " 2>/dev/null");
  EXPECT_EQ(base, with) << flag << " " << value;
  auto [out, rc] = run_failing(kBin + " run -m " + model + " -p hi " + flag + " " + bad);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find(flag), std::string::npos) << out;
}

TEST_F(Cli, CudaGraphsFlag) {
  // On a GPU this compares graph replays with direct launches; on the CPU the flag has no
  // effect. Only on|off is accepted.
  expect_same_text_and_refusal(model_, "--cuda-graphs", "off", "maybe");
}

TEST_F(Cli, WeightLayoutFlag) {
  // Q4_K kept in the file's rows against the default tiles (on a GPU the two layouts give the
  // same bits; on the CPU the flag has no effect). Only tiles|gguf is accepted.
  expect_same_text_and_refusal(model_, "--weight-layout", "gguf", "rows");
}

TEST_F(Cli, PrefillMatmulFlag) {
  // The prompt products take prompt segments of 128 or more tokens only (and only on a Hopper
  // GPU), so this short prompt gives the same text either way, on any device. Only f16|int8 is
  // accepted.
  expect_same_text_and_refusal(model_, "--prefill-matmul", "int8", "bf16");
}

TEST_F(Cli, TokenizeAndDecodeRoundTrip) {
  const std::string ids = run_command(kBin + " tokenize -m " + model_ + " 'Hello, world! <|im_end|>' 2>/dev/null");
  ASSERT_EQ(ids.front(), '[');
  const auto arr = nlohmann::json::parse(ids);
  ASSERT_GT(arr.size(), 3u);
  std::string list;
  for (size_t i = 0; i < arr.size(); ++i) list += (i ? "," : "") + std::to_string(arr[i].get<int>());
  EXPECT_EQ(run_command(kBin + " tokenize -m " + model_ + " --decode " + list + " 2>/dev/null"),
            "Hello, world! <|im_end|>\n");
  // --no-special splits the control token into ordinary pieces: more ids.
  const auto plain = nlohmann::json::parse(run_command(kBin + " tokenize -m " + model_ + " --no-special 'Hello, world! <|im_end|>' 2>/dev/null"));
  EXPECT_GT(plain.size(), arr.size());
}

TEST_F(Cli, LogitsBatchSplitsAgree) {
  const std::string toks = "1,5,9,200,33,7,8,120,64,3,2,1,90,91,92,93,94";
  run_command(kBin + " logits -m " + model_ + " --tokens " + toks + " --out " + dir_->file("a.f32"));
  run_command(kBin + " logits -m " + model_ + " --tokens " + toks + " --batch 1 --out " + dir_->file("b.f32"));
  run_command(kBin + " logits -m " + model_ + " --tokens " + toks + " --batch 5 --out " + dir_->file("c.f32"));
  const auto a = test::read_f32_file(dir_->file("a.f32"));
  const auto b = test::read_f32_file(dir_->file("b.f32"));
  const auto c = test::read_f32_file(dir_->file("c.f32"));
  auto file = gguf::File::open(model_);
  ASSERT_EQ(a.size(), 17u * size_t(file->tensor("token_embd.weight").ne[1]));
  ASSERT_EQ(b.size(), a.size());
  ASSERT_EQ(c.size(), a.size());
  // Same math in a different grouping; only float summation order differs.
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], 1e-3f * (1 + std::abs(a[i]))) << i;
    ASSERT_NEAR(a[i], c[i], 1e-3f * (1 + std::abs(a[i]))) << i;
  }
}

TEST_F(Cli, InspectShowsArchitectureAndTensors) {
  const std::string out = run_command(kBin + " inspect " + model_);
  EXPECT_NE(out.find("architecture: qwen35"), std::string::npos) << out;
  EXPECT_NE(out.find("blk.0.attn_qkv.weight"), std::string::npos);
  EXPECT_NE(out.find("chat template: yes"), std::string::npos);
  EXPECT_NE(out.find("total tensor bytes"), std::string::npos);
}

TEST_F(Cli, BenchJson) {
  const auto j = nlohmann::json::parse(run_command(kBin + " bench -m " + model_ + " -p 32 -n 8 -r 2 --json 2>/dev/null"));
  EXPECT_GT(j.at("prompt_tok_s").get<double>(), 0);
  EXPECT_GT(j.at("gen_tok_s").get<double>(), 0);
}

// bench --draft: per block the draft and verify step times, and a whole sampled speculative step
// on full logits and on top candidates (both measured: positive times).
TEST_F(Cli, BenchDraftRows) {
  const std::string draft = dir_->file("bench_draft.gguf");
  run_command(kBin + " make-model --arch qwen35-dflash-draft --target " + model_ + " --block 8 -q -o " + draft);
  const auto j = nlohmann::json::parse(
      run_command(kBin + " bench -m " + model_ + " --draft " + draft + " -p 16 -n 4 -r 2 --json 2>/dev/null"));
  const auto& rows = j.at("draft");
  ASSERT_EQ(rows.size(), 1u) << j.dump();  // block 8 only: the drafter's block
  EXPECT_EQ(rows[0].at("block").get<int>(), 8);
  EXPECT_GT(rows[0].at("draft_ms").get<double>(), 0);
  EXPECT_GT(rows[0].at("sampled_step_ms").get<double>(), 0);
  EXPECT_GT(rows[0].at("sampled_top_step_ms").get<double>(), 0);
}

// -d N: generation timed after N tokens of context (llama-bench's depth); it must reach the
// model (the table row names it) and a negative depth is a clear error.
TEST_F(Cli, BenchDepth) {
  const auto j = nlohmann::json::parse(run_command(kBin + " bench -m " + model_ + " -p 16 -n 4 -d 100 -r 1 --json 2>/dev/null"));
  EXPECT_EQ(j.at("depth").get<int>(), 100);
  EXPECT_GT(j.at("gen_tok_s").get<double>(), 0);
  const std::string table = run_command(kBin + " bench -m " + model_ + " -p 16 -n 4 -d 100 -r 1 2>/dev/null");
  EXPECT_NE(table.find("tg4 @ d100"), std::string::npos) << table;
  const auto [out, status] = run_failing(kBin + " bench -m " + model_ + " -d -5");
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("--depth"), std::string::npos) << out;
}

TEST_F(Cli, KvTypeQ8_0) {
  // --kv-type q8_0 reaches the model: greedy text equals the library's with a q8_0 cache, and
  // its logits differ from both the f32 and the f16 cache's, within a bound (below). Bad values
  // and head dims that are not whole q8_0 blocks give clear errors.
  const std::string a = run_command(kBin + " run -m " + model_ + " -p 'abc def' -n 16 --temp 0 --kv-type q8_0 2>/dev/null");
  ModelOptions mo;
  mo.kv_type = GgmlType::Q8_0;
  EXPECT_EQ(a, library_greedy_text(model_, mo) + "\n");

  const std::string toks = "1,5,9,200,33,7,8,120,64,3,2,1,90,91,92,93,94";
  std::map<std::string, std::vector<float>> lg;
  for (const char* t : {"q8_0", "f16", "f32"}) {
    const std::string out = dir_->file(std::string("kv_") + t + ".f32");
    run_command(kBin + " logits -m " + model_ + " --tokens " + toks + " --kv-type " + t + " --out " + out);
    lg[t] = test::read_f32_file(out);
  }
  const auto &q = lg["q8_0"], &f = lg["f32"];
  ASSERT_EQ(q.size(), f.size());
  EXPECT_NE(q, f) << "--kv-type q8_0 gave the f32 cache's logits exactly";
  EXPECT_NE(q, lg["f16"]) << "--kv-type q8_0 gave the f16 cache's logits exactly";
  // This model's 8-bit activations (q8_0 weights) turn any K/V rounding into activation
  // quantization flips: the f16 cache moves these logits as much (max |d| / (1 + |ref|) 0.28,
  // relative L2 1.9e-2; q8_0: 0.21, 2.0e-2). So the bound is the relative L2 one that
  // test_cuda_ops.cpp allows for 8-bit-activation noise, 0.1.
  double d2 = 0, r2 = 0;
  for (size_t i = 0; i < q.size(); ++i) d2 += (double(q[i]) - f[i]) * (double(q[i]) - f[i]), r2 += double(f[i]) * f[i];
  EXPECT_LT(std::sqrt(d2 / r2), 0.1) << "--kv-type q8_0 logits, relative L2 error against the f32 cache";

  auto [out, rc] = run_failing(kBin + " run -m " + model_ + " -p hi --kv-type q4_0");
  EXPECT_EQ(WEXITSTATUS(rc), 1) << out;
  EXPECT_NE(out.find("--kv-type must be f16, f32 or q8_0, not 'q4_0'"), std::string::npos) << out;
  run_command(kBin + " make-model --arch qwen3 --shape tiny --type q8_0 --head-dim 48 --seed 5 -o " + dir_->file("hd48.gguf"));
  auto [out2, rc2] = run_failing(kBin + " run -m " + dir_->file("hd48.gguf") + " -p hi --kv-type q8_0");
  EXPECT_EQ(WEXITSTATUS(rc2), 1) << out2;
  EXPECT_NE(out2.find("multiples of 32"), std::string::npos) << out2;
}

TEST_F(Cli, BadInputGivesClearErrors) {
  {
    auto [out, rc] = run_failing(kBin + " run -m /nonexistent.gguf -p hi");
    EXPECT_NE(rc, 0);
    EXPECT_NE(out.find("nonexistent"), std::string::npos) << out;
  }
  {
    const std::string junk = dir_->file("junk.gguf");
    std::ofstream(junk) << "this is not a gguf file at all";
    auto [out, rc] = run_failing(kBin + " run -m " + junk + " -p hi");
    EXPECT_EQ(WEXITSTATUS(rc), 1) << out;
    EXPECT_NE(out.find("junk.gguf"), std::string::npos) << out;
  }
  {
    auto [out, rc] = run_failing(kBin + " logits -m " + model_ + " --tokens 1,2,99999999 --out " + dir_->file("x.f32"));
    EXPECT_EQ(WEXITSTATUS(rc), 1) << out;
    EXPECT_NE(out.find("99999999"), std::string::npos) << out;
  }
  {
    auto [out, rc] = run_failing(kBin + " tokenize -m " + model_ + " --decode 1,x,3");
    EXPECT_EQ(WEXITSTATUS(rc), 1) << out;
  }
  {
    auto [out, rc] = run_failing(kBin + " run -m " + model_ + " -p 'a long prompt that does not fit' --ctx 4");
    EXPECT_EQ(WEXITSTATUS(rc), 1) << out;
    EXPECT_NE(out.find("context"), std::string::npos) << out;
  }
}

// run --prompt-file: every prompt of the file in one process gives the text and the stats that
// a run of its own gives (greedy), one stats line each; a prompt may hold a newline (JSON
// string lines). Bad files are clear errors naming the line.
TEST_F(Cli, RunPromptFileEqualsSeparateRuns) {
  const std::string file = dir_->file("prompts.jsonl");
  std::ofstream(file) << "\"abc def\"\n\n\"two\\nlines\"\n";
  const std::string both = run_command(kBin + " run -m " + model_ + " --prompt-file " + file + " -n 12 --temp 0 2>/dev/null");
  const std::string first = run_command(kBin + " run -m " + model_ + " -p 'abc def' -n 12 --temp 0 2>/dev/null");
  const std::string second = run_command(kBin + " run -m " + model_ + " -p \"$(printf 'two\\nlines')\" -n 12 --temp 0 2>/dev/null");
  EXPECT_EQ(both, first + second);
  {  // the demo target, whose continuation of the second prompt depends on its context
    const std::string demo = std::string(DELTAFLASH_SOURCE_DIR) + "/models/demo/qwen35-demo-target-q8_0.gguf";
    const std::string code = dir_->file("code.jsonl");
    std::ofstream(code) << "\"def fibonacci(n):\"\n\"def read_json_file(path):\"\n";
    const std::string run = kBin + " run -m " + demo + " -n 24 --temp 0 --device cpu";
    EXPECT_EQ(run_command(run + " --prompt-file " + code + " 2>/dev/null"),
              run_command(run + " -p 'def fibonacci(n):' 2>/dev/null") +
                  run_command(run + " -p 'def read_json_file(path):' 2>/dev/null"))
        << "each prompt of the file starts from an empty context";
  }
  const std::string stats =
      run_command(kBin + " run -m " + model_ + " --prompt-file " + file + " -n 12 --temp 0 --stats-json 2>&1 >/dev/null");
  int lines = 0;
  for (size_t at = stats.find("{\""); at != std::string::npos; at = stats.find("{\"", at + 1)) {
    const auto j = nlohmann::json::parse(stats.substr(at, stats.find('\n', at) - at));
    EXPECT_GE(j.at("generated_tokens").get<int>(), 1);
    ++lines;
  }
  EXPECT_EQ(lines, 2) << stats;
  {
    auto [out, rc] = run_failing(kBin + " run -m " + model_ + " --prompt-file " + file + " -p hi");
    EXPECT_EQ(WEXITSTATUS(rc), 1) << out;
    EXPECT_NE(out.find("either"), std::string::npos) << out;
  }
  {
    const std::string bad = dir_->file("bad.jsonl");
    std::ofstream(bad) << "\"fine\"\nnot json\n";
    auto [out, rc] = run_failing(kBin + " run -m " + model_ + " --prompt-file " + bad);
    EXPECT_EQ(WEXITSTATUS(rc), 1) << out;
    EXPECT_NE(out.find("line 2"), std::string::npos) << out;
  }
}

}  // namespace
}  // namespace df
