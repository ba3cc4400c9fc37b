#include "server/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"

namespace bks::server {

pid_t spawn(const std::vector<std::string>& argv, const std::string& dir, const std::string& output_file) {
  // Everything the child needs is prepared before fork: after it, only async-signal-safe
  // calls until exec.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) throw RuntimeError(fmt::format("cannot start {}: {}", argv[0], std::strerror(errno)));
  if (pid == 0) {
    sigset_t none;  // the server blocks SIGINT/SIGTERM in its threads; the child must not
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    // If the server dies, the trainer snapshots and stops. SIGHUP, not SIGINT: the kernel
    // may send it again as the child passes through the dying server's threads, and bakusoku
    // takes a repeated SIGINT as "stop now".
    prctl(PR_SET_PDEATHSIG, SIGHUP);
    if (getppid() != parent) _exit(127);  // the server died before prctl
    int fd = open(output_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    int null_in = open("/dev/null", O_RDONLY);
    if (null_in >= 0) dup2(null_in, 0);
    if (chdir(dir.c_str()) != 0) _exit(127);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

CommandResult run_command(const std::vector<std::string>& argv, double timeout_s, size_t max_output) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) throw RuntimeError(fmt::format("cannot run {}: {}", argv[0], std::strerror(errno)));
  const pid_t pid = fork();
  if (pid < 0) {
    close(out[0]);
    close(out[1]);
    throw RuntimeError(fmt::format("cannot run {}: {}", argv[0], std::strerror(errno)));
  }
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(out[1], 1);
    dup2(out[1], 2);
    int null_in = open("/dev/null", O_RDONLY);
    if (null_in >= 0) dup2(null_in, 0);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  CommandResult r;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool timed_out = false;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000))) < 0 && errno != EINTR) break;
    if (!(p.revents & (POLLIN | POLLHUP))) continue;
    char buf[4096];
    const ssize_t n = read(out[0], buf, sizeof buf);
    if (n <= 0) break;  // the command closed its output: it has ended (or is ending)
    if (r.output.size() < max_output)
      r.output.append(buf, std::min(static_cast<size_t>(n), max_output - r.output.size()));
  }
  close(out[0]);
  int st = 0;
  // Its output is closed; its end is near, but not waited for past the deadline either.
  while (!timed_out && waitpid(pid, &st, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline)
      timed_out = true;
    else
      usleep(5000);
  }
  if (timed_out) {
    kill(pid, SIGKILL);
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
  }
  r.code = timed_out ? 124 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

bool was_interrupted(int st) {
  return (WIFEXITED(st) && WEXITSTATUS(st) == 130) || (WIFSIGNALED(st) && WTERMSIG(st) == SIGINT);
}

std::string exit_reason(int st, const std::string& tail) {
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return "";
  // The child's own last error line says most ("error: net.prototxt:12: layer 'conv1' ...").
  std::string error;
  for (const auto& line : last_lines(tail, 40))
    if (line.rfind("error: ", 0) == 0) error = line.substr(7);
  auto mentions = [&](const char* s) { return tail.find(s) != std::string::npos; };
  if (WIFSIGNALED(st)) {
    int sig = WTERMSIG(st);
    if (sig == SIGKILL)
      return "killed (SIGKILL): most often the kernel's out-of-memory killer, when the machine ran out of memory";
    if (sig == SIGSEGV) return "crashed (segmentation fault); the end of its log is below";
    if (sig == SIGINT || sig == SIGTERM) return "stopped by a signal before it could save";
    return fmt::format("ended by signal {} ({})", sig, strsignal(sig));
  }
  int code = WEXITSTATUS(st);
  if (code == 130) return "aborted; its last snapshot is kept";
  if (mentions("bad_alloc") || mentions("Cannot allocate memory") || mentions("out of memory"))
    return "out of memory" + (error.empty() ? std::string() : ": " + error);
  if (code == 2) return "bad input: " + (error.empty() ? std::string("see the log") : error);
  if (code == 127) return "the training program could not be started";
  return fmt::format("failed (exit code {}){}", code, error.empty() ? "" : ": " + error);
}

