#include "graph/param_store.h"

namespace bks {

int ParamStore::find(const std::string& key) const {
  auto it = by_key_.find(key);
  return it == by_key_.end() ? -1 : it->second;
}

int ParamStore::find_shared(const std::string& share_name) const {
  auto it = by_share_.find(share_name);
  return it == by_share_.end() ? -1 : it->second;
}

int ParamStore::add(const std::string& key, const std::string& share_name, const Shape& shape, bool learnable) {
  BKS_CHECK(find(key) < 0, "parameter {} added twice", key);
  Param p;
  p.key = key;
  p.data = Tensor(shape);
  if (learnable) p.grad = Tensor(shape);
  p.learnable = learnable;
  params_.push_back(std::move(p));
  int idx = size() - 1;
  by_key_[key] = idx;
  if (!share_name.empty()) by_share_[share_name] = idx;
  return idx;
}

void ParamStore::clear_grads() {
  for (auto& p : params_) p.grad_written = false;
}

void ParamStore::zero_unwritten_grads() {
  for (auto& p : params_)
    if (p.learnable && !p.grad_written) {
      p.grad.zero();
      p.grad_written = true;
    }
}

}  // namespace bks
