#include "server/api_error.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>

namespace bks::server {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string string_field(const json& body, const std::string& name, bool required, size_t max_length) {
  if (!body.contains(name) || body[name].is_null()) {
    if (required) throw ApiError(400, name, fmt::format("'{}' is required", name));
    return "";
  }
  if (!body[name].is_string()) throw ApiError(400, name, fmt::format("'{}' must be a string", name));
  std::string s = body[name].get<std::string>();
  if (required && s.empty()) throw ApiError(400, name, fmt::format("'{}' must not be empty", name));
  if (s.size() > max_length)
    throw ApiError(400, name, fmt::format("'{}' is longer than {} characters", name, max_length));
  return s;
}

namespace {

double checked_number(const json& v, const std::string& name, double lo, double hi) {
  if (!v.is_number()) throw ApiError(400, name, fmt::format("'{}' must be a number", name));
  double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    throw ApiError(400, name, fmt::format("'{}' must be between {} and {}, got {}", name, lo, hi, v.dump()));
  return x;
}

}  // namespace

double number_field(const json& body, const std::string& name, double lo, double hi, double fallback) {
  if (!body.contains(name) || body[name].is_null()) return fallback;
  return checked_number(body[name], name, lo, hi);
}

int64_t integer_field(const json& body, const std::string& name, int64_t lo, int64_t hi, int64_t fallback) {
  if (!body.contains(name) || body[name].is_null()) return fallback;
  const json& v = body[name];
  if (!v.is_number_integer() && !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))
    throw ApiError(400, name, fmt::format("'{}' must be an integer", name));
  const auto out_of_range = [&] {
    return ApiError(400, name, fmt::format("'{}' must be between {} and {}, got {}", name, lo, hi, v.dump()));
  };
  // Compared exactly: as doubles, INT64_MAX rounds up to 2^63, and casting 2^63 (or more) to
  // int64_t is undefined.
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi) || static_cast<int64_t>(u) < lo) throw out_of_range();
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) {
    const auto i = v.get<int64_t>();
    if (i < lo || i > hi) throw out_of_range();
    return i;
  }
  const double x = v.get<double>();
  constexpr double kTwoTo63 = 9223372036854775808.0;
  if (!std::isfinite(x) || x < -kTwoTo63 || x >= kTwoTo63) throw out_of_range();
  const auto i = static_cast<int64_t>(x);
  if (i < lo || i > hi) throw out_of_range();
  return i;
}

std::vector<double> number_list_field(const json& body, const std::string& name, double lo, double hi, double fallback,
                                      size_t max_items) {
  if (!body.contains(name) || body[name].is_null()) return {fallback};
  const json& v = body[name];
  if (!v.is_array()) return {checked_number(v, name, lo, hi)};
  if (v.empty() || v.size() > max_items)
    throw ApiError(400, name, fmt::format("'{}' must list 1 to {} values", name, max_items));
  std::vector<double> out;
  for (const auto& x : v) out.push_back(checked_number(x, name, lo, hi));
  return out;
}

std::string path_field(const json& body, const std::string& name, const std::vector<std::string>& roots,
                       bool directory) {
  std::string raw = string_field(body, name, true, 4096);
  std::error_code ec;
  fs::path p = fs::canonical(raw, ec);  // resolves "..", links; fails when missing
  if (ec) throw ApiError(400, name, fmt::format("'{}': {} does not exist", name, raw));
  bool inside = false;
  for (const auto& r : roots) {
    fs::path root = fs::weakly_canonical(r, ec);
    auto rel = p.lexically_relative(root);
    if (!rel.empty() && *rel.begin() != "..") inside = true;
  }
  if (!inside)
    throw ApiError(
        400, name,
        fmt::format("'{}': {} is outside the folders datasets may come from ({})", name, raw, fmt::join(roots, ", ")));
  if (directory != fs::is_directory(p))
    throw ApiError(400, name,
                   fmt::format("'{}': {} is {}", name, raw, directory ? "not a folder" : "a folder, not a file"));
  return p.string();
}

}  // namespace bks::server
