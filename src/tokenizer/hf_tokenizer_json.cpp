#include "tokenizer/hf_tokenizer_json.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "tokenizer/byte_unicode.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab_check.h"
#include "util/error.h"

namespace df {
namespace {

using nlohmann::json;

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open {} '{}': {}", what, path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json parse_json_file(const std::string& path, const char* what) {
  const std::string text = read_file(path, what);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("{} '{}' is not valid JSON: {}", what, path, e.what());
  }
}

// llama.cpp's converter (does_token_look_special) marks these CONTROL even when the HF file
// does not call them special, e.g. Qwen's "<|fim_pad|>".
bool looks_special(const std::string& t) {
  auto starts = [&](std::string_view p) { return t.size() >= p.size() && t.compare(0, p.size(), p) == 0; };
  auto ends = [&](std::string_view p) {
    return t.size() >= p.size() && t.compare(t.size() - p.size(), p.size(), p) == 0;
  };
  if (t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]") return true;
  if (starts("<|") && ends("|>") && t.size() >= 4) return true;
  if (starts("<\xEF\xBD\x9C") && ends("\xEF\xBD\x9C>") && t.size() >= 8) return true;  // "<｜...｜>"
  return starts("<unused") && ends(">");
}

int32_t checked_id(const json& v, const std::string& path, const std::string& what) {
  if (!v.is_number_integer()) fail("{}: {} has a non-integer id", path, what);
  const int64_t id = v.get<int64_t>();
  if (id < 0 || id >= std::numeric_limits<int32_t>::max()) fail("{}: {} has id {} out of range", path, what, id);
  return static_cast<int32_t>(id);
}

// "eos_token": "<|im_end|>" or {"content": "<|im_end|>", ...} or null.
std::string token_field(const json& cfg, const char* key, const std::string& path) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  fail("{}: '{}' is neither a string, an object with 'content', nor null", path, key);
}

std::string chat_template_of(const json& cfg, const std::string& config_path) {
  auto it = cfg.find("chat_template");
  if (it != cfg.end() && it->is_string()) return it->get<std::string>();
  if (it != cfg.end() && it->is_array()) {
    // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
    const json* first = nullptr;
    for (const json& e : *it) {
      if (!e.is_object() || !e.contains("template") || !e["template"].is_string()) continue;
      if (!first) first = &e;
      if (e.value("name", "") == "default") return e["template"].get<std::string>();
    }
    if (first) return (*first)["template"].get<std::string>();
    fail("{}: 'chat_template' is a list without any {{name, template}} entry", config_path);
  }
  if (it != cfg.end() && !it->is_null()) fail("{}: 'chat_template' is not a string", config_path);
  const auto jinja = std::filesystem::path(config_path).parent_path() / "chat_template.jinja";
  std::error_code ec;
  if (std::filesystem::is_regular_file(jinja, ec)) return read_file(jinja.string(), "chat template");
  return {};
}

}  // namespace