std::string tail_file(const std::string& path, size_t bytes) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  f.seekg(0, std::ios::end);
  std::streamoff size = f.tellg();
  std::streamoff from = size > static_cast<std::streamoff>(bytes) ? size - static_cast<std::streamoff>(bytes) : 0;
  f.seekg(from);
  std::string s(static_cast<size_t>(size - from), '\0');
  f.read(s.data(), static_cast<std::streamsize>(s.size()));
  for (char& c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if ((u < 32 && c != '\n' && c != '\t') || u >= 127) c = '?';
  }
  return s;
}

std::vector<std::string> last_lines(const std::string& text, size_t n) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) lines.push_back(l);
  if (lines.size() > n) lines.erase(lines.begin(), lines.end() - static_cast<std::ptrdiff_t>(n));
  return lines;
}

namespace {

// The fields of /proc/PID/stat from the third on (state, ppid, ...), numbered as in proc(5);
// empty when the process is gone.
std::vector<std::string> stat_fields(pid_t pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string text;
  if (!std::getline(stat, text)) return {};
  // After the command name (which may hold spaces and parentheses), from its last ')'.
  auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 > text.size()) return {};
  std::vector<std::string> fields{"", "", ""};  // 0 unused; 1 (pid) and 2 (comm) not kept
  std::istringstream in(text.substr(close + 2));
  for (std::string f; fields.size() <= 15 && in >> f;) fields.push_back(f);
  return fields;
}

double number(const std::string& s) {
  try {
    return std::stod(s);
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

std::vector<pid_t> descendants(pid_t root) {
  // One pass over /proc for every process's parent, then the tree below `root`.
  std::multimap<pid_t, pid_t> children;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos || name.size() > 9) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    auto f = stat_fields(pid);
    if (f.size() > 4) children.emplace(static_cast<pid_t>(number(f[4])), pid);
  }
  std::vector<pid_t> out;
  std::vector<pid_t> todo{root};
  while (!todo.empty() && out.size() < 100000) {
    const pid_t p = todo.back();
    todo.pop_back();
    auto [lo, hi] = children.equal_range(p);
    for (auto it = lo; it != hi; ++it) {
      out.push_back(it->second);
      todo.push_back(it->second);
    }
  }
  return out;
}

void signal_tree(pid_t root, int sig) {
  // The descendants first: once `root` ends, its children are no longer below it.
  const std::vector<pid_t> below = descendants(root);
  kill(root, sig);
  for (pid_t p : below) kill(p, sig);
}

namespace {

// The process's proportional share of its resident pages (a page that N processes map
// counts 1/N in each), so that a sum over ranks counts their shared dataset once; the
// plain resident size where the kernel has no smaps_rollup.
double proportional_memory(pid_t pid, double rss_bytes) {
  std::ifstream rollup(fmt::format("/proc/{}/smaps_rollup", pid));
  for (std::string line; std::getline(rollup, line);)
    if (line.rfind("Pss:", 0) == 0) return number(line.substr(4)) * 1024;
  return rss_bytes;
}

}  // namespace

bool process_tree_usage(pid_t root, double& cpu_seconds, double& rss_bytes, int* processes) {
  cpu_seconds = rss_bytes = 0;
  int counted = 0;
  std::vector<pid_t> tree = descendants(root);
  tree.insert(tree.begin(), root);
  for (pid_t p : tree) {
    double cpu = 0, rss = 0;
    if (!process_usage(p, cpu, rss)) {
      if (p == root) return false;
      continue;  // ended meanwhile
    }
    cpu_seconds += cpu;
    rss_bytes += proportional_memory(p, rss);
    ++counted;
  }
  if (processes) *processes = counted;
  return true;
}

bool process_usage(pid_t pid, double& cpu_seconds, double& rss_bytes) {
  const auto f = stat_fields(pid);
  if (f.size() <= 15) return false;
  const double utime = number(f[14]), stime = number(f[15]);
  cpu_seconds = (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  std::ifstream status(fmt::format("/proc/{}/status", pid));
  rss_bytes = 0;
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) rss_bytes = std::stod(line.substr(6)) * 1024;
  return true;
}

}  // namespace bks::server
