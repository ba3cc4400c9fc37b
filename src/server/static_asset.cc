#include "server/static_asset.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "server/gzip.h"

namespace bks::server {

namespace {

// 64-bit FNV-1a: an ETag only has to change when the content does, not resist forgery.
uint64_t fnv1a(std::string_view s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The comma-separated items of a header value, trimmed, empty ones dropped.
std::vector<std::string_view> items(std::string_view v) {
  std::vector<std::string_view> out;
  while (!v.empty()) {
    size_t comma = v.find(',');
    std::string_view item = trim(v.substr(0, comma));
    if (!item.empty()) out.push_back(item);
    v = comma == std::string_view::npos ? std::string_view() : v.substr(comma + 1);
  }
  return out;
}

bool same_word(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// The q-value of one Accept-Encoding item ("gzip;q=0.5"): 1 when none is given.
double q_value(std::string_view params) {
  for (std::string_view p : items(params)) {  // never more than one in practice
    p = trim(p);
    if (p.size() > 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=')
      return std::strtod(std::string(p.substr(2)).c_str(), nullptr);
  }
  return 1;
}

}  // namespace

std::shared_ptr<const StaticAsset> make_static_asset(std::string body, std::string type, std::string cache_control) {
  auto a = std::make_shared<StaticAsset>();
  a->type = std::move(type);
  a->cache_control = std::move(cache_control);
  a->plain = std::move(body);
  a->gzip = gzip(a->plain);
  if (a->gzip.size() >= a->plain.size()) a->gzip.clear();
  const std::string tag = fmt::format("{:x}-{:016x}", a->plain.size(), fnv1a(a->plain));
  a->etag = "\"" + tag + "\"";
  a->gzip_etag = "\"" + tag + "-gz\"";
  return a;
}

bool accepts_gzip(const std::string& accept_encoding) {
  double gzip_q = -1, star_q = -1;  // -1: not listed
  for (std::string_view item : items(accept_encoding)) {
    size_t semi = item.find(';');
    std::string_view coding = trim(item.substr(0, semi));
    double q = semi == std::string_view::npos ? 1 : q_value(item.substr(semi + 1));
    if (same_word(coding, "gzip") || same_word(coding, "x-gzip"))
      gzip_q = std::max(gzip_q, q);
    else if (coding == "*")
      star_q = q;
  }
  return gzip_q >= 0 ? gzip_q > 0 : star_q > 0;
}

const std::string* etag_match(const std::string& if_none_match, const StaticAsset& a, const std::string& preferred) {
  for (std::string_view tag : items(if_none_match)) {
    if (tag == "*") return &preferred;
    if (tag.substr(0, 2) == "W/") tag.remove_prefix(2);
    if (tag == a.etag) return &a.etag;
    if (tag == a.gzip_etag) return &a.gzip_etag;
  }
  return nullptr;
}

void send_static_asset(const httplib::Request& req, httplib::Response& res, std::shared_ptr<const StaticAsset> a) {
  const bool gz = !a->gzip.empty() && accepts_gzip(req.get_header_value("Accept-Encoding"));
  // The body depends on Accept-Encoding: caches between must keep the two forms apart.
  res.set_header("Vary", "Accept-Encoding");
  res.set_header("Cache-Control", a->cache_control);
  const std::string& etag = gz ? a->gzip_etag : a->etag;
  // The client's copy is current: headers only, naming the copy it holds (which may be the
  // other form, when its Accept-Encoding changed since). cpp-httplib adds "Content-Length:
  // 0"; the true length would be allowed, but clients that read a 304's body by its
  // Content-Length (cpp-httplib's own 0.11 client) would then fail waiting for bytes never sent.
  if (const std::string* held = etag_match(req.get_header_value("If-None-Match"), *a, etag)) {
    res.set_header("ETag", *held);
    res.status = 304;
    return;
  }
  res.set_header("ETag", etag);
  if (gz) res.set_header("Content-Encoding", "gzip");
  const size_t size = (gz ? a->gzip : a->plain).size();
  if (size == 0) {
    res.set_content("", a->type);
    return;
  }
  // Through a content provider, not set_content: cpp-httplib compresses a body set with
  // set_content whenever its type is text, SVG or JSON and the client accepts br or gzip (it
  // does not look at Content-Encoding), which would encode the gzip form a second time
  // and redo the work this cache saves on every request. Bodies from a provider of known
  // length go out as they are. The provider holds `a` so a replaced asset outlives its
  // last response.
  res.set_content_provider(size, a->type, [a, gz](size_t offset, size_t length, httplib::DataSink& sink) {
    return sink.write((gz ? a->gzip : a->plain).data() + offset, length);
  });
}

}  // namespace bks::server
