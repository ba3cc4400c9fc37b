// Minimal leveled logging to stderr plus an optional log file (the run directory's log.txt).
#pragma once

#include <fmt/format.h>

#include <string>

namespace bks::log {

enum class Level { debug, info, warn, error };
void set_level(Level l);
Level level();
// Also append every message to this file (empty path closes it).
void set_file(const std::string& path);
void write(Level l, const std::string& msg);
// Only to the log file (for lines already shown on stdout).
void to_file(const std::string& msg);
// Put before every message on stderr (a data-parallel rank's "rank R on HOST: ").
void set_prefix(const std::string& prefix);

template <class... A>
void info(fmt::format_string<A...> f, A&&... a) {
  if (level() <= Level::info) write(Level::info, fmt::format(f, std::forward<A>(a)...));
}
template <class... A>
void warn(fmt::format_string<A...> f, A&&... a) {
  if (level() <= Level::warn) write(Level::warn, fmt::format(f, std::forward<A>(a)...));
}
template <class... A>
void debug(fmt::format_string<A...> f, A&&... a) {
  if (level() <= Level::debug) write(Level::debug, fmt::format(f, std::forward<A>(a)...));
}

}  // namespace bks::log
