#include "server/task_queue.h"

#include <algorithm>
#include <system_error>

#include "core/error.h"
#include "core/log.h"

namespace bks::server {

ElasticThreadPool::ElasticThreadPool(PoolLimits limits) : limits_(limits) {
  BKS_CHECK(limits_.max_threads >= 1 && limits_.min_threads <= limits_.max_threads && limits_.max_queued >= 1,
            "pool limits: min {} max {} queue {}", limits_.min_threads, limits_.max_threads, limits_.max_queued);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < limits_.min_threads; ++i) start_thread();
}

ElasticThreadPool::~ElasticThreadPool() { shutdown(); }

void ElasticThreadPool::start_thread() {
  std::thread t(&ElasticThreadPool::work, this);  // it waits for mu_, which we hold
  const auto id = t.get_id();
  workers_.emplace(id, std::move(t));
  peak_ = std::max(peak_, workers_.size());
}

void ElasticThreadPool::enqueue(std::function<void()> fn) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    has_room_.wait(lock, [&] { return tasks_.size() < limits_.max_queued || stopping_; });
    tasks_.push_back(std::move(fn));
    // Every queued task needs an idle thread of its own, or it would wait behind a
    // connection that may stay open for minutes.
    if (idle_ < tasks_.size() && workers_.size() < limits_.max_threads) {
      try {
        start_thread();
      } catch (const std::system_error& e) {
        // Out of threads (ulimit, memory): the task waits for a busy one instead.
        log::warn("bakusoku serve: cannot start another HTTP worker ({}); {} busy", e.what(), workers_.size());
      }
    }
  }
  has_task_.notify_one();
  join_ended();
}

void ElasticThreadPool::work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ++idle_;
    const bool woken = has_task_.wait_for(lock, limits_.idle_timeout, [&] { return !tasks_.empty() || stopping_; });
    --idle_;
    if (tasks_.empty()) {
      if (stopping_) break;
      if (!woken && workers_.size() > limits_.min_threads) break;  // idle too long: one fewer
      continue;
    }
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    has_room_.notify_one();
    lock.unlock();
    try {
      task();
    } catch (const std::exception& e) {
      // cpp-httplib catches handler errors; anything here is the connection's own failure
      // (out of memory), and must not end the process.
      log::warn("bakusoku serve: an HTTP connection failed: {}", e.what());
    } catch (...) {
      log::warn("bakusoku serve: an HTTP connection failed");
    }
    lock.lock();
  }
  // This thread cannot join itself: hand it to whoever calls join_ended() next.
  auto self = workers_.extract(std::this_thread::get_id());
  if (!self.empty()) ended_.push_back(std::move(self.mapped()));
  if (workers_.empty()) all_ended_.notify_all();
}

void ElasticThreadPool::join_ended() {
  std::vector<std::thread> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done.swap(ended_);
  }
  for (auto& t : done) t.join();
}

void ElasticThreadPool::on_idle() { join_ended(); }

void ElasticThreadPool::shutdown() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
    has_task_.notify_all();
    has_room_.notify_all();
    all_ended_.wait(lock, [&] { return workers_.empty(); });
  }
  join_ended();
}

size_t ElasticThreadPool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return workers_.size();
}

size_t ElasticThreadPool::peak_threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

}  // namespace bks::server
