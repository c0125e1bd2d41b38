#include "jinja/chat_template.h"

#include "jinja/template.h"

namespace df::jinja {

const std::string& chatml_template() {
  static const std::string kChatMl =
      "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
      "'<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
  return kChatMl;
}

ChatTemplate::ChatTemplate(std::string source, std::string bos_token, std::string eos_token)
    : tmpl_(std::make_unique<Template>(std::move(source))), bos_(std::move(bos_token)), eos_(std::move(eos_token)) {}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const ChatTemplateInputs& in) const {
  // The variables transformers' apply_chat_template passes (tools is None when absent).
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = in.messages;
  ctx["tools"] = in.tools;
  ctx["add_generation_prompt"] = in.add_generation_prompt;
  ctx["bos_token"] = bos_;
  ctx["eos_token"] = eos_;
  if (!in.extra_context.is_null() && !in.extra_context.is_object())
    throw df::Error("chat template: extra context must be a JSON object");
  if (in.extra_context.is_object())
    for (auto it = in.extra_context.begin(); it != in.extra_context.end(); ++it)
      if (!ctx.contains(it.key())) ctx[it.key()] = it.value();
  return tmpl_->render(ctx);
}

}  // namespace df::jinja
