// Errors of the Jinja engine: syntax and render errors are df::Error (TemplateError) naming
// the template line and column and what went wrong; hostile templates fail cleanly.
#include <gtest/gtest.h>

#include <chrono>

#include "jinja/template.h"

namespace {

using df::jinja::Template;
using df::jinja::TemplateError;
using nlohmann::ordered_json;

// Parses and renders; returns the error (failing the test when there is none).
TemplateError error_of(const std::string& source, const ordered_json& ctx = ordered_json::object()) {
  try {
    Template t(source);
    const std::string out = t.render(ctx);
    ADD_FAILURE() << "expected an error, rendered: " << out;
  } catch (const TemplateError& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a TemplateError, got: " << e.what();
  }
  return TemplateError("none", 0, 0, false);
}

TEST(JinjaErrors, SyntaxErrorNamesTheLine) {
  const auto e = error_of("line one\nline two {{ 1 + }}\nline three");
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.column(), 17);  // the '}}' where an operand was expected
  EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  EXPECT_NE(e.detail().find("syntax error"), std::string::npos) << e.detail();
}

TEST(JinjaErrors, UnclosedBlockNamesWhereItOpened) {
  const auto e = error_of("a\n{% for x in xs %}\n{{ x }}\n");
  EXPECT_NE(e.detail().find("endfor"), std::string::npos) << e.detail();
  EXPECT_NE(e.detail().find("line 2"), std::string::npos) << e.detail();
}

TEST(JinjaErrors, StrayEndTag) {
  const auto e = error_of("ok\n\n  {% endif %}");
  EXPECT_EQ(e.line(), 3);
  EXPECT_NE(e.detail().find("endif"), std::string::npos) << e.detail();
}

TEST(JinjaErrors, UnterminatedStringAndComment) {
  auto e = error_of("x\n{{ 'abc }}");
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.column(), 4);
  EXPECT_NE(e.detail().find("string"), std::string::npos) << e.detail();
  e = error_of("{# never closed");
  EXPECT_NE(e.detail().find("comment"), std::string::npos) << e.detail();
}

TEST(JinjaErrors, LinesCountInTheOriginalSourceAfterWhitespaceControl) {
  // trim_blocks/lstrip_blocks remove text before lexing; positions still refer to the source.
  const auto e = error_of("{% if true %}\n    {% if true %}\n        {{ x.y.z }}\n{% endif %}{% endif %}");
  EXPECT_EQ(e.line(), 3);
  EXPECT_NE(e.detail().find("'x'"), std::string::npos) << e.detail();
}

TEST(JinjaErrors, RaiseExceptionMessageSurfaces) {
  const auto e = error_of("{% if messages|length == 0 %}\n{{ raise_exception('No messages provided.') }}\n{% endif %}",
                          {{"messages", ordered_json::array()}});
  EXPECT_TRUE(e.raised_by_template());
  EXPECT_EQ(e.detail(), "No messages provided.");
  EXPECT_EQ(e.line(), 2);
  EXPECT_NE(std::string(e.what()).find("No messages provided."), std::string::npos);
}

TEST(JinjaErrors, UnknownFilterIsAClearError) {
  const auto e = error_of("{{ 'a' }}\n{{ name | frobnicate }}", {{"name", "x"}});
  EXPECT_FALSE(e.raised_by_template());
  EXPECT_EQ(e.line(), 2);
  EXPECT_NE(e.detail().find("unknown filter 'frobnicate'"), std::string::npos) << e.detail();
}

TEST(JinjaErrors, UnknownTestAndStatement) {
  EXPECT_NE(error_of("{{ 1 is frobbed }}").detail().find("unknown test 'frobbed'"), std::string::npos);
  EXPECT_NE(error_of("{% include 'x' %}").detail().find("unknown statement 'include'"), std::string::npos);
}

TEST(JinjaErrors, UndefinedFunctionAndAttribute) {
  EXPECT_NE(error_of("{{ nope(1) }}").detail().find("'nope' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ message.content.text }}", {{"message", ordered_json::object()}}).detail().find("'content'"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 5(1) }}").detail().find("not a function"), std::string::npos);
}

TEST(JinjaErrors, BadOperations) {
  EXPECT_NE(error_of("{{ 1 / 0 }}").detail().find("division by zero"), std::string::npos);
  EXPECT_NE(error_of("{{ [1] - 1 }}").detail().find("operator -"), std::string::npos);
  EXPECT_NE(error_of("{{ x + 1 }}").detail().find("'x' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{% set a, b = [1, 2, 3] %}").detail().find("unpack"), std::string::npos);
  EXPECT_NE(error_of("{% set d = {} %}{% set d.x = 1 %}").detail().find("namespace"), std::string::npos);
  EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").detail().find("overflow"), std::string::npos);
  EXPECT_NE(error_of("{% for x in 5 %}{% endfor %}").detail().find("not iterable"), std::string::npos);
  EXPECT_NE(error_of("{% break %}").detail().find("outside a for loop"), std::string::npos);
}

TEST(JinjaErrors, DeepNestingIsASyntaxErrorNotACrash) {
  const std::string deep = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  EXPECT_NE(error_of(deep).detail().find("nested too deeply"), std::string::npos);
  std::string chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) chain += " + 1";
  EXPECT_NE(error_of(chain + " }}").detail().find("nested too deeply"), std::string::npos);
  std::string blocks;
  for (int i = 0; i < 5000; ++i) blocks += "{% if true %}";
  EXPECT_NE(error_of(blocks).detail().find("nested too deeply"), std::string::npos);
  EXPECT_NE(error_of("{{ x" + std::string(50000, '|') + " }}").detail().find("syntax error"), std::string::npos);
}

TEST(JinjaErrors, DeeplyNestedContextIsRejected) {
  ordered_json deep = 1;
  for (int i = 0; i < 2000; ++i) {
    ordered_json wrapper = ordered_json::array();
    wrapper.push_back(std::move(deep));
    deep = std::move(wrapper);
  }
  try {
    Template("{{ x }}").render({{"x", deep}});
    FAIL() << "expected an error";
  } catch (const df::Error& e) {
    EXPECT_NE(std::string(e.what()).find("nested too deeply"), std::string::npos) << e.what();
  }
}

TEST(JinjaErrors, RecursiveMacroIsBounded) {
  const auto e = error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_NE(e.detail().find("recursion too deep"), std::string::npos) << e.detail();
}

TEST(JinjaErrors, SelfContainingNamespaceCannotRecurseForever) {
  const auto e = error_of("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns | tojson }}");
  EXPECT_NE(e.detail().find("nested"), std::string::npos) << e.detail();
  const auto l = error_of("{% set xs = [] %}{% set _ = xs.append(xs) %}{{ xs }}");
  EXPECT_NE(l.detail().find("nested"), std::string::npos) << l.detail();
}

TEST(JinjaErrors, RunawayLoopsAndOutputAreCapped) {
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_NE(error_of("{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}")
                .detail()
                .find("loop iterations"),
            std::string::npos);
  EXPECT_NE(error_of("{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{{ s }}{% endfor %}")
                .detail()
                .find("output larger"),
            std::string::npos);
  EXPECT_NE(error_of("{{ range(100000000) }}").detail().find("range()"), std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 1000000000000 }}").detail().find("too large"), std::string::npos);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 30.0);
}

}  // namespace
