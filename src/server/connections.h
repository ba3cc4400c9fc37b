// How `bakusoku serve` takes connections. cpp-httplib 0.11 gives each connection a worker
// thread for as long as it is open, and live charts keep theirs for minutes, so the workers
// grow on demand (task_queue.h) up to the live-chart budget plus a share of the API's own;
// and its listen backlog of 5 dropped bursts of connections, so it is raised after bind.
#pragma once

#include <httplib.h>

#include <atomic>
#include <memory>

namespace bks::server {

// Workers for the API (and pages) besides the live-chart streams: requests in flight and
// keep-alive connections waiting for their next request each hold one.
constexpr int kApiWorkers = 256;
// The kernel caps it at net.core.somaxconn (4096 on current Linux).
constexpr int kListenBacklog = 4096;

class ServerConnections {
 public:
  // Sets `http`'s workers, keep-alive limits and socket options, for `max_viewers` streams.
  ServerConnections(httplib::Server& http, int max_viewers);
  // After bind_to_port: listen() again on the bound socket with kListenBacklog (Linux
  // updates the backlog of a listening socket). False when that failed.
  bool raise_backlog() const;

 private:
  std::shared_ptr<std::atomic<int>> listen_fd_ = std::make_shared<std::atomic<int>>(-1);
};

}  // namespace bks::server
