// The dashboard's pages, scripts and styles (web/), compiled into the binary so `bakusoku
// serve` needs no files beside it. Generated at build time by cmake/embed_files.cmake.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace bks::server {

const std::map<std::string, std::string_view>& web_assets();

}  // namespace bks::server
