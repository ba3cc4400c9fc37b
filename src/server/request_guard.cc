#include "server/request_guard.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string_view>

namespace bks::server {

namespace {

// A host name (lower case; IPv6 addresses keep their brackets) and a port.
struct Authority {
  std::string host;
  int port = 0;
  bool operator==(const Authority&) const = default;
};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return out;
}

// "host[:port]" as a Host header or an origin writes it; the port is `default_port` when
// not written. Nothing when it is malformed.
std::optional<Authority> parse_authority(std::string_view text, int default_port) {
  std::string_view host = text, port;
  bool has_port = false;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = text.substr(0, close + 1);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return std::nullopt;
      has_port = true;
      port = rest.substr(1);
    }
  } else if (const size_t colon = text.find(':'); colon != std::string_view::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    has_port = true;
  }
  if (host.empty()) return std::nullopt;
  Authority a{lower(host), default_port};
  if (has_port) {
    if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), ::isdigit)) return std::nullopt;
    a.port = std::stoi(std::string(port));
  }
  return a;
}

// An Origin header ("http://host[:port]"), nothing when it is "null" or malformed.
std::optional<Authority> parse_origin(std::string_view origin, int& default_port) {
  for (auto [scheme, port] : {std::pair{std::string_view("http://"), 80}, std::pair{std::string_view("https://"), 443}})
    if (lower(origin.substr(0, scheme.size())) == scheme) {
      default_port = port;
      return parse_authority(origin.substr(scheme.size()), port);
    }
  return std::nullopt;
}

bool is_loopback(const std::optional<Authority>& a, int served_port) {
  return a && a->port == served_port && (a->host == "localhost" || a->host == "127.0.0.1" || a->host == "[::1]");
}

bool changes_state(const std::string& method) { return method != "GET" && method != "HEAD" && method != "OPTIONS"; }

std::string loopback_names(int port) { return fmt::format("localhost:{0}, 127.0.0.1:{0} or [::1]:{0}", port); }

}  // namespace

std::optional<ApiError> cross_site_refusal(const httplib::Request& req, bool has_token) {
  for (const char* header : {"Host", "Origin"})
    if (req.get_header_value_count(header) > 1)
      return ApiError(403, header, fmt::format("the request has more than one {} header", header));
  const std::string host = req.get_header_value("Host");
  const int port = req.local_port;
  if (!has_token && !is_loopback(parse_authority(host, 80), port))
    return ApiError(403, "Host",
                    fmt::format("Host '{}' is not this server's name: without a token the API answers only to {} "
                                "(serve with --token to use other names)",
                                host, loopback_names(port)));
  if (!req.has_header("Origin")) return std::nullopt;  // not sent by a browser, or same-origin
  const std::string origin = req.get_header_value("Origin");
  int default_port = 80;
  const std::optional<Authority> from = parse_origin(origin, default_port);
  if (!has_token && !is_loopback(from, port))
    return ApiError(403, "Origin",
                    fmt::format("requests from the page at '{}' are refused: without a token only this server's own "
                                "pages ({}) may call the API",
                                origin, loopback_names(port)));
  if (has_token && changes_state(req.method) && (!from || from != parse_authority(host, default_port)))
    return ApiError(403, "Origin",
                    fmt::format("{} from the page at '{}' is refused: only this server's own pages (at '{}') may "
                                "change anything",
                                req.method, origin, host));
  return std::nullopt;
}

void require_json_content_type(const httplib::Request& req) {
  const std::string type = req.get_header_value("Content-Type");
  std::string media = lower(type.substr(0, type.find(';')));
  media.erase(std::remove_if(media.begin(), media.end(), ::isspace), media.end());
  if (media != "application/json")
    throw ApiError(
        415, "Content-Type",
        fmt::format("the request body must be JSON sent as 'Content-Type: application/json', not '{}'", type));
}

}  // namespace bks::server
