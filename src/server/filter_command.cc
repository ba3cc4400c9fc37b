#include "server/filter_command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/error.h"

extern char** environ;

namespace bks::server {

namespace {

constexpr size_t kMaxErrors = 16 << 10;  // enough for a program's complaint; the rest is dropped

// A file descriptor closed when it goes out of scope (every path out of run_filter).
struct Fd {
  int fd = -1;
  Fd() = default;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() {
    if (fd >= 0) close(fd);
    fd = -1;
  }
  bool open() const { return fd >= 0; }
};

void make_pair(Fd& a, Fd& b, bool socket) {
  int p[2];
  // The input side is a socket so that send() can say MSG_NOSIGNAL: a program that stops
  // reading early must not raise SIGPIPE in the server.
  const int rc = socket ? socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) : pipe2(p, O_CLOEXEC);
  if (rc != 0) throw RuntimeError(fmt::format("cannot make a pipe: {}", std::strerror(errno)));
  a.fd = p[0];
  b.fd = p[1];
}

// Reads what is there from `fd` into `into` (at most `cap` bytes kept); closes `fd` at the
// end of the stream. Returns the bytes read.
size_t drain(Fd& fd, std::string& into, size_t cap) {
  char buf[16384];
  const ssize_t n = read(fd.fd, buf, sizeof buf);
  if (n > 0) {
    into.append(buf, std::min(static_cast<size_t>(n), cap > into.size() ? cap - into.size() : 0));
    return static_cast<size_t>(n);
  }
  if (n == 0 || (errno != EAGAIN && errno != EINTR)) fd.reset();
  return 0;
}

}  // namespace

FilterResult run_filter(const std::vector<std::string>& argv, std::string_view input, double timeout_s,
                        size_t max_output) {
  Fd in_child, in, out, out_child, err, err_child;
  make_pair(in_child, in, true);
  make_pair(out, out_child, false);
  make_pair(err, err_child, false);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_child.fd, 0);
  posix_spawn_file_actions_adddup2(&actions, out_child.fd, 1);
  posix_spawn_file_actions_adddup2(&actions, err_child.fd, 2);
  // The server blocks or ignores signals in its threads; the child starts with the defaults.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : {SIGPIPE, SIGINT, SIGTERM, SIGHUP}) sigaddset(&defaults, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  FilterResult r;
  if (rc == ENOENT || rc == EACCES || rc == ENOTDIR) {
    r.end = FilterResult::End::not_found;
    r.code = 127;
    return r;
  }
  if (rc != 0) throw RuntimeError(fmt::format("cannot run {}: {}", argv[0], std::strerror(rc)));
  in_child.reset();
  out_child.reset();
  err_child.reset();
  for (Fd* f : {&in, &out, &err}) fcntl(f->fd, F_SETFL, fcntl(f->fd, F_GETFL) | O_NONBLOCK);

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  auto ms_left = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  };
  size_t sent = 0;
  if (input.empty()) in.reset();
  bool killed = false;
  while (out.open() || err.open()) {
    const int64_t left = ms_left();
    if (left <= 0) {
      r.end = FilterResult::End::timed_out;
      killed = true;
      break;
    }
    pollfd p[3] = {{in.fd, POLLOUT, 0}, {out.fd, POLLIN, 0}, {err.fd, POLLIN, 0}};  // fd -1: skipped
    // A failed poll (EINTR) only goes round again: the deadline still ends the loop.
    if (poll(p, 3, static_cast<int>(std::min<int64_t>(left, 1000))) < 0) continue;
    if (in.open() && p[0].revents) {
      const ssize_t n = send(in.fd, input.data() + sent, input.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) sent += static_cast<size_t>(n);
      // All sent (end of input), or the program stopped reading (its output says why).
      if (sent == input.size() || (n < 0 && errno != EAGAIN && errno != EINTR)) in.reset();
    }
    if (out.open() && p[1].revents) drain(out, r.output, max_output + 1);
    if (r.output.size() > max_output) {
      r.end = FilterResult::End::too_large;
      r.output.clear();
      killed = true;
      break;
    }
    if (err.open() && p[2].revents) drain(err, r.errors, kMaxErrors);
  }
  int st = 0;
  // Its output is closed: its end is near, but not waited for past the deadline either.
  while (!killed && waitpid(pid, &st, WNOHANG) == 0) {
    if (ms_left() <= 0) {
      r.end = FilterResult::End::timed_out;
      killed = true;
    } else {
      usleep(2000);
    }
  }
  if (killed) {
    kill(pid, SIGKILL);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
  }
  r.code = killed ? 137 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

}  // namespace bks::server
