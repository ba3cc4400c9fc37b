#include <memory>

#include "cli/commands.h"
#include "core/file_io.h"
#include "server/dashboard.h"

namespace bks::cli {

Runner add_serve(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Start the web dashboard: datasets, models, training jobs, live charts");
  auto o = std::make_shared<server::ServeOptions>();
  cmd->add_option("--host", o->host, "Address to listen on (default 127.0.0.1; others require a token)");
  cmd->add_option("--port", o->port, "Port (default 8765; 0 picks a free one)");
  cmd->add_option("--data-dir", o->data_dir, "Where datasets, jobs and the database live (default ./bakusoku-data)");
  cmd->add_option("--token", o->token, "Token every API call must carry (generated when --host is not loopback)");
  cmd->add_option("--slots", o->slots, "Jobs that run at once (default: one per two cores)");
  cmd->add_option("--threads", o->threads, "CPU threads per training job (default: cores / slots)");
  cmd->add_option("--scheduler", o->scheduler,
                  "local (default: jobs run here) or slurm (training jobs go to the Slurm cluster with sbatch)")
      ->check(CLI::IsMember({"local", "slurm"}));
  cmd->add_option("--max-viewers", o->max_viewers,
                  "Live charts streamed at once (default 500); one more is told to retry (HTTP 503)");
  cmd->add_option("--max-uploads", o->max_uploads_mb,
                  "MiB the weights files uploaded through the page may take together (default 2048); "
                  "an upload past it is refused (HTTP 507)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--import-dir", o->import_roots,
                  "Another folder datasets may be read from (repeatable; "
                  "/usr/share/datasets is always allowed)");
  return [o] {
    o->binary = self_executable();
    o->import_roots.push_back("/usr/share/datasets");
    return server::serve(*o);
  };
}

}  // namespace bks::cli
