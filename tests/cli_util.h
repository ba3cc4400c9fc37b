// Runs the bakusoku binary for tests: exit code and combined output.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace bks::test {

struct CmdResult {
  int code = -1;
  std::string output;
};

// Runs a shell command line as it is (redirections included): exit code and stdout.
inline CmdResult run_shell(const std::string& cmd) {
  CmdResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

inline CmdResult run_cmd(const std::string& args) { return run_shell(std::string(BKS_BINARY) + " " + args + " 2>&1"); }

}  // namespace bks::test
