#include <fmt/format.h>

#include "cli/commands.h"
#include "core/log.h"
#include "engine/deploy.h"
#include "engine/session.h"

namespace bks::cli {

namespace {

std::string op_counts(const DeployModel& m) {
  std::map<std::string, int> count;
  for (const Node& n : m.graph.nodes) ++count[n.type];
  std::string s;
  for (auto& [type, c] : count) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", c, type);
  return fmt::format("{} ops: {}", m.graph.nodes.size(), s);
}

}  // namespace

Runner add_deploy(CLI::App& app) {
  auto* cmd = app.add_subcommand("deploy", "Optimise a trained network into an inference bundle (.bks)");
  struct Opts {
    std::string model, weights, out, precision = "fp32", batch;
    bool print_graph = false;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "Deploy prototxt, or a train/test prototxt (its TEST phase)")->required();
  cmd->add_option("--weights", o->weights, "Trained weights (.safetensors or .caffemodel)")->required();
  cmd->add_option("-o,--output", o->out, "Bundle file to write (.bks)")->required();
  cmd->add_option("--precision", o->precision, "fp32 (bf16 and int8 are not implemented yet)");
  cmd->add_option("--batch", o->batch, "Batch size of the bundle's inputs (default: the net's)");
  cmd->add_flag("--print-graph", o->print_graph, "Show the graph before and after each pass");
  cmd->add_option("--threads", o->threads, "CPU threads (default: all cores)")->check(CLI::NonNegativeNumber);
  return [o] {
    DeployOptions d;
    d.model = o->model;
    d.weights = o->weights;
    d.precision = o->precision;
    d.threads = o->threads;
    if (!o->batch.empty()) {
      try {
        d.batch = std::stoll(o->batch);
      } catch (const std::exception&) {
        d.batch = 0;
      }
      if (d.batch <= 0) input_error("--batch must be a positive integer, got '{}'", o->batch);
    }
    auto show = [&](const PassReport& r, const DeployModel& m) {
      if (r.pass == "input") {
        fmt::print("{} before optimisation ({})\n", o->model, op_counts(m));
        if (o->print_graph) fmt::print("{}", describe_graph(m));
        return;
      }
      fmt::print("pass {:<16} {} change(s); {}\n", r.pass, r.changes.size(), op_counts(m));
      if (!o->print_graph) return;
      for (const auto& c : r.changes) fmt::print("    {}\n", c);
      if (!r.changes.empty()) fmt::print("{}", describe_graph(m));
    };
    DeployResult r = deploy(d, show);
    // Build the bundle's net once: it checks the graph runs, and shows the kernels chosen.
    InferenceSession s(r.bundle, o->out, o->threads);
    Net& net = s.net();
    if (o->print_graph) fmt::print("kernels and layouts:\n{}", net.describe());
    save_bundle(o->out, r.bundle);
    fmt::print("wrote {}: {} precision, batch {}, {} ops, activation arena {:.2f} MB\n", o->out, d.precision, s.batch(),
               net.num_nodes(), net.planned_bytes() / 1e6);
    return 0;
  };
}

}  // namespace bks::cli
