// The ChatTemplate interface the server renders prompts with. Expected prompts are written by
// hand from the ChatML format the template below produces.
#include <gtest/gtest.h>

#include "jinja/chat_template.h"

namespace {

using df::jinja::ChatTemplate;
using df::jinja::ChatTemplateInputs;
using nlohmann::ordered_json;

const char* kChatML =
    "{{ bos_token }}"
    "{%- if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools>\n{% endif %}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
    "{{- '[tools is none]' if tools is none }}{{- '[eos=' ~ eos_token ~ ']' }}";

ChatTemplateInputs user_says(const std::string& text) {
  ChatTemplateInputs in;
  in.messages = ordered_json::array({{{"role", "user"}, {"content", text}}});
  return in;
}

TEST(JinjaChatTemplate, BosAndEosAreExposed) {
  ChatTemplate t(kChatML, "<s>", "</s>");
  EXPECT_EQ(t.bos_token(), "<s>");
  EXPECT_EQ(t.eos_token(), "</s>");
  ChatTemplateInputs in = user_says("hi");
  in.add_generation_prompt = false;
  EXPECT_EQ(t.render(in), "<s><|im_start|>user\nhi<|im_end|>\n[tools is none][eos=</s>]");
}

TEST(JinjaChatTemplate, GenerationPrompt) {
  ChatTemplate t(kChatML, "", "<|im_end|>");
  ChatTemplateInputs in = user_says("hi");
  EXPECT_EQ(t.render(in), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n[tools is none][eos=<|im_end|>]");
  in.add_generation_prompt = false;
  EXPECT_EQ(t.render(in), "<|im_start|>user\nhi<|im_end|>\n[tools is none][eos=<|im_end|>]");
}

TEST(JinjaChatTemplate, ToolsNullVersusArray) {
  ChatTemplate t(kChatML, "", "");
  ChatTemplateInputs in = user_says("x");
  in.add_generation_prompt = false;
  EXPECT_EQ(t.render(in), "<|im_start|>user\nx<|im_end|>\n[tools is none][eos=]");
  in.tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "a"}},
                                     {"type": "function", "function": {"name": "b"}}])");
  EXPECT_EQ(t.render(in), "<tools>a;b;</tools>\n<|im_start|>user\nx<|im_end|>\n[eos=]");
  in.tools = ordered_json::array();  // an empty list is falsy but not none
  EXPECT_EQ(t.render(in), "<|im_start|>user\nx<|im_end|>\n[eos=]");
}

TEST(JinjaChatTemplate, ExtraContextIsPassedThrough) {
  ChatTemplate t(kChatML, "", "");
  ChatTemplateInputs in = user_says("q");
  in.extra_context = {{"enable_thinking", false}};
  EXPECT_EQ(t.render(in), "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n[tools is none][eos=]");
  in.extra_context = {{"enable_thinking", true}};
  EXPECT_EQ(t.render(in), "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n[tools is none][eos=]");
  // Extra variables do not replace the fixed ones.
  in.extra_context = {{"add_generation_prompt", false}, {"eos_token", "X"}};
  EXPECT_EQ(t.render(in), "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n[tools is none][eos=]");
}

TEST(JinjaChatTemplate, KeyOrderOfToolsIsKept) {
  ChatTemplate t("{% for tool in tools %}{{ tool | tojson }}{% endfor %}", "", "");
  ChatTemplateInputs in;
  in.tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
  EXPECT_EQ(t.render(in), R"({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}})");
}

TEST(JinjaChatTemplate, TemplateRejectionIsMarked) {
  ChatTemplate t("{% if messages[0].role != 'user' %}{{ raise_exception('first message must be from the user') }}{% endif %}",
                 "", "");
  ChatTemplateInputs in;
  in.messages = ordered_json::array({{{"role", "assistant"}, {"content", "x"}}});
  try {
    t.render(in);
    FAIL() << "expected the template to raise";
  } catch (const df::jinja::TemplateError& e) {
    EXPECT_TRUE(e.raised_by_template());
    EXPECT_EQ(e.detail(), "first message must be from the user");
    EXPECT_EQ(e.line(), 1);
  }
}

TEST(JinjaChatTemplate, MovedTemplateStillRenders) {
  ChatTemplate a("{{ messages | length }}", "", "");
  ChatTemplate b(std::move(a));
  EXPECT_EQ(b.render(user_says("x")), "1");
}

}  // namespace
