#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace df {
namespace {

// \s spelled out as Unicode White_Space, the set llama.cpp's tokenizer (and HF's regex engine)
// use. PCRE2's own \s leaves out U+0085, and its meaning has changed between PCRE2 versions.
#define DF_WS "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

// Case-insensitive English contractions, written with explicit ASCII classes as llama.cpp does:
// PCRE2's (?i) under UCP would also fold e.g. U+017F (long s) into 's'.
#define DF_CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

// llama.cpp LLAMA_VOCAB_PRE_TYPE_QWEN2: HF "(?i:'s|..)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
constexpr const char* kQwen2 =
    DF_CONTRACTIONS
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"
    "|\\p{N}"
    "| ?[^" DF_WS "\\p{L}\\p{N}]+[\\r\\n]*"
    "|[" DF_WS "]*[\\r\\n]+"
    "|[" DF_WS "]+(?![^" DF_WS "])"
    "|[" DF_WS "]+";

// llama.cpp LLAMA_VOCAB_PRE_TYPE_QWEN35: as qwen2 but combining marks (\p{M}) join letter runs
// and are excluded from the punctuation run.
constexpr const char* kQwen35 =
    DF_CONTRACTIONS
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+"
    "|\\p{N}"
    "| ?[^" DF_WS "\\p{L}\\p{M}\\p{N}]+[\\r\\n]*"
    "|[" DF_WS "]*[\\r\\n]+"
    "|[" DF_WS "]+(?![^" DF_WS "])"
    "|[" DF_WS "]+";

// GPT-2 (llama.cpp "gpt-2"): case-sensitive contractions, digit runs, no CR/LF special case.
constexpr const char* kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d"
    "| ?\\p{L}+"
    "| ?\\p{N}+"
    "| ?[^" DF_WS "\\p{L}\\p{N}]+"
    "|[" DF_WS "]+(?![^" DF_WS "])"
    "|[" DF_WS "]+";

const char* pattern_for(std::string_view name) {
  if (name == "qwen2" || name == "deepseek-r1-qwen") return kQwen2;
  if (name == "qwen35") return kQwen35;
  if (name == "gpt-2") return kGpt2;
  return nullptr;
}

pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }

struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};
struct MatchContextDeleter {
  void operator()(pcre2_match_context* m) const { pcre2_match_context_free(m); }
};
struct JitStackDeleter {
  void operator()(pcre2_jit_stack* s) const { pcre2_jit_stack_free(s); }
};

// PCRE2 rejects encoded surrogates even with PCRE2_NO_UTF_CHECK (undefined behaviour), but
// llama.cpp keeps them as ordinary "other" characters. U+E000 (private use, also not a
// letter, mark, number or space) has the same length and the same regex behaviour.
bool has_surrogate(std::string_view s) {
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    if (static_cast<uint8_t>(s[i]) == 0xED && static_cast<uint8_t>(s[i + 1]) >= 0xA0) return true;
  }
  return false;
}

std::string surrogates_to_private_use(std::string_view s) {
  std::string out(s);
  for (size_t i = 0; i + 2 < out.size(); ++i) {
    if (static_cast<uint8_t>(out[i]) == 0xED && static_cast<uint8_t>(out[i + 1]) >= 0xA0) {
      out[i] = '\xEE', out[i + 1] = '\x80', out[i + 2] = '\x80';
      i += 2;
    }
  }
  return out;
}

}  // namespace

bool PreTokenizer::is_known(std::string_view name) { return pattern_for(name) != nullptr; }

PreTokenizer::PreTokenizer(std::string_view name) : name_(name) {
  const char* pattern = pattern_for(name);
  if (!pattern) {
    fail("unsupported pre-tokenizer '{}' (tokenizer.ggml.pre); supported: qwen2, qwen35, gpt-2",
         name);
  }
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &err, &err_offset,
                                   nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail("pre-tokenizer '{}': regex does not compile at offset {}: {}", name, err_offset,
         reinterpret_cast<const char*>(msg));
  }
  // Without JIT (not built in, or no executable memory) the interpreter gives the same splits.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

PreTokenizer::~PreTokenizer() { pcre2_code_free(as_code(code_)); }

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  if (text.empty()) return;
  std::string substitute;
  std::string_view subject = text;
  if (has_surrogate(text)) {
    substitute = surrogates_to_private_use(text);
    subject = substitute;
  }
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create_from_pattern(as_code(code_), nullptr));
  if (!md) fail("pre-tokenizer: out of memory");
  std::unique_ptr<pcre2_match_context, MatchContextDeleter> big_stack_ctx;
  std::unique_ptr<pcre2_jit_stack, JitStackDeleter> big_stack;

  const auto* subj = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t pos = 0;
  while (pos < subject.size()) {
    int rc = pcre2_match(as_code(code_), subj, subject.size(), pos, PCRE2_NO_UTF_CHECK, md.get(),
                         big_stack_ctx.get());
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !big_stack) {
      // Only pathological inputs get here; give the JIT a larger stack and retry.
      big_stack.reset(pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr));
      big_stack_ctx.reset(pcre2_match_context_create(nullptr));
      if (!big_stack || !big_stack_ctx) fail("pre-tokenizer: out of memory");
      pcre2_jit_stack_assign(big_stack_ctx.get(), nullptr, big_stack.get());
      continue;
    }
    size_t end = pos;
    if (rc > 0) {
      end = pcre2_get_ovector_pointer(md.get())[1];
    } else if (rc != PCRE2_ERROR_NOMATCH) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      fail("pre-tokenizer '{}': regex match failed at byte {}: {}", name_, pos,
           reinterpret_cast<const char*>(msg));
    }
    if (end <= pos) {
      // No alternative matched here (cannot happen with these patterns, which match every
      // character): llama.cpp makes the single character a pre-token, and so do we.
      end = pos + utf8::decode_strict(subject, pos).length;
      if (end > subject.size()) end = subject.size();
    }
    out.push_back(text.substr(pos, end - pos));
    pos = end;
  }
}

}  // namespace df
