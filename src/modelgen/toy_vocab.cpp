#include "modelgen/toy_vocab.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/byte_unicode.h"
#include "tokenizer/pretokenizer.h"
#include "util/error.h"

namespace df::modelgen {

namespace {

// Training text for the merges: plain English and a little code, so that common words,
// indentation and operators become tokens and tokenized prompts are realistically shorter than
// their byte count.
constexpr std::string_view kCorpus = R"(The model reads the prompt one token at a time and writes the answer in the same way.
Each layer of the network looks at the tokens that came before it and passes what it found to the next layer.
When the request is long, the server splits the prompt into chunks and fills the cache before it starts to generate.
A small draft model can guess several tokens ahead; the large model then checks all of them in one pass and keeps the ones that agree.
If a guess is wrong, the state is rolled back to the last accepted token and decoding continues from there.
The user asked for a short summary of the report, so the assistant wrote three sentences and a list of the main points.
Please explain how the cache works, what happens when it is full, and why the recurrent state does not grow with the context.
The answer should be clear, correct and short. It is better to say that something is unknown than to make it up.
In the morning the weather was cold, but by the afternoon the sun came out and the streets were full of people.
She opened the window, looked at the river and thought about the questions she wanted to ask in the meeting.
Numbers such as 12, 256, 1024 and 4096 appear in configuration files, together with names, paths and flags.
The children played in the garden while their parents talked about the new school, the price of bread and the long winter.
He wrote a letter to his brother, who lived in another country, and asked him when he would come home again.
There are many ways to solve this problem. The simplest one is to try every possible answer and keep the best one,
but that takes too much time when the input is large, so we need a better method that uses what we already know.
First, read the whole question carefully. Then write down the facts that are given and the value that is asked for.
Finally, check the result: does it make sense, is the unit right, and would another person reach the same conclusion?
The library opens at nine o'clock and closes at six. You can borrow up to ten books for three weeks at a time.
I think that the second option is better, because it is cheaper, it is easier to maintain and it works for most users.
Thank you for your message. I will look into the issue today and let you know as soon as I have found the cause.

import os
import json

def load_config(path):
    """Read a JSON configuration file and return it as a dictionary."""
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    with open(path, "r", encoding="utf-8") as f:
        return json.load(f)

for index, value in enumerate(values):
    if value is None:
        continue
    print(f"{index}: {value}")

struct Request {
    std::string prompt;
    int max_tokens = 128;
    float temperature = 0.7f;
};

const result = await fetch("/v1/chat/completions", { method: "POST", body: JSON.stringify(request) });
if (!result.ok) { throw new Error("request failed: " + result.status); }

def tokenize(text, vocab):
    tokens = []
    for word in text.split():
        if word in vocab:
            tokens.append(vocab[word])
        else:
            tokens.extend(vocab[c] for c in word)
    return tokens

class Cache:
    def __init__(self, size):
        self.size = size
        self.items = {}

