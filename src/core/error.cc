#include "core/error.h"

namespace bks {

void check_failed(const char* expr, const char* file, int line, const std::string& msg) {
  throw std::logic_error(fmt::format("internal error at {}:{}: check '{}' failed: {}", file, line, expr, msg));
}

}  // namespace bks
