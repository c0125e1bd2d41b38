// Rendering a model's chat template (the Jinja source stored in the GGUF under
// tokenizer.chat_template) into the prompt text the model was trained on.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace df::jinja {

class Template;

struct ChatTemplateInputs {
  nlohmann::json messages = nlohmann::json::array();  // OpenAI-style message objects
  nlohmann::json tools;                               // null, or an array of tool definitions
  bool add_generation_prompt = true;
  nlohmann::json extra_context = nlohmann::json::object();  // chat_template_kwargs (enable_thinking, ...)
};

class ChatTemplate {
 public:
  // Parses the template once; throws df::Error naming the line on a syntax error.
  // bos/eos are exposed to the template as bos_token / eos_token.
  ChatTemplate(std::string source, std::string bos_token, std::string eos_token);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;

  // Throws df::Error (with the template line) when rendering fails, including the template's
  // own raise_exception().
  std::string render(const ChatTemplateInputs& in) const;

 private:
  std::unique_ptr<Template> tmpl_;
  std::string bos_, eos_;
};

}  // namespace df::jinja
