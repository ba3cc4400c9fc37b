// gzip (RFC 1952) of a byte string, for responses sent with Content-Encoding: gzip.
#pragma once

#include <string>
#include <string_view>

namespace bks::server {

// `raw` as one gzip member at the best compression: made once per asset, so the slow
// level costs nothing per request. The header carries no time stamp or name, so equal
// input gives equal output.
std::string gzip(std::string_view raw);

}  // namespace bks::server
