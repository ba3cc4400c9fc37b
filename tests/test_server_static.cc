// The dashboard's static files from a real `bakusoku serve`: gzip only when asked (and
// only once), the same bytes either way, strong ETags answered with 304, Cache-Control,
// the favicon and the 爆速 logo drawn as an SVG.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <memory>

#include "serve_process.h"
#include "server/static_asset.h"

namespace {

namespace fs = std::filesystem;

const char* kChartJs = "/usr/share/javascript/chart.js/chart.min.js";

// One server for the suite: starting it is the slow part.
class ServerStatic : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::remove_all(dir());
    server_ = std::make_unique<Server>(dir().string());
  }
  static void TearDownTestSuite() {
    server_.reset();
    fs::remove_all(dir());
  }
  // The process's own: CTest runs each test as a process of its own, two at once, and a
  // shared folder was removed under the other (TearDownTestSuite failed on it).
  static fs::path dir() { return fs::temp_directory_path() / ("bks_server_static_" + std::to_string(getpid())); }
  // Bodies as sent: no decompression, and so no Accept-Encoding of the client's own (each
  // request names the one it tests).
  static httplib::Result get(const std::string& path, httplib::Headers h = {}) {
    auto c = server_->client();
    c.set_decompress(false);
    return c.Get(path, h);
  }
  static std::unique_ptr<Server> server_;
};
std::unique_ptr<Server> ServerStatic::server_;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string web_file(const std::string& name) { return read_file(fs::path(BKS_SOURCE_DIR) / "web" / name); }

// The bytes of a gzip stream ("" with a test failure when it is not one, or has bytes after).
std::string gunzip(const std::string& gz) {
  z_stream z{};
  EXPECT_EQ(inflateInit2(&z, 15 + 16), Z_OK);  // + 16: gzip wrapper only
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = static_cast<uInt>(gz.size());
  std::string out;
  char buf[65536];
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof buf - z.avail_out);
  }
  EXPECT_EQ(rc, Z_STREAM_END) << "not a whole gzip stream";
  EXPECT_EQ(z.avail_in, 0u) << "bytes after the gzip stream";
  inflateEnd(&z);
  return out;
}

// Every asset the page loads, and Chart.js when Debian's package is there.
std::vector<std::string> asset_paths() {
  std::vector<std::string> p{"/", "/static/app.js", "/static/style.css", "/static/logo.svg", "/favicon.ico"};
  if (fs::exists(kChartJs)) p.push_back("/vendor/chart.js");
  return p;
}

TEST_F(ServerStatic, GzipWhenAskedOnceOnlyPlainOtherwiseAndTheSameBytes) {
  for (const std::string& path : asset_paths()) {
    SCOPED_TRACE(path);
    auto plain = get(path);
    ASSERT_TRUE(plain);
    EXPECT_EQ(plain->status, 200);
    EXPECT_FALSE(plain->has_header("Content-Encoding"));
    EXPECT_EQ(plain->get_header_value("Vary"), "Accept-Encoding");
    ASSERT_FALSE(plain->body.empty());
    // What browsers send: br is listed first, yet the answer is the stored gzip, encoded
    // once (cpp-httplib would otherwise add its own br or gzip on top).
    for (const char* accept : {"gzip", "gzip, deflate, br", "br;q=1.0, gzip;q=0.8, *;q=0.1", "*"}) {
      SCOPED_TRACE(accept);
      auto gz = get(path, {{"Accept-Encoding", accept}});
      ASSERT_TRUE(gz);
      EXPECT_EQ(gz->status, 200);
      EXPECT_EQ(gz->get_header_value_count("Content-Encoding"), 1u);
      EXPECT_EQ(gz->get_header_value("Content-Encoding"), "gzip");
      EXPECT_LT(gz->body.size(), plain->body.size());
      EXPECT_EQ(gunzip(gz->body), plain->body);
      EXPECT_NE(gz->get_header_value("ETag"), plain->get_header_value("ETag")) << "one ETag per form";
    }
    for (const char* refusing : {"identity", "gzip;q=0, br", "*;q=0", "deflate"}) {
      auto r = get(path, {{"Accept-Encoding", refusing}});
      ASSERT_TRUE(r);
      EXPECT_FALSE(r->has_header("Content-Encoding")) << refusing;
      EXPECT_EQ(r->body, plain->body) << refusing;
    }
  }
  if (fs::exists(kChartJs)) {
    EXPECT_EQ(get("/vendor/chart.js")->body, read_file(kChartJs));
  }
}

