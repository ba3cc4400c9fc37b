// A file the dashboard serves unchanged (its page, scripts, styles, images, Chart.js):
// kept in memory beside its gzip form and strong ETags, so a request costs a copy or a
// 304, never a compression.
#pragma once

#include <httplib.h>

#include <memory>
#include <string>

namespace bks::server {

struct StaticAsset {
  std::string type;           // Content-Type
  std::string cache_control;  // Cache-Control
  std::string plain;
  std::string gzip;  // empty when gzip would not be smaller than `plain`
  // Strong validators, one per representation (RFC 9110 8.8.3): a hash of the content,
  // the gzip one marked "-gz" so a cache never takes one form for the other.
  std::string etag, gzip_etag;
};

// `body` with its gzip form and ETags worked out now.
std::shared_ptr<const StaticAsset> make_static_asset(std::string body, std::string type, std::string cache_control);

// Whether an Accept-Encoding header lets the response be gzip: "gzip", "x-gzip" or "*"
// listed with a q-value above 0 (and gzip not refused by name when only "*" allows it).
bool accepts_gzip(const std::string& accept_encoding);

// Which of `a`'s ETags an If-None-Match header names (nullptr when neither; "*" names
// `preferred`). Weak comparison, as RFC 9110 13.1.2 asks for If-None-Match: a W/ prefix is
// ignored.
const std::string* etag_match(const std::string& if_none_match, const StaticAsset& a, const std::string& preferred);

// Answers with `a`: 304 without a body when If-None-Match names it, else its gzip form
// when Accept-Encoding allows, else as is.
void send_static_asset(const httplib::Request& req, httplib::Response& res, std::shared_ptr<const StaticAsset> a);

}  // namespace bks::server
