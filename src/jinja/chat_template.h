// Rendering a model's chat template (the Jinja source stored in the GGUF under
// tokenizer.chat_template) into the prompt text the model was trained on.
//
// The inputs are nlohmann::ordered_json so that objects keep the key order the client sent:
// templates print tool definitions and tool-call arguments with tojson, and the model was
// trained on the client's order. Parse request bodies with nlohmann::ordered_json::parse;
// a plain nlohmann::json converts implicitly but has already sorted its keys.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "jinja/error.h"  // TemplateError: line, column, raised_by_template()

namespace df::jinja {

class Template;

struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // OpenAI-style message objects
  nlohmann::ordered_json tools;  // null, or an array of tool definitions
  bool add_generation_prompt = true;
  // chat_template_kwargs (enable_thinking, ...): extra template variables. They cannot replace
  // messages, tools, add_generation_prompt, bos_token or eos_token.
  nlohmann::ordered_json extra_context = nlohmann::ordered_json::object();
};

// Plain ChatML (the Qwen templates' format for system/user/assistant turns), for model files
// that carry no template.
const std::string& chatml_template();

class ChatTemplate {
 public:
  // Parses the template once; throws df::Error naming the line on a syntax error.
  // bos/eos are exposed to the template as bos_token / eos_token.
  ChatTemplate(std::string source, std::string bos_token, std::string eos_token);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;

  // Throws df::Error (with the template line) when rendering fails, including the template's
  // own raise_exception(). The error is a TemplateError: raised_by_template() tells a
  // conversation the template rejects (a client error) from a template that is broken.
  std::string render(const ChatTemplateInputs& in) const;

  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }

 private:
  std::unique_ptr<Template> tmpl_;
  std::string bos_, eos_;
};

}  // namespace df::jinja
