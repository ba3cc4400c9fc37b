// Errors about a custom network's prototxt in the dashboard's words. The parser and the net
// builder name the place as "custom.prototxt:12:5: what"; the editor shows the text as
// lines, so the place becomes numbers of its own and the file name, which the user never
// gave, goes.
#pragma once

#include <string>

namespace bks::server {

struct SourceError {
  std::string message;  // without the leading "custom.prototxt:LINE[:COL]: "
  int line = 0;         // 1-based; 0 when unknown
  int column = 0;       // 1-based; 0 when unknown
};

// Splits `error`, a message about the text named `source`. Its leading place becomes line
// and column; later mentions of the file ("... at custom.prototxt:7") read "line 7".
SourceError split_source_error(const std::string& error, const std::string& source);

// "line 12: what" (or "what" when no line is known): the line said once.
std::string with_line(const SourceError& e);

}  // namespace bks::server
