// The pages: web/ (compiled in) at / and /static/, its icon at /favicon.ico, Debian's
// Chart.js at /vendor/chart.js; each compressed once and revalidated by ETag
// (static_asset.h).
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "server/http.h"
#include "server/static_asset.h"
#include "server/web_assets.h"

namespace bks::server {

namespace {

namespace fs = std::filesystem;

// Debian's libjs-chart.js (installed by scripts/install_deps.sh).
constexpr const char* kChartJs = "/usr/share/javascript/chart.js/chart.min.js";

// Every asset is "no-cache": stored, but revalidated before each use. index.html names
// /static/app.js and /vendor/chart.js without a version, so a long max-age would keep a
// browser on the old script after the binary is rebuilt (or Chart.js upgraded); with
// revalidation an unchanged file costs one 304 without a body, a changed one is fetched
// at once because its ETag (a hash of its content) changes with it.
constexpr const char* kCacheControl = "no-cache";

const char* mime(const std::string& name) {
  auto ends = [&](const char* e) {
    return name.size() >= std::strlen(e) && name.compare(name.size() - std::strlen(e), std::string::npos, e) == 0;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

// web/ as served, compressed on first use (a few milliseconds, once per process).
const std::map<std::string, std::shared_ptr<const StaticAsset>>& web() {
  static const auto assets = [] {
    std::map<std::string, std::shared_ptr<const StaticAsset>> m;
    for (const auto& [name, bytes] : web_assets())
      m.emplace(name, make_static_asset(std::string(bytes), mime(name), kCacheControl));
    return m;
  }();
  return assets;
}

// Chart.js as now on disk: read and compressed again only when its size or time changes
// (a package upgrade while the server runs); nullptr when it is missing.
std::shared_ptr<const StaticAsset> chart_js() {
  static std::mutex mu;
  static std::shared_ptr<const StaticAsset> cached;
  static std::pair<fs::file_time_type, uintmax_t> cached_key;
  std::error_code ec;
  auto key = std::make_pair(fs::last_write_time(kChartJs, ec), uintmax_t{0});
  if (!ec) key.second = fs::file_size(kChartJs, ec);
  if (ec) return nullptr;
  std::lock_guard lock(mu);
  if (cached && cached_key == key) return cached;
  std::ifstream in(kChartJs, std::ios::binary);
  if (!in) return nullptr;
  cached = make_static_asset(std::string(std::istreambuf_iterator<char>(in), {}), mime(kChartJs), kCacheControl);
  cached_key = key;
  return cached;
}

}  // namespace

void add_static_routes(httplib::Server& s) {
  s.Get("/", [](const httplib::Request& req, httplib::Response& res) {
    send_static_asset(req, res, web().at("index.html"));
  });
  s.Get(R"(/static/([A-Za-z0-9_.-]+))", [](const httplib::Request& req, httplib::Response& res) {
    auto it = web().find(req.matches[1].str());
    if (it == web().end()) return reply(res, 404, {{"error", "no such file"}});
    send_static_asset(req, res, it->second);
  });
  // Browsers ask for /favicon.ico whatever the page links; the SVG answers there too.
  s.Get("/favicon.ico", [](const httplib::Request& req, httplib::Response& res) {
    send_static_asset(req, res, web().at("favicon.svg"));
  });
  s.Get("/vendor/chart.js", [](const httplib::Request& req, httplib::Response& res) {
    auto a = chart_js();
    if (!a) return reply(res, 404, {{"error", std::string(kChartJs) + " is missing: install Debian's libjs-chart.js"}});
    send_static_asset(req, res, a);
  });
}

}  // namespace bks::server
