// The pages: web/ (compiled in) at /, Debian's Chart.js at /vendor/chart.js.
#include <fstream>

#include "server/http.h"
#include "server/web_assets.h"

namespace bks::server {

namespace {

// Debian's libjs-chart.js (installed by scripts/install_deps.sh).
constexpr const char* kChartJs = "/usr/share/javascript/chart.js/chart.min.js";

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

}  // namespace

void add_static_routes(httplib::Server& s) {
  s.Get("/", [](const httplib::Request&, httplib::Response& res) {
    const auto& a = web_assets();
    auto it = a.find("index.html");
    res.set_content(std::string(it->second), mime("index.html"));
  });
  s.Get(R"(/static/([A-Za-z0-9_.-]+))", [](const httplib::Request& req, httplib::Response& res) {
    const auto& a = web_assets();
    auto it = a.find(req.matches[1].str());
    if (it == a.end()) return reply(res, 404, {{"error", "no such file"}});
    res.set_content(std::string(it->second), mime(it->first));
  });
  s.Get("/vendor/chart.js", [](const httplib::Request&, httplib::Response& res) {
    std::ifstream in(kChartJs, std::ios::binary);
    if (!in)
      return reply(res, 404, {{"error", std::string(kChartJs) + " is missing: install Debian's libjs-chart.js"}});
    res.set_content(std::string(std::istreambuf_iterator<char>(in), {}), "text/javascript; charset=utf-8");
  });
}

}  // namespace bks::server
