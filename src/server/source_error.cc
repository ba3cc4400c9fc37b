#include "server/source_error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace bks::server {

namespace {

// The number at `at` (up to 9 digits, so it fits an int), moving `at` past it; -1 when none.
int number_at(const std::string& s, size_t& at) {
  size_t end = at;
  while (end < s.size() && end - at < 9 && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
  if (end == at || (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end])))) return -1;
  const int n = std::stoi(s.substr(at, end - at));
  at = end;
  return n;
}

}  // namespace

SourceError split_source_error(const std::string& error, const std::string& source) {
  SourceError e;
  std::string rest = error;
  const std::string head = source + ":";
  if (rest.rfind(head, 0) == 0) {
    size_t at = head.size();
    const int line = number_at(rest, at);
    int column = -1;
    if (line >= 0 && at < rest.size() && rest[at] == ':' && at + 1 < rest.size() &&
        std::isdigit(static_cast<unsigned char>(rest[at + 1]))) {
      ++at;
      column = number_at(rest, at);
    }
    if (line < 0) at = head.size();  // "custom.prototxt: what"
    if (rest.compare(at, 1, ":") == 0) ++at;
    while (at < rest.size() && rest[at] == ' ') ++at;
    rest.erase(0, at);
    e.line = std::max(line, 0);
    e.column = e.line > 0 ? std::max(column, 0) : 0;
  }
  // Mentions further in: "custom.prototxt:7" -> "line 7".
  for (size_t at = rest.find(head); at != std::string::npos; at = rest.find(head, at)) {
    size_t end = at + head.size();
    const int line = number_at(rest, end);
    if (line < 0) {
      at = end;
      continue;
    }
    const std::string words = fmt::format("line {}", line);
    rest.replace(at, end - at, words);
    at += words.size();
  }
  e.message = rest;
  return e;
}

std::string with_line(const SourceError& e) {
  return e.line > 0 ? fmt::format("line {}: {}", e.line, e.message) : e.message;
}

}  // namespace bks::server
