#include "formats/unique_names.h"

#include <fmt/format.h>

namespace bks {

std::string UniqueNames::take(const std::string& name) {
  if (taken_.insert(name).second) return name;
  int& k = next_.try_emplace(name, 2).first->second;
  std::string unique;
  while (!taken_.insert(unique = fmt::format("{}_{}", name, k)).second) ++k;
  ++k;
  return unique;
}

}  // namespace bks
