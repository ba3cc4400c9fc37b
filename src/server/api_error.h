// A request the API refuses: HTTP status, the field at fault (may be empty) and why. Turned
// into {"error": ..., "field": ...} by the server.
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace bks::server {

struct ApiError : std::runtime_error {
  int status;
  std::string field;
  ApiError(int status, std::string field, const std::string& message)
      : std::runtime_error(message), status(status), field(std::move(field)) {}
};

// Field readers for request bodies: each throws ApiError(400, name, ...) when the field is
// missing (and required), of the wrong type, or out of range.
std::string string_field(const nlohmann::json& body, const std::string& name, bool required, size_t max_length = 200);
double number_field(const nlohmann::json& body, const std::string& name, double lo, double hi, double fallback);
int64_t integer_field(const nlohmann::json& body, const std::string& name, int64_t lo, int64_t hi, int64_t fallback);
// A number or a non-empty list of numbers (sweeps), each in [lo, hi].
std::vector<double> number_list_field(const nlohmann::json& body, const std::string& name, double lo, double hi,
                                      double fallback, size_t max_items = 16);
// A path on the server that must exist and lie inside one of `roots` after resolving
// symbolic links and "..", returned canonical. ApiError 400 otherwise.
std::string path_field(const nlohmann::json& body, const std::string& name, const std::vector<std::string>& roots,
                       bool directory);

}  // namespace bks::server
