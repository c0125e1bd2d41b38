// Chat messages to prompt text through the model's chat template (the GGUF's
// tokenizer.chat_template, --chat-template-file, or ChatML when the file has none).
#pragma once
#include <memory>
#include <string>

#include "jinja/chat_template.h"
#include "server/requests.h"

namespace df::server {

struct RenderedPrompt {
  std::string text;
  bool starts_in_reasoning = false;  // the text ends inside an open <think> block
};

class PromptRenderer {
 public:
  // source: Jinja template text; empty selects ChatML. Throws df::Error on a syntax error.
  PromptRenderer(const std::string& source, std::string bos_token, std::string eos_token);
  // Throws ApiError (400) with the template's message when rendering fails.
  RenderedPrompt render(const ChatRequest& r) const;
  // Whether the template asks for the XML tool-call form (<function=NAME>...), else the JSON one.
  bool xml_tool_calls() const { return xml_tool_calls_; }

 private:
  jinja::ChatTemplate tmpl_;
  bool xml_tool_calls_ = false;
};

// True when the last <think> in the text is not closed by a later </think>.
bool ends_inside_think(const std::string& text);

}  // namespace df::server
