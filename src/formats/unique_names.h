// Layer names made unique as the importers need them (names key the weights): a name
// already taken becomes "<name>_2", "<name>_3", ..., skipping any of those taken too.
#pragma once

#include <set>
#include <string>
#include <unordered_map>

namespace bks {

class UniqueNames {
 public:
  // `name` when it is free, else the first free "<name>_k"; taken from then on.
  std::string take(const std::string& name);
  // Marks `name` taken, as it is.
  void reserve(const std::string& name) { taken_.insert(name); }

 private:
  std::set<std::string> taken_;
  // Per name, the first suffix not yet tried: many layers of one name cost no rescan of the
  // suffixes already taken (a crafted file of 200,000 made the search quadratic).
  std::unordered_map<std::string, int> next_;
};

}  // namespace bks