TEST_F(ServerStatic, StrongETagAnswersIfNoneMatchWith304AndNoBody) {
  for (const std::string& path : asset_paths()) {
    for (const char* accept : {"", "gzip"}) {
      SCOPED_TRACE(path + " Accept-Encoding: " + accept);
      httplib::Headers h;
      if (*accept) h.emplace("Accept-Encoding", accept);
      auto r = get(path, h);
      ASSERT_TRUE(r);
      EXPECT_EQ(r->get_header_value("Cache-Control"), "no-cache");
      const std::string etag = r->get_header_value("ETag");
      ASSERT_GE(etag.size(), 3u);
      EXPECT_EQ(etag.front(), '"') << "strong, quoted: " << etag;
      EXPECT_EQ(etag.back(), '"') << etag;

      for (const std::string& inm : {etag, "W/" + etag, "\"other\", " + etag, std::string("*")}) {
        auto h2 = h;
        h2.emplace("If-None-Match", inm);
        auto again = get(path, h2);
        ASSERT_TRUE(again);
        EXPECT_EQ(again->status, 304) << inm;
        EXPECT_TRUE(again->body.empty()) << inm;
        EXPECT_EQ(again->get_header_value("ETag"), etag) << inm;
        EXPECT_EQ(again->get_header_value("Cache-Control"), "no-cache");
      }
      auto h3 = h;
      h3.emplace("If-None-Match", "\"stale\"");
      auto changed = get(path, h3);
      ASSERT_TRUE(changed);
      EXPECT_EQ(changed->status, 200);
      EXPECT_EQ(changed->body, r->body);
    }
  }
}

TEST_F(ServerStatic, FaviconIsServedAndLinked) {
  for (const char* path : {"/favicon.ico", "/static/favicon.svg"}) {
    auto r = get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << path;
    EXPECT_EQ(r->get_header_value("Content-Type"), "image/svg+xml") << path;
    EXPECT_EQ(r->body, web_file("favicon.svg")) << path;
  }
  EXPECT_NE(get("/")->body.find(R"(<link rel="icon" href="/static/favicon.svg")"), std::string::npos);
}

TEST_F(ServerStatic, LogoIsAnSvgDrawnWithPathsNotTextNeedingACjkFont) {
  const std::string page = get("/")->body;
  EXPECT_NE(page.find(R"(<img src="/static/logo.svg" alt="爆速")"), std::string::npos);
  EXPECT_EQ(page.find("<span>爆速</span>"), std::string::npos);
  auto r = get("/static/logo.svg");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "image/svg+xml");
  EXPECT_EQ(r->body, web_file("logo.svg"));
  EXPECT_EQ(r->body.rfind("<svg", 0), 0u);
  EXPECT_NE(r->body.find(R"(aria-label="爆速")"), std::string::npos);
  EXPECT_NE(r->body.find("<path"), std::string::npos);
  EXPECT_EQ(r->body.find("<text"), std::string::npos);
}

TEST_F(ServerStatic, UnknownFilesAre404) {
  auto r = get("/static/no-such-file.js", {{"Accept-Encoding", "gzip"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
}

// The header parsing on its own, in this process.
TEST(ServerStaticHeaders, AcceptEncodingAndIfNoneMatchParsing) {
  using bks::server::accepts_gzip;
  EXPECT_TRUE(accepts_gzip("gzip"));
  EXPECT_TRUE(accepts_gzip("GZip"));
  EXPECT_TRUE(accepts_gzip("x-gzip"));
  EXPECT_TRUE(accepts_gzip("deflate, gzip;q=0.5"));
  EXPECT_TRUE(accepts_gzip(" br , gzip ; q=1"));
  EXPECT_TRUE(accepts_gzip("*"));
  EXPECT_FALSE(accepts_gzip(""));
  EXPECT_FALSE(accepts_gzip("br, deflate"));
  EXPECT_FALSE(accepts_gzip("gzip;q=0"));
  EXPECT_FALSE(accepts_gzip("gzip;q=0.000, *"));  // named and refused: "*" does not bring it back
  EXPECT_FALSE(accepts_gzip("*;q=0"));
  EXPECT_FALSE(accepts_gzip("gzipx"));

  auto a = bks::server::make_static_asset(std::string(1000, 'a'), "text/plain", "no-cache");
  EXPECT_EQ(gunzip(a->gzip), a->plain);
  EXPECT_NE(a->etag, a->gzip_etag);
  auto b = bks::server::make_static_asset(std::string(999, 'a') + "b", "text/plain", "no-cache");
  EXPECT_NE(a->etag, b->etag) << "the ETag follows the content";
  using bks::server::etag_match;
  const std::string pref = "pref";
  EXPECT_EQ(etag_match(a->etag, *a, pref), &a->etag);
  EXPECT_EQ(etag_match("W/" + a->gzip_etag, *a, pref), &a->gzip_etag);
  EXPECT_EQ(etag_match("\"x\" , " + a->gzip_etag, *a, pref), &a->gzip_etag);
  EXPECT_EQ(etag_match("*", *a, pref), &pref);
  EXPECT_EQ(etag_match(b->etag, *a, pref), nullptr);
  EXPECT_EQ(etag_match("", *a, pref), nullptr);
  // Too short for gzip to help: only the plain form is kept.
  EXPECT_TRUE(bks::server::make_static_asset("ab", "text/plain", "no-cache")->gzip.empty());
}

}  // namespace
