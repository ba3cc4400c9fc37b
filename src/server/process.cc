#include "server/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstring>
#include <fstream>
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

bool process_usage(pid_t pid, double& cpu_seconds, double& rss_bytes) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string text;
  if (!std::getline(stat, text)) return false;
  // Fields after the command name (which may hold spaces), from its closing parenthesis.
  auto close = text.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream in(text.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  cpu_seconds = (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  std::ifstream status(fmt::format("/proc/{}/status", pid));
  rss_bytes = 0;
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) rss_bytes = std::stod(line.substr(6)) * 1024;
  return true;
}

}  // namespace bks::server
