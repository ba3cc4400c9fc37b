#include "data/prefetcher.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/rng.h"

namespace bks {

Prefetcher::Prefetcher(std::vector<Shape> shapes, Build build, bool background)
    : build_(std::move(build)), background_(background) {
  for (auto* b : {&front_, &back_})
    for (const Shape& s : shapes) b->t.emplace_back(s);
  if (background_) thread_ = std::thread([this] { worker(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Prefetcher::build(int64_t step, Buffers& b) const {
  b.error = nullptr;
  try {
    build_(step, b.t);
  } catch (...) {
    b.error = std::current_exception();
  }
  b.step = step;
}

void Prefetcher::worker() {
  std::unique_lock lk(mu_);
  while (true) {
    cv_.wait(lk, [&] { return stop_ || want_ >= 0; });
    if (stop_) return;
    int64_t s = want_;
    want_ = -1;
    busy_ = true;
    lk.unlock();
    build(s, back_);
    lk.lock();
    busy_ = false;
    cv_.notify_all();
  }
}

void Prefetcher::load(int64_t step, const std::vector<Tensor*>& out) {
  bool ready = false;
  if (background_) {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return !busy_ && want_ < 0; });
    if (back_.step == step) {
      std::swap(front_, back_);
      ready = true;
    }
  }
  if (!ready) build(step, front_);
  if (front_.error) {
    front_.step = -1;  // built again if asked again
    std::rethrow_exception(front_.error);
  }
  for (size_t i = 0; i < out.size() && i < front_.t.size(); ++i)
    if (out[i]) std::memcpy(out[i]->raw(), front_.t[i].raw(), std::min(out[i]->bytes(), front_.t[i].bytes()));
  // The stride between the steps asked for: 1 for one process, N for each of N ranks.
  const int64_t stride = last_step_ >= 0 && step > last_step_ ? step - last_step_ : 1;
  last_step_ = step;
  if (background_) {
    std::lock_guard lk(mu_);
    want_ = step + stride;
    cv_.notify_all();
  }
}

EpochOrder::EpochOrder(int64_t size, int64_t batch, bool shuffle, int64_t skip, uint64_t seed, std::string name)
    : size_(size), batch_(batch), skip_(skip), shuffle_(shuffle), seed_(seed), name_(std::move(name)) {}

int64_t EpochOrder::sample(int64_t step, int64_t i) const {
  int64_t g = step * batch_ + i + skip_;
  if (!shuffle_) return g % size_;
  int64_t epoch = g / size_;
  std::lock_guard lk(mu_);
  if (epoch != epoch_) {
    perm_.resize(static_cast<size_t>(size_));
    std::iota(perm_.begin(), perm_.end(), 0);
    Rng rng = Rng::derive(seed_, name_ + ".shuffle." + std::to_string(epoch));
    std::shuffle(perm_.begin(), perm_.end(), rng.engine());
    epoch_ = epoch;
  }
  return perm_[static_cast<size_t>(g % size_)];
}

}  // namespace bks
