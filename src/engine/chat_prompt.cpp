#include "engine/chat_prompt.h"

namespace df {

std::string chatml_prompt(const std::string& system, const std::string& user) {
  std::string s;
  if (!system.empty()) s += "<|im_start|>system\n" + system + "<|im_end|>\n";
  s += "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n";
  return s;
}

}  // namespace df
