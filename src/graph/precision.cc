#include "graph/precision.h"

#include "core/error.h"

namespace bks {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::bf16: return "bf16";
    case Precision::int8: return "int8";
    default: return "fp32";
  }
}

Precision parse_precision(const std::string& text, const std::string& what) {
  for (Precision p : {Precision::fp32, Precision::bf16, Precision::int8})
    if (text == precision_name(p)) return p;
  input_error("{} must be fp32, bf16 or int8, got '{}'", what, text);
}

}  // namespace bks
