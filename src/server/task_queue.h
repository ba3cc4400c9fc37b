// The HTTP server's workers. cpp-httplib hands every accepted connection to a TaskQueue and
// the connection keeps its worker for as long as it lives (keep-alive waits, live-chart
// streams), so a fixed pool is either too small (viewers starve the API) or idle and large.
// This pool starts small, adds a thread whenever a connection would otherwise wait, up to
// `max_threads`, and lets the extra threads go once they sit idle. Beyond the bound,
// connections queue (up to `max_queued`); beyond that the accept loop waits, and new
// connections wait in the kernel's listen backlog instead of being dropped.
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace bks::server {

struct PoolLimits {
  size_t min_threads = 8;                         // kept even when idle
  size_t max_threads = 256;                       // never more, however many connections are open
  size_t max_queued = 1024;                       // connections waiting for a thread before enqueue() blocks
  std::chrono::milliseconds idle_timeout{30000};  // an extra thread idle this long ends
};

class ElasticThreadPool : public httplib::TaskQueue {
 public:
  explicit ElasticThreadPool(PoolLimits limits);
  ~ElasticThreadPool() override;
  ElasticThreadPool(const ElasticThreadPool&) = delete;
  ElasticThreadPool& operator=(const ElasticThreadPool&) = delete;

  // Blocks while `max_queued` tasks already wait (cpp-httplib 0.11 cannot refuse a task).
  void enqueue(std::function<void()> fn) override;
  // Runs what is queued, then ends every thread.
  void shutdown() override;
  // Called by the accept loop when it has nothing to do: joins threads that ended.
  void on_idle() override;

  size_t threads() const;       // alive now
  size_t peak_threads() const;  // the most alive at once

 private:
  void start_thread();  // with mu_ held
  void work();
  void join_ended();

  const PoolLimits limits_;
  mutable std::mutex mu_;
  std::condition_variable has_task_, has_room_, all_ended_;
  std::deque<std::function<void()>> tasks_;
  std::unordered_map<std::thread::id, std::thread> workers_;
  std::vector<std::thread> ended_;  // finished their loop; joined outside the lock
  size_t idle_ = 0, peak_ = 0;
  bool stopping_ = false;
};

}  // namespace bks::server
