// `bakusoku serve --port 0` as a child process in its own data directory, for the tests
// that talk to a real server; stopped (SIGTERM) when it goes.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

class Server {
 public:
  explicit Server(const std::string& data_dir, std::vector<std::string> extra = {}) : dir_(data_dir) {
    std::vector<std::string> args{BKS_BINARY, "serve", "--port", "0", "--data-dir", data_dir};
    args.insert(args.end(), extra.begin(), extra.end());
    int out[2];
    EXPECT_EQ(pipe(out), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      close(out[0]);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    // The first line names the URL: "bakusoku serve: http://127.0.0.1:PORT/".
    std::string line;
    char c;
    while (read(out[0], &c, 1) == 1 && c != '\n') line += c;
    close(out[0]);
    auto at = line.rfind(':');
    port_ = at == std::string::npos ? 0 : std::atoi(line.c_str() + at + 1);
    EXPECT_GT(port_, 0) << line;
  }
  ~Server() { stop(SIGTERM); }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  void stop(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    int st = 0;
    waitpid(pid_, &st, 0);
    pid_ = -1;
  }
  int port() const { return port_; }
  const std::string& data_dir() const { return dir_; }
  httplib::Client client(const std::string& token = "") const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(120, 0);
    if (!token.empty()) c.set_bearer_token_auth(token);
    return c;
  }

 private:
  std::string dir_;
  pid_t pid_ = -1;
  int port_ = 0;
};
