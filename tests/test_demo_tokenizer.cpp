// The demo models' tokenizer (models/demo/*.gguf, trained by train/run_demo.py) against the Hugging Face
// `tokenizers` library: tests/data/demo/tokenizer_cases.json holds ~30 held-out strings (code, chat text with
// special tokens, unicode, combining marks, whitespace runs, numbers, contractions) and the ids HF gave
// them. Our tokenizer, built from the vocab stored in each committed GGUF, must give the same ids and
// decode them back to the same text.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/chat_prompt.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace df {
namespace {

using nlohmann::json;

const std::string kCases = std::string(DELTAFLASH_TEST_DATA) + "/demo/tokenizer_cases.json";
const std::string kModels = std::string(DELTAFLASH_SOURCE_DIR) + "/models/demo";

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  return json::parse(in);
}

std::string gguf_path(const std::string& name) { return kModels + "/" + name; }

class DemoTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(DemoTokenizer, IdsEqualHuggingFace) {
  const auto file = gguf::File::open(gguf_path(GetParam()));
  const Vocab vocab = Vocab::from_gguf(*file);
  EXPECT_EQ(vocab.pre, "qwen35");
  const Tokenizer tok(vocab);
  const json cases = read_json(kCases)["cases"];
  ASSERT_GE(cases.size(), 25u);
  int n = 0;
  for (const json& c : cases) {
    const std::string text = c["text"];
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok.encode(text, /*parse_special=*/true);
    EXPECT_EQ(got, want) << "case " << n << " (" << c["kind"].get<std::string>() << "): " << json(text).dump();
    EXPECT_EQ(tok.decode(want), text) << "case " << n << " decode";
    ++n;
  }
}

TEST_P(DemoTokenizer, SpecialTokensAndChatTemplate) {
  const auto file = gguf::File::open(gguf_path(GetParam()));
  const Tokenizer tok(Vocab::from_gguf(*file));
  // The layout train/demo_data.py gives them: 4096 BPE tokens, then the added tokens in this order.
  const char* added[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
                         "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<|mask|>"};
  for (int i = 0; i < 10; ++i) {
    const auto id = tok.find_token(added[i]);
    ASSERT_TRUE(id.has_value()) << added[i];
    EXPECT_EQ(*id, 4096 + i) << added[i];
  }
  EXPECT_TRUE(tok.is_eog(4098));  // <|im_end|>
  EXPECT_TRUE(tok.is_eog(4096));  // <|endoftext|>
  EXPECT_EQ(tok.vocab().eos_id, 4098);
  EXPECT_NE(tok.vocab().chat_template.find("enable_thinking"), std::string::npos);
}

// `run --chat` renders the model's own template: the chat prompts of tests/data/demo/samples.json
// were rendered by the training pipeline (equal to transformers' apply_chat_template with
// enable_thinking = false) and must come out byte for byte.
TEST_P(DemoTokenizer, RunChatPromptUsesTheModelsTemplate) {
  const auto file = gguf::File::open(gguf_path(GetParam()));
  const Tokenizer tok(Vocab::from_gguf(*file));
  const json samples = read_json(std::string(DELTAFLASH_TEST_DATA) + "/demo/samples.json");
  int n = 0;
  for (const json& s : samples) {
    if (s["kind"] != "chat") continue;
    const std::string want = s["prompt"];
    const std::string open = "<|im_start|>user\n", close = "<|im_end|>";
    const size_t b = want.find(open), e = want.find(close);
    ASSERT_TRUE(b != std::string::npos && e != std::string::npos) << want;
    const std::string user = want.substr(b + open.size(), e - b - open.size());
    EXPECT_EQ(chat_prompt(tok, "", user, {{"enable_thinking", false}}), want);
    ++n;
  }
  EXPECT_GE(n, 3);
  // A system turn comes first, in the template's format.
  const std::string with_system = chat_prompt(tok, "Be brief.", "Hi");
  EXPECT_EQ(with_system.rfind("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n", 0), 0u)
      << with_system;
}

std::vector<std::string> demo_models() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(kModels, ec)) {
    if (e.path().extension() != ".gguf") continue;
    // Drafters carry no tokenizer: they use their target's.
    if (gguf::File::open(e.path().string())->get_string("general.architecture") == "qwen35-dflash-draft") continue;
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

INSTANTIATE_TEST_SUITE_P(Demo, DemoTokenizer, ::testing::ValuesIn(demo_models()), [](const auto& info) {
  std::string s = info.param;
  for (char& ch : s) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return s;
});

TEST(DemoTokenizerFixture, ModelsArePresent) {
  // models/demo/*.gguf are committed (see .gitignore); an empty list would silently skip the suite.
  EXPECT_GE(demo_models().size(), 2u) << "no GGUF files in " << kModels;
}

}  // namespace
}  // namespace df
