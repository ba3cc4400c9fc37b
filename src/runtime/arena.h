// One buffer shared by the activations and gradients of several nets that never run at the
// same time (a trainer's TRAIN and TEST nets). Each net plans offsets from the liveness of
// its values; the arena is as large as the largest plan. When it grows, every net rebinds.
#pragma once

#include <functional>
#include <map>
#include <memory>

#include "core/tensor.h"

namespace bks {

class Arena {
 public:
  // Grows the buffer to at least `bytes` on `dev` (contents are not kept) and rebinds all
  // users. Every net sharing an arena runs on the same device.
  void reserve(size_t bytes, Device dev = {});
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  size_t size() const { return storage_ ? storage_->bytes() : 0; }
  // `rebind` is called whenever the buffer moves; remove_user stops that.
  void add_user(const void* user, std::function<void()> rebind);
  void remove_user(const void* user);

 private:
  std::shared_ptr<Storage> storage_;
  std::map<const void*, std::function<void()>> users_;
};

}  // namespace bks
