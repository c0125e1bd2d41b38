// Wrapping a single user prompt (and optional system prompt) for chat models, as `run --chat`
// does: the model's own chat template (tokenizer.chat_template, rendered by our Jinja engine),
// or ChatML when the file has none.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace df {

class Tokenizer;

// The prompt text for one user turn after an optional system turn, ending with the assistant's
// generation prompt. template_kwargs become extra template variables (enable_thinking, ...).
// Throws df::Error when the template fails to render.
std::string chat_prompt(const Tokenizer& tok, const std::string& system, const std::string& user,
                        const nlohmann::ordered_json& template_kwargs = nlohmann::ordered_json::object());

}  // namespace df
