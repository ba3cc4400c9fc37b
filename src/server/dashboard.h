// `bakusoku serve`: the dashboard's HTTP server (JSON API under /api/, pages at /), its
// SQLite store and its job scheduler, in one process.
#pragma once

#include <string>
#include <vector>

namespace bks::server {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8765;  // 0: any free port (printed)
  std::string data_dir = "bakusoku-data";
  std::string token;                      // required on every API call when set
  int slots = 0;                          // jobs at once (0: one per 2 cores, at least 1)
  int threads = 0;                        // threads per training job (0: cores / slots)
  std::vector<std::string> import_roots;  // folders datasets may come from (besides <data>/imports)
  std::string binary;                     // bakusoku, for training children
  int max_viewers = 500;                  // live-chart streams at once (each holds an HTTP worker)
  std::string scheduler = "local";        // "local" (children of the server) or "slurm" (sbatch)
  int64_t max_uploads_mb = 2048;          // what uploaded weights files may take together
};

// Serves until SIGINT or SIGTERM, then stops the jobs it runs (they snapshot) and returns
// the exit code. Prints the URL (and a generated token when listening beyond loopback
// without one).
int serve(ServeOptions o);

}  // namespace bks::server
