// bakusoku pack-dataset: packs one dashboard dataset (hidden; bakusoku serve runs it as a
// child so that no dataset file can take the server down, see server/dataset_job.h).
#include <nlohmann/json.hpp>

#include <atomic>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file_io.h"
#include "server/dataset_job.h"
#include "server/datasets.h"

namespace bks::cli {

namespace {

struct PackOptions {
  std::string spec, out, progress;
  std::vector<std::string> roots;
};

}  // namespace

Runner add_pack_dataset(CLI::App& app) {
  auto* cmd = app.add_subcommand("pack-dataset", "Pack a dashboard dataset (run by bakusoku serve)");
  cmd->group("");  // not listed in --help: the server's tool, not the user's
  auto o = std::make_shared<PackOptions>();
  cmd->add_option("--spec", o->spec, "The dataset's spec (JSON, as the server validated it)")->required();
  cmd->add_option("--out", o->out, "The folder to pack into")->required();
  cmd->add_option("--progress", o->progress, "A file to append the progress (0 to 1) to, a line per percent");
  cmd->add_option("--import-root", o->roots, "A folder the dataset's files may come from (repeatable)")->required();
  return [o] {
    const auto spec = nlohmann::json::parse(read_file(o->spec, "dataset spec"), nullptr, false);
    if (!spec.is_object()) input_error("{}: not a JSON object", o->spec);
    const std::atomic<bool> never{false};  // the server stops this process by killing it
    std::optional<server::ProgressLog> log;
    if (!o->progress.empty()) log.emplace(o->progress);
    server::pack_dataset(
        spec, o->out, o->roots,
        [&](double p) {
          if (log) (*log)(p);
        },
        never);
    return 0;
  };
}

}  // namespace bks::cli