    def get(self, key, default=None):
        return self.items.get(key, default)

int main(int argc, char** argv) {
    std::vector<int> values;
    for (int i = 0; i < argc; ++i) {
        values.push_back(std::atoi(argv[i]));
    }
    if (values.empty()) return 1;
    return 0;
}

{"role": "user", "content": "What is the capital of France?"}
{"role": "assistant", "content": "The capital of France is Paris."}
)";

constexpr int kMaxMerges = 480;

// Qwen's added tokens: the ChatML markers are special (CONTROL); <think>, <tool_call> and
// friends are not marked special in Qwen's tokenizer_config.json, so llama.cpp's converter
// writes them as USER_DEFINED.
struct SpecialToken {
  const char* text;
  TokenType type;
};
constexpr SpecialToken kSpecials[] = {
    {"<|endoftext|>", TokenType::Control},     {"<|im_start|>", TokenType::Control},
    {"<|im_end|>", TokenType::Control},        {"<tool_call>", TokenType::UserDefined},
    {"</tool_call>", TokenType::UserDefined},  {"<tool_response>", TokenType::UserDefined},
    {"</tool_response>", TokenType::UserDefined}, {"<think>", TokenType::UserDefined},
    {"</think>", TokenType::UserDefined},
};

// ChatML. Qwen3.5 opens the thinking block in the generation prompt; Qwen3 lets the model open
// it. enable_thinking=false closes an empty one in both.
constexpr const char* kTemplateQwen35 =
    R"({%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- else %}{{- '<think>\n' }}{%- endif %}{%- endif %})";
constexpr const char* kTemplateQwen3 =
    R"({%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}{%- endif %})";

using Word = std::vector<std::string>;  // symbols in GPT-2 byte-unicode form

// Pre-token -> count, split with the same regex the tokenizer will use.
std::map<std::string, int> count_words(const std::string& pre) {
  const PreTokenizer splitter(pre);
  std::vector<std::string_view> pieces;
  splitter.split(kCorpus, pieces);
  std::map<std::string, int> counts;
  for (std::string_view p : pieces) ++counts[std::string(p)];
  return counts;
}

// Greedy BPE training: repeatedly merge the most frequent adjacent pair (ties: the smallest pair
// in byte order), so the result depends on nothing but the corpus.
std::vector<std::pair<std::string, std::string>> learn_merges(const std::map<std::string, int>& counts) {
  std::vector<std::pair<Word, int>> words;
  for (const auto& [text, n] : counts) {
    Word w;
    for (unsigned char c : text) w.push_back(byte_unicode::utf8_of_byte(c));
    words.emplace_back(std::move(w), n);
  }
  std::vector<std::pair<std::string, std::string>> merges;
  while (int(merges.size()) < kMaxMerges) {
    std::map<std::pair<std::string, std::string>, int> pairs;
    for (const auto& [w, n] : words)
      for (size_t i = 0; i + 1 < w.size(); ++i) pairs[{w[i], w[i + 1]}] += n;
    const std::pair<std::string, std::string>* best = nullptr;
    int best_count = 1;  // a pair seen once teaches nothing
    for (const auto& [p, n] : pairs)
      if (n > best_count) best = &p, best_count = n;
    if (!best) break;
    const auto merge = *best;
    for (auto& [w, n] : words) {
      Word merged;
      for (size_t i = 0; i < w.size(); ++i) {
        if (i + 1 < w.size() && w[i] == merge.first && w[i + 1] == merge.second) {
          merged.push_back(w[i] + w[i + 1]);
          ++i;
        } else {
          merged.push_back(w[i]);
        }
      }
      w = std::move(merged);
    }
    merges.push_back(merge);
  }
  return merges;
}

}  // namespace

Vocab make_toy_vocab(Arch arch, size_t max_tokens) {
  const size_t n_specials = std::size(kSpecials);
  if (max_tokens < 256 + n_specials)
    fail("a toy vocabulary needs at least {} tokens (256 bytes + {} special), not {}", 256 + n_specials, n_specials,
         max_tokens);
  Vocab v;
  v.model = "gpt2";
  v.pre = arch == Arch::Qwen35 ? "qwen35" : "qwen2";
  // Byte tokens first, in GPT-2's order (the self-standing bytes, then the shifted ones), like
  // Qwen's vocabulary where "!" is token 0.
  std::vector<std::pair<uint32_t, uint8_t>> by_codepoint;
  for (int b = 0; b < 256; ++b) by_codepoint.emplace_back(byte_unicode::codepoint_of_byte(uint8_t(b)), uint8_t(b));
  std::sort(by_codepoint.begin(), by_codepoint.end());
  std::set<std::string> known;
  auto add = [&](std::string text, TokenType type) {
    known.insert(text);
    v.tokens.push_back(std::move(text));
    v.token_types.push_back(int32_t(type));
  };
  for (const auto& [cp, byte] : by_codepoint) add(byte_unicode::utf8_of_byte(byte), TokenType::Normal);
  for (const auto& [a, b] : learn_merges(count_words(v.pre))) {
    // A prefix of the merge list is a valid BPE on its own: stop where the budget is used up.
    if (!known.count(a + b) && v.tokens.size() + n_specials >= max_tokens) break;
    v.merges.push_back(a + " " + b);
    if (!known.count(a + b)) add(a + b, TokenType::Normal);
  }
  for (const SpecialToken& s : kSpecials) add(s.text, s.type);
  auto id_of = [&](std::string_view text) {
    return int32_t(std::find(v.tokens.begin(), v.tokens.end(), text) - v.tokens.begin());
  };
  v.eos_id = id_of("<|im_end|>");
  v.pad_id = id_of("<|endoftext|>");
  v.bos_id = v.pad_id;
  v.add_bos = false;
  v.chat_template = arch == Arch::Qwen35 ? kTemplateQwen35 : kTemplateQwen3;
  return v;
}

}  // namespace df::modelgen
