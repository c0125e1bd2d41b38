#include "server/api_error.h"

namespace df::server {

std::string error_type_for(int status) {
  if (status == 401) return "authentication_error";
  if (status == 404) return "not_found_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

nlohmann::json error_json(int status, const std::string& message, const std::string& param, const std::string& code) {
  using nlohmann::json;
  return json{{"error",
               {{"message", message},
                {"type", error_type_for(status)},
                {"param", param.empty() ? json(nullptr) : json(param)},
                {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

}  // namespace df::server