Vocab vocab_from_hf_tokenizer(const std::string& tokenizer_json_path,
                              const std::string& tokenizer_config_path, const std::string& pre,
                              size_t min_vocab_size) {
  const std::string& path = tokenizer_json_path;
  if (!PreTokenizer::is_known(pre)) {
    fail("unsupported pre-tokenizer '{}' for {}; supported: qwen2, qwen35, gpt-2", pre, path);
  }
  const json j = parse_json_file(path, "tokenizer.json");
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) {
    fail("{}: no 'model' object (not a Hugging Face tokenizer.json?)", path);
  }
  const json& model = j["model"];
  const std::string type = model.value("type", "BPE");
  if (type != "BPE") fail("{}: model type '{}' is not supported (only BPE)", path, type);
  if (model.value("byte_fallback", false)) fail("{}: BPE with byte_fallback is not supported", path);
  if (model.value("ignore_merges", false)) fail("{}: BPE with ignore_merges is not supported", path);
  if (!model.contains("vocab") || !model["vocab"].is_object()) fail("{}: model.vocab is not an object", path);
  if (!model.contains("merges") || !model["merges"].is_array()) fail("{}: model.merges is not an array", path);

  // id -> (text, type); texts of model tokens are in GPT-2 form, added tokens are plain text.
  std::unordered_map<int32_t, std::pair<std::string, TokenType>> by_id;
  by_id.reserve(model["vocab"].size() + 64);
  int64_t max_id = -1;
  for (const auto& [text, idv] : model["vocab"].items()) {
    const int32_t id = checked_id(idv, path, "model.vocab['" + text + "']");
    if (!by_id.try_emplace(id, text, TokenType::Normal).second) {
      fail("{}: model.vocab gives id {} to both '{}' and '{}'", path, id, by_id[id].first, text);
    }
    max_id = std::max<int64_t>(max_id, id);
  }
  if (auto unk = model.find("unk_token"); unk != model.end() && unk->is_string()) {
    const std::string unk_text = unk->get<std::string>();
    for (auto& [id, entry] : by_id) {
      if (entry.first == unk_text) entry.second = TokenType::Unknown;
    }
  }

  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const json& t : j["added_tokens"]) {
      if (!t.is_object() || !t.contains("content") || !t["content"].is_string() || !t.contains("id")) {
        fail("{}: an added_tokens entry lacks 'id' or 'content'", path);
      }
      const std::string content = t["content"].get<std::string>();
      const int32_t id = checked_id(t["id"], path, "added token '" + content + "'");
      const TokenType tt = (t.value("special", false) || looks_special(content)) ? TokenType::Control
                                                                                 : TokenType::UserDefined;
      auto [it, inserted] = by_id.try_emplace(id, content, tt);
      if (!inserted) {
        // HF lets an added token reuse a model token's id only for the same text.
        if (it->second.first != content && it->second.first != byte_unicode::encode(content)) {
          fail("{}: added token '{}' has id {}, which model.vocab gives to '{}'", path, content, id,
               it->second.first);
        }
        it->second = {content, tt};
      }
      max_id = std::max<int64_t>(max_id, id);
    }
  }

  Vocab v;
  v.model = "gpt2";
  v.pre = pre;
  const size_t n = std::max<size_t>(static_cast<size_t>(max_id + 1), min_vocab_size);
  v.tokens.resize(n);
  v.token_types.resize(n);
  for (size_t i = 0; i < n; ++i) {
    auto it = by_id.find(static_cast<int32_t>(i));
    if (it == by_id.end()) {
      v.tokens[i] = "[PAD" + std::to_string(i) + "]";
      v.token_types[i] = static_cast<int32_t>(TokenType::Unused);
    } else {
      v.tokens[i] = it->second.first;
      v.token_types[i] = static_cast<int32_t>(it->second.second);
    }
  }

  const json& merges = model["merges"];
  v.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    if (m.is_string()) {
      v.merges.push_back(m.get<std::string>());  // "A B"; checked below
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      const auto a = m[0].get<std::string>(), b = m[1].get<std::string>();
      if (a.find(' ') != std::string::npos || b.find(' ') != std::string::npos) {
        fail("{}: merge {} ['{}', '{}'] has a space inside a part; it cannot be stored as 'A B'",
             path, i, a, b);
      }
      v.merges.push_back(a + " " + b);
    } else {
      fail("{}: merge {} is neither \"A B\" nor [\"A\", \"B\"]", path, i);
    }
  }

  if (!tokenizer_config_path.empty()) {
    const json cfg = parse_json_file(tokenizer_config_path, "tokenizer_config.json");
    if (!cfg.is_object()) fail("{}: not a JSON object", tokenizer_config_path);
    // Special-token strings are plain text; match added tokens first, then GPT-2-form vocab.
    auto id_of = [&](const char* key) -> int32_t {
      const std::string text = token_field(cfg, key, tokenizer_config_path);
      if (text.empty()) return -1;
      const std::string gpt2_form = byte_unicode::encode(text);
      int32_t normal_match = -1;
      for (size_t i = 0; i < n; ++i) {
        const auto tt = static_cast<TokenType>(v.token_types[i]);
        if (tt == TokenType::Normal) {
          if (normal_match < 0 && v.tokens[i] == gpt2_form) normal_match = static_cast<int32_t>(i);
        } else if (tt != TokenType::Unused && v.tokens[i] == text) {
          return static_cast<int32_t>(i);
        }
      }
      if (normal_match < 0) {
        fail("{}: {} '{}' is not a token of {}", tokenizer_config_path, key, text, path);
      }
      return normal_match;
    };
    v.eos_id = id_of("eos_token");
    v.bos_id = id_of("bos_token");
    v.pad_id = id_of("pad_token");
    if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) {
      v.add_bos = cfg["add_bos_token"].get<bool>();
    }
    v.chat_template = chat_template_of(cfg, tokenizer_config_path);
  }

  check_vocab(v, path);
  return v;
}

}  // namespace df
