#include "engine/chat_prompt.h"

#include "jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace df {

std::string chat_prompt(const Tokenizer& tok, const std::string& system, const std::string& user,
                        const nlohmann::ordered_json& template_kwargs) {
  const Vocab& v = tok.vocab();
  auto text = [&](int32_t id) { return id >= 0 && id < tok.n_vocab() ? tok.token_bytes(id) : std::string(); };
  const std::string& source = v.chat_template.empty() ? jinja::chatml_template() : v.chat_template;
  const jinja::ChatTemplate tmpl(source, text(v.bos_id), text(v.eos_id));
  jinja::ChatTemplateInputs in;
  if (!system.empty()) in.messages.push_back({{"role", "system"}, {"content", system}});
  in.messages.push_back({{"role", "user"}, {"content", user}});
  in.add_generation_prompt = true;
  in.extra_context = template_kwargs;
  return tmpl.render(in);
}

}  // namespace df
