// Behaviour of our Jinja engine where @huggingface/jinja has no answer (it fails, or lacks the
// feature) and we follow Python Jinja / Python's str instead. Expected outputs are written by
// hand from the Jinja and Python documentation.
#include <gtest/gtest.h>

#include "jinja/template.h"

namespace {

using nlohmann::ordered_json;

std::string render(const std::string& src, const ordered_json& ctx = ordered_json::object()) {
  return df::jinja::Template(src).render(ctx);
}

TEST(JinjaSemantics, StripWithCharacters) {
  // Qwen3's template calls reasoning_content.strip('\n'): only newlines may go.
  EXPECT_EQ(render("[{{ '\\n  think \\n\\n'.strip('\\n') }}]"), "[  think ]");
  EXPECT_EQ(render("[{{ 'xxhixx'.lstrip('x') }}|{{ 'xxhixx'.rstrip('x') }}|{{ 'abcba'.strip('ab') }}]"), "[hixx|xxhi|c]");
  EXPECT_EQ(render("[{{ '  \\t pad \\n'.strip() }}]"), "[pad]");
  EXPECT_EQ(render("[{{ '--a--' | trim('-') }}]"), "[a]");
}

TEST(JinjaSemantics, StringMethods) {
  EXPECT_EQ(render("{{ 'a,b,c'.rsplit(',', 1) }}"), R"(["a,b", "c"])");
  EXPECT_EQ(render("{{ ' a  b c '.rsplit(None, 1) }}"), R"([" a  b", "c"])");
  EXPECT_EQ(render("{{ 'hello'.find('l') }} {{ 'hello'.find('z') }} {{ 'banana'.count('an') }}"), "2 -1 2");
  EXPECT_EQ(render("{{ '{} + {} = {total}'.format(1, 2, total=3) }}"), "1 + 2 = 3");
  EXPECT_EQ(render("{{ '{1}{0}'.format('a', 'b') }}"), "ba");
  EXPECT_EQ(render("{{ 'l1\\nl2\\r\\nl3\\n'.splitlines() }}"), R"(["l1", "l2", "l3"])");
  EXPECT_EQ(render("{{ '-'.join(['a', 'b', 'c']) }}"), "a-b-c");
  EXPECT_EQ(render("{{ 'ab'.replace('', '-') }}"), "-a-b-");
  EXPECT_EQ(render("{{ '123'.isdigit() }} {{ '12a'.isdigit() }}"), "true false");
  EXPECT_EQ(render("{{ 'x' * 3 }}|{{ 2 * 'ab' }}|{{ [1] * 2 }}"), "xxx|abab|[1, 1]");
}

TEST(JinjaSemantics, UnicodeIsCountedInCharacters) {
  // Python counts code points; JavaScript (and so @huggingface/jinja) counts UTF-16 units.
  EXPECT_EQ(render("{{ '😀' | length }} {{ 'a😀b'[1] }} {{ 'a😀b'[::-1] }} {{ '日本語'[1:] }}"), "1 😀 b😀a 本語");
  EXPECT_EQ(render("{{ 'ÉCOLE' | lower }} {{ 'привет' | upper }} {{ 'Ωμέγα'.upper() }}"), "école ПРИВЕТ ΩΜΈΓΑ");
}

TEST(JinjaSemantics, ListAndDictMethods) {
  EXPECT_EQ(render("{% set xs = [] %}{% set _ = xs.append(1) %}{% set _ = xs.extend([2, 3]) %}{{ xs }} {{ xs.pop() }} "
                   "{{ xs }} {{ xs.index(2) }} {{ [1, 1, 2].count(1) }}"),
            "[1, 2, 3] 3 [1, 2] 1 2");
  EXPECT_EQ(render("{{ dict(a=1, b=2) }}"), R"({"a": 1, "b": 2})");
}

TEST(JinjaSemantics, FiltersBeyondTheReference) {
  const ordered_json ctx = {{"xs", {1, 2, 3, 4, 5, 6}},
                            {"ps", ordered_json::parse(R"([{"n": "a", "v": 3}, {"n": "b", "v": 1}, {"n": "c", "v": 2}])")}};
  EXPECT_EQ(render("{{ xs | select('odd') | list }} {{ xs | reject('even') | join }} {{ xs | select | length }}", ctx),
            "[1, 3, 5] 135 6");
  EXPECT_EQ(render("{{ xs | select('divisibleby', 3) | list }} {{ xs | select('gt', 4) | list }}", ctx), "[3, 6] [5, 6]");
  EXPECT_EQ(render("{{ ['a', 'b'] | map('upper') | join }} {{ xs | map('string') | join('|') }}", ctx), "AB 1|2|3|4|5|6");
  EXPECT_EQ(render("{{ xs | sum }} {{ ps | sum(attribute='v') }} {{ xs | sum(start=10) }}", ctx), "21 6 31");
  EXPECT_EQ(render("{{ xs | min }} {{ xs | max }} {{ ps | max(attribute='v') }} {{ ['b', 'A', 'c'] | min }}", ctx),
            R"(1 6 {"n": "a", "v": 3} A)");
  EXPECT_EQ(render("{{ xs | batch(4) | list }} {{ [1, 2, 3] | batch(2, 0) | list }}", ctx), "[[1, 2, 3, 4], [5, 6]] [[1, 2], [3, 0]]");
  EXPECT_EQ(render("{{ 'one two,  three' | wordcount }}"), "3");
  EXPECT_EQ(render("{{ 2.5 | round }} {{ 3.5 | round }} {{ 3.14159 | round(2) }} {{ 2.1 | round(0, 'ceil') }} {{ 7 | round }}"),
            "2.0 4.0 3.14 3.0 7.0");
  EXPECT_EQ(render("{{ '<a href=\"x\">&\\'</a>' | e }}|{{ '<b>' | escape }}"), "&lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;/a&gt;|&lt;b&gt;");
  EXPECT_EQ(render("{{ 'abc' | first }}{{ 'abc' | last }} {{ 'abc' | list }} {{ 'abc' | reverse }}"), R"(ac ["a", "b", "c"] cba)");
  EXPECT_EQ(render("{{ {'b': 1, 'a': 2} | dictsort(by='value') }}"), R"([["b", 1], ["a", 2]])");
  EXPECT_EQ(render("{{ ps | unique(attribute='v') | length }} {{ ps | map(attribute='n') | join(',') }}", ctx), "3 a,b,c");
  EXPECT_EQ(render("{{ none | string }} {{ x | string }}|{{ 'ab' | d('z') }}{{ y | d('z') }}"), "None |abz");
  EXPECT_EQ(render("{{ 'a b' | split }} {{ 'a-b-c' | split('-', 1) }}"), R"(["a", "b"] ["a", "b-c"])");
  EXPECT_EQ(render("{{ {'k': 5} | attr('k') }}"), "5");
  EXPECT_EQ(render("{{ 'x' | tojson(2) }}{{ {'a': 1} | tojson(2) }}"), "\"x\"{\n  \"a\": 1\n}");
}

TEST(JinjaSemantics, TestsWithArguments) {
  EXPECT_EQ(render("{{ 9 is divisibleby(3) }} {{ 10 is divisibleby(3) }} {{ 1.5 is float }} {{ 1 is float }}"),
            "true false true false");
  EXPECT_EQ(render("{{ 3 is eq(3) }} {{ 'a' is in('abc') }} {{ 2 is in([1, 2]) }} {{ 5 is ge(5) }} {{ x is sameas(none) }}",
                   {{"x", nullptr}}),
            "true true true true true");
}

TEST(JinjaSemantics, UndefinedBehavesLikeJinja) {
  EXPECT_EQ(render("[{% for x in nothing %}{{ x }}{% else %}empty{% endfor %}]"), "[empty]");
  EXPECT_EQ(render("{{ nothing | length }} {{ nothing | list }} {{ nothing | items | list }} [{{ 'a' ~ nothing }}]"),
            "0 [] [] [a]");
  EXPECT_EQ(render("{{ 'x' in nothing }} {{ nothing is not defined }}"), "false true");
}

TEST(JinjaSemantics, LoopExtras) {
  EXPECT_EQ(render("{% for x in 'abc' %}{{ loop.cycle('odd', 'even') }}:{{ x }} {% endfor %}"), "odd:a even:b odd:c ");
  // The else block runs only when nothing was iterated (a break does not trigger it).
  EXPECT_EQ(render("[{% for x in [1, 2] %}{{ x }}{% break %}{% else %}E{% endfor %}]"), "[1]");
  EXPECT_EQ(render("{% for i in range(2) %}{% for j in range(3) %}{% if j == 1 %}{% break %}{% endif %}{{ i }}{{ j }} "
                   "{% endfor %}{% endfor %}"),
            "00 10 ");
  EXPECT_EQ(render("{{ range(5, 0, -2) }} {{ range(3) }}"), "[5, 3, 1] [0, 1, 2]");
}

TEST(JinjaSemantics, MacrosWithVarargsKwargsAndCaller) {
  EXPECT_EQ(render("{% macro f(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, 3, k='v') }}"),
            R"(1[2, 3]{"k": "v"})");
  EXPECT_EQ(render("{% macro list(items) %}{% for i in items %}<{{ caller(i) }}>{% endfor %}{% endmacro %}"
                   "{% call(x) list([1, 2]) %}item {{ x * 10 }}{% endcall %}"),
            "<item 10><item 20>");
  EXPECT_EQ(render("{% macro outer() %}[{{ caller() }}]{% endmacro %}{% call outer() %}{% filter upper %}hi{% endfilter %}"
                   "{% endcall %}"),
            "[HI]");
}

TEST(JinjaSemantics, GenerationBlocksRenderTheirBody) {
  EXPECT_EQ(render("<a>{% generation %}reply{% endgeneration %}</a>|{%- generation -%}  x  {%- endgeneration -%}|"), "<a>reply</a>|x|");
}

TEST(JinjaSemantics, StringsAndNumbers) {
  // Exponent literals (which the reference cannot lex); floats print as JavaScript writes numbers
  // (ECMAScript Number::toString: exponent form below 1e-6 and from 1e21), as the reference does.
  EXPECT_EQ(render("{{ 'a' < 'b' }} {{ 'b' <= 'a' }} {{ 1e3 }} {{ 2.5e-7 }} {{ 1e21 }} {{ 10 ** 15 }}"),
            "true false 1000.0 2.5e-7 1e+21 1000000000000000");
  EXPECT_EQ(render("{{ '\\u4e16\\U0001F600\\x41' }}|{{ 'a\\.b' }}"), "世😀A|a\\.b");
  EXPECT_EQ(render("{{ true + 1 }} {{ 3 > true }}"), "2 true");
  EXPECT_EQ(render("{{ '3.9' | int }} {{ ' 42x' | int }} {{ 'x' | int(7) }} {{ '1e2' | float }}"), "3 42 7 100.0");
}

}  // namespace
