#include "runtime/arena.h"

namespace bks {

void Arena::reserve(size_t bytes, Device dev) {
  BKS_CHECK(!storage_ || storage_->device() == dev, "one arena on {} and {}", storage_->device().str(), dev.str());
  if (storage_ && storage_->bytes() >= bytes) return;
  storage_.reset();  // free the old buffer before allocating the new one
  storage_ = std::make_shared<Storage>(bytes, dev);
  for (auto& [user, rebind] : users_) rebind();
}

void Arena::add_user(const void* user, std::function<void()> rebind) { users_[user] = std::move(rebind); }

void Arena::remove_user(const void* user) { users_.erase(user); }

}  // namespace bks
