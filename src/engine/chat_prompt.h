// Wrapping a single user prompt (and optional system prompt) for chat models. Until the Jinja
// engine lands (server issue), every model gets ChatML, the format of the Qwen templates for
// plain system + user turns.
#pragma once
#include <string>

namespace df {

std::string chatml_prompt(const std::string& system, const std::string& user);

}  // namespace df
