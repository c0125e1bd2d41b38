#include "server/prompt_renderer.h"

#include "server/api_error.h"
#include "util/error.h"

namespace df::server {

PromptRenderer::PromptRenderer(const std::string& source, std::string bos_token, std::string eos_token)
    : tmpl_(source.empty() ? jinja::chatml_template() : source, std::move(bos_token), std::move(eos_token)),
      xml_tool_calls_(source.find("<function=") != std::string::npos) {}

RenderedPrompt PromptRenderer::render(const ChatRequest& r) const {
  jinja::ChatTemplateInputs in;
  in.messages = r.messages;
  in.tools = template_tools(r);
  in.add_generation_prompt = true;
  in.extra_context = r.template_kwargs;
  RenderedPrompt out;
  try {
    out.text = tmpl_.render(in);
  } catch (const df::Error& e) {
    throw ApiError(400, std::string("chat template error: ") + e.what(), "messages");
  }
  out.starts_in_reasoning = ends_inside_think(out.text);
  return out;
}

bool ends_inside_think(const std::string& text) {
  const size_t open = text.rfind("<think>");
  if (open == std::string::npos) return false;
  const size_t close = text.rfind("</think>");
  return close == std::string::npos || close < open;
}

}  // namespace df::server
