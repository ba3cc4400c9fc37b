// A per-key cache of what a reader loaded, kept while anyone holds it: a layer's shape
// inference and its kernel share one read of its source.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace bks {

template <class T>
class WeakCache {
 public:
  std::shared_ptr<const T> get(const std::string& key, const std::function<std::shared_ptr<const T>()>& load) {
    std::lock_guard lk(mu_);
    if (auto hit = map_[key].lock()) return hit;
    auto v = load();
    map_[key] = v;
    return v;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::weak_ptr<const T>> map_;
};

}  // namespace bks
