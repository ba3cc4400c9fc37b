// bakusoku optimize: the search of engine/optimize.h from the command line. It prints each
// candidate as it is measured, then the table, and writes the best bundle with the table as
// Markdown and JSON and the plot as SVG beside it. --allow-training fine-tunes by running
// `bakusoku train` (this same binary) on a copy of the user's solver.
#include <fmt/format.h>
#include <google/protobuf/text_format.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "cli/model.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/log.h"
#include "engine/optimize.h"
#include "engine/optimize_report.h"
#include "formats/caffe_upgrade.h"
#include "server/process.h"

namespace bks::cli {

namespace {

namespace fs = std::filesystem;

// Runs argv (the dashboard's child-process launcher: output to `log`, interrupted if this
// process dies) in this directory to its end; its wait status.
int run_logged(const std::vector<std::string>& argv, const std::string& log) {
  const pid_t pid = server::spawn(argv, fs::current_path().string(), log);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

// A fine-tune as `bakusoku train` does it: the user's solver with its net swapped for the
// candidate's and `iterations` iterations, tested once at the end. Returns the last snapshot.
std::string fine_tune(const FineTune& f, const std::string& solver, int64_t iterations, int threads) {
  proto::SolverParameter sp;
  read_solver_file(solver, sp);
  sp.clear_net_param();
  sp.clear_train_net();
  sp.clear_train_net_param();
  sp.clear_test_net();
  sp.clear_test_net_param();
  sp.set_net(fs::absolute(f.model).string());
  sp.set_max_iter(static_cast<int>(iterations));
  sp.set_snapshot(0);
  if (sp.test_iter_size() > 0) sp.set_test_interval(static_cast<int>(iterations));
  fs::create_directories(f.dir);
  std::string text;
  google::protobuf::TextFormat::PrintToString(sp, &text);
  const std::string solver_path = (fs::path(f.dir) / "solver.prototxt").string();
  write_file_atomic(solver_path, text);
  std::vector<std::string> argv = {self_executable(),
                                   "train",
                                   "--solver",
                                   solver_path,
                                   "--weights",
                                   f.weights,
                                   "--out",
                                   (fs::path(f.dir) / "run").string(),
                                   "--threads",
                                   std::to_string(threads)};
  argv.insert(argv.end(), f.flags.begin(), f.flags.end());
  const std::string log = (fs::path(f.dir) / "train.log").string();
  const int status = run_logged(argv, log);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    runtime_error("fine-tuning failed: {}; its log: {}", server::exit_reason(status, server::tail_file(log)), log);
  const fs::path snapshot = fs::path(f.dir) / "run" / "snapshots" / fmt::format("iter_{}.safetensors", iterations);
  if (!fs::exists(snapshot)) runtime_error("fine-tuning wrote no {}; its log: {}", snapshot.string(), log);
  return snapshot.string();
}

}  // namespace

Runner add_optimize(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "optimize",
      "Search compression techniques and their combinations for the fastest bundle within an accuracy budget");
  struct Opts {
    OptimizeOptions o;
    std::string out, solver, batch;
    double budget_minutes = 15;
    int64_t iterations = 1000;
    bool allow_training = false;
  };
  auto p = std::make_shared<Opts>();
  cmd->add_option("--model", p->o.model, "The trained net: a train/test prototxt (its TEST data scores candidates)")
      ->required();
  cmd->add_option("--weights", p->o.weights, "Its weights (.safetensors or .caffemodel)")->required();
  cmd->add_option("--max-accuracy-drop", p->o.max_accuracy_drop,
                  "Top-1 accuracy, in percentage points, a candidate may lose against the unoptimised bundle "
                  "(default 0.5)");
  cmd->add_option("--objective", p->o.objective,
                  "latency (ms per batch; the default), throughput (items/s) or size (bundle bytes, weights "
                  "stored coded)");
  cmd->add_option("--batch", p->batch,
                  "Batch the candidates run at (default 1; for throughput 'auto', the default: each candidate at "
                  "the batch that gives it the most items/s)");
  cmd->add_option("--budget-minutes", p->budget_minutes, "No candidate starts after this many minutes (default 15)");
  cmd->add_option("--threads", p->o.threads, "CPU threads (default: all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--allow-training", p->allow_training,
                "Also fine-tune: structured pruning and magnitude pruning fine-tuned, QAT INT8 (needs --solver)");
  cmd->add_option("--solver", p->solver, "With --allow-training: the solver the net was trained with");
  cmd->add_option("--fine-tune-iterations", p->iterations,
                  "With --allow-training: iterations of each fine-tune (default 1000)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--work-dir", p->o.work_dir,
                  "Where each candidate's net, weights and bundle go (default: OUTPUT without .bks, plus "
                  ".candidates)");
  cmd->add_option("-o,--output", p->out, "The best bundle (.bks); the report goes beside it (.md, .json, .svg)")
      ->required();
  return [p] {
    OptimizeOptions o = p->o;
    const fs::path out(p->out);
    if (out.extension() != ".bks") input_error("-o {}: the best bundle's file name must end in .bks", p->out);
    const std::string stem = (out.parent_path() / out.stem()).string();
    if (o.work_dir.empty()) o.work_dir = stem + ".candidates";
    o.budget_seconds = p->budget_minutes * 60;
    if (!p->batch.empty()) {
      o.batch = parse_batch(p->batch, "--batch");
      if (o.batch == 0 && o.objective != "throughput")
        input_error("--batch auto is for --objective throughput; {} is measured at a batch you give", o.objective);
    }
    if (p->allow_training) {
      if (p->solver.empty()) input_error("--allow-training needs --solver (the solver the net was trained with)");
      if (!fs::exists(p->solver)) input_error("--solver {}: no such file", p->solver);
      o.fine_tune = [p](const FineTune& f) { return fine_tune(f, p->solver, p->iterations, p->o.threads); };
    } else if (!p->solver.empty()) {
      input_error("--solver is for --allow-training");
    }
    fmt::print("Optimising {} for {} within {} points of accuracy; candidates in {}\n", o.model, o.objective,
               o.max_accuracy_drop, o.work_dir);
    // Each candidate's deploy would log its datasets and timings: one line per candidate instead.
    const log::Level level = log::level();
    if (level == log::Level::info) log::set_level(log::Level::warn);
    const OptimizeResult r = optimize(o, [](const std::string& line) {
      fmt::print("{}\n", line);
      std::fflush(stdout);
    });
    log::set_level(level);
    fmt::print("\n{}\n{}", optimize_table(r, false), optimize_summary(r));
    const std::string report = optimize_summary(r) + "\n" + optimize_table(r, true);
    write_file_atomic(stem + ".md", "# bakusoku optimize: " + o.model + "\n\n" + report);
    write_file_atomic(stem + ".json", optimize_json(r).dump(2) + "\n");
    write_file_atomic(stem + ".svg", optimize_svg(r));
    fmt::print("Report: {}.md, {}.json, {}.svg\n", stem, stem, stem);
    if (r.best < 0) {
      fmt::print("No candidate fits the budget; {} not written\n", p->out);
      return 1;
    }
    const Candidate& best = r.candidates[static_cast<size_t>(r.best)];
    write_file_atomic(p->out, read_file(best.bundle, "bundle"));
    fmt::print("Wrote {}: {}\n", p->out, best.name);
    return 0;
  };
}

}  // namespace bks::cli
