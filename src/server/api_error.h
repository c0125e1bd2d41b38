// OpenAI-shaped errors: {"error": {"message", "type", "param", "code"}} with an HTTP status.
#pragma once
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace df::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string param = {}, std::string code = {})
      : std::runtime_error(message), status(status), param(std::move(param)), code(std::move(code)) {}
  int status;
  std::string param, code;
};

// "invalid_request_error" for 4xx, "server_error" for 5xx, as OpenAI's API does (401 is
// "authentication_error", 404 "not_found_error").
std::string error_type_for(int status);

nlohmann::json error_json(int status, const std::string& message, const std::string& param = {},
                          const std::string& code = {});

inline nlohmann::json error_json(const ApiError& e) { return error_json(e.status, e.what(), e.param, e.code); }

}  // namespace df::server
