#include "core/log.h"

#include <cstdio>
#include <mutex>

namespace bks::log {
namespace {
Level g_level = Level::info;
std::FILE* g_file = nullptr;
std::mutex g_mu;
std::string g_prefix;
}  // namespace

void set_level(Level l) { g_level = l; }
Level level() { return g_level; }

void set_file(const std::string& path) {
  std::lock_guard lk(g_mu);
  if (g_file) std::fclose(g_file);
  g_file = path.empty() ? nullptr : std::fopen(path.c_str(), "a");
}

void set_prefix(const std::string& prefix) {
  std::lock_guard lk(g_mu);
  g_prefix = prefix;
}

void write(Level l, const std::string& msg) {
  static const char* tags[] = {"debug", "info", "warning", "error"};
  std::lock_guard lk(g_mu);
  if (l == Level::info)
    std::fprintf(stderr, "%s%s\n", g_prefix.c_str(), msg.c_str());
  else
    std::fprintf(stderr, "%s%s: %s\n", g_prefix.c_str(), tags[static_cast<int>(l)], msg.c_str());
  if (g_file) {
    std::fprintf(g_file, "[%s] %s\n", tags[static_cast<int>(l)], msg.c_str());
    std::fflush(g_file);
  }
}

}  // namespace bks::log

namespace bks::log {
void to_file(const std::string& msg) {
  std::lock_guard lk(g_mu);
  if (g_file) {
    std::fprintf(g_file, "[info] %s\n", msg.c_str());
    std::fflush(g_file);
  }
}
}  // namespace bks::log
