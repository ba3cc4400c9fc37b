// The arithmetic a deployed graph, and each of its nodes, runs in. Parsed once, where text
// comes in (the command line, a bundle's metadata); everything past that edge passes the
// enum.
#pragma once

#include <string>

namespace bks {

enum class Precision { fp32, bf16, int8 };

// "fp32", "bf16", "int8".
const char* precision_name(Precision p);
// InputError "<what> must be fp32, bf16 or int8, got '<text>'" otherwise.
Precision parse_precision(const std::string& text, const std::string& what);

}  // namespace bks
