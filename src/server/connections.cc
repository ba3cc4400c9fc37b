#include "server/connections.h"

#include <sys/socket.h>

#include "server/task_queue.h"

namespace bks::server {

ServerConnections::ServerConnections(httplib::Server& http, int max_viewers) {
  PoolLimits limits;
  limits.max_threads = static_cast<size_t>(max_viewers) + kApiWorkers;
  http.new_task_queue = [limits] { return new ElasticThreadPool(limits); };
  // A keep-alive connection holds its worker between requests: a busy client keeps its
  // connection for up to 100 requests (no handshake per request), an idle one lets go after
  // 5 seconds.
  http.set_keep_alive_max_count(100);
  http.set_keep_alive_timeout(5);
  // cpp-httplib writes a response's headers and body separately: with Nagle's algorithm the
  // body waits for the client's delayed ACK, 40 ms on every keep-alive request. Accepted
  // sockets inherit TCP_NODELAY from the listening one.
  http.set_tcp_nodelay(true);
  // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, which would let a second
  // server share the port silently and take half the requests. The callback runs before
  // bind, so it remembers the socket for raise_backlog(); the last one is the one bound
  // (cpp-httplib tries the host's addresses in turn and stops at the first that binds).
  http.set_socket_options([fd = listen_fd_](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    fd->store(sock);
  });
}

bool ServerConnections::raise_backlog() const {
  const int fd = listen_fd_->load();
  return fd >= 0 && ::listen(fd, kListenBacklog) == 0;
}

}  // namespace bks::server
