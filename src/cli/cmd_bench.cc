#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "cli/commands.h"
#include "core/file_io.h"
#include "engine/deploy.h"
#include "engine/session.h"
#include "profile/profiler.h"

namespace bks::cli {

namespace {

struct Latency {
  double min = 0, mean = 0, median = 0, p90 = 0, p95 = 0, p99 = 0;
};

Latency summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  auto pct = [&](double p) { return ms[std::min(ms.size() - 1, static_cast<size_t>(std::ceil(p * ms.size())) - 1)]; };
  Latency l;
  l.min = ms.front();
  for (double x : ms) l.mean += x;
  l.mean /= static_cast<double>(ms.size());
  l.median = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
  l.p90 = pct(0.90);
  l.p95 = pct(0.95);
  l.p99 = pct(0.99);
  return l;
}

Latency time_session(InferenceSession& s, int iterations) {
  for (int i = 0; i < std::max(5, iterations / 10); ++i) s.run();  // warm-up
  std::vector<double> ms;
  for (int i = 0; i < iterations; ++i) {
    double t0 = now_us();
    s.run();
    ms.push_back((now_us() - t0) / 1000.0);
  }
  return summarize(ms);
}

nlohmann::json to_json(const Latency& l, int64_t batch) {
  return {{"latency_ms",
           {{"min", l.min}, {"mean", l.mean}, {"median", l.median}, {"p90", l.p90}, {"p95", l.p95}, {"p99", l.p99}}},
          {"throughput_per_s", batch / (l.mean / 1000.0)}};
}

std::vector<int64_t> parse_batches(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int64_t b = 0;
    try {
      b = std::stoll(item);
    } catch (const std::exception&) {
    }
    if (b <= 0) input_error("--batch: '{}' is not a positive integer (give e.g. 1,8,64)", item);
    out.push_back(b);
  }
  return out;
}

// Per-layer mean forward time over `iterations` runs (of the whole batch, in parts when the
// session runs it so); convolutions and inner products also get their achieved GFLOP/s
// (2 x output elements x weights per output channel).
nlohmann::json layer_times(InferenceSession& s, int iterations, bool print) {
  const std::vector<double> times = time_nodes(s, iterations);
  const double parts = static_cast<double>(s.batch()) / static_cast<double>(s.micro_batch());
  if (print && parts > 1)
    fmt::print(
        "  (each layer's time for the whole batch, run in {} parts of {}{})\n", s.batch() / s.micro_batch(),
        s.micro_batch(),
        s.tail() ? fmt::format(" up to '{}', the rest whole", s.net().graph().nodes.back().name) : std::string());
  nlohmann::json rows = nlohmann::json::array();
  if (print) fmt::print("  {:<20} {:<14} {:>10} {:>10}   {}\n", "layer", "type", "ms", "GFLOP/s", "kernel");
  // The net's nodes, then the tail's after its Input (time_nodes' order).
  std::vector<std::pair<Net*, int>> nodes;
  for (int k = 0; k < s.net().num_nodes(); ++k) nodes.emplace_back(&s.net(), k);
  if (s.tail())
    for (int k = 1; k < s.tail()->num_nodes(); ++k) nodes.emplace_back(s.tail(), k);
  for (size_t i = 0; i < nodes.size(); ++i) {
    Net& net = *nodes[i].first;
    const int k = nodes[i].second;
    const Node& node = net.graph().nodes[k];
    double ms = times.at(i), gflops = 0;
    if (op_traits(node).weighted_linear && !node.params.empty()) {
      const Shape& out = net.graph().values[node.outputs[0]].shape;
      int64_t out_numel = 1;
      for (int64_t d : out) out_numel *= d;
      const Tensor& w = net.store().at(net.param_index(k, 0)).data;
      // Multiply-adds per output value: the weights of one output channel (either storage
      // order of an inner product's weights gives the same count).
      double per_output = static_cast<double>(w.numel()) / static_cast<double>(out.at(1));
      gflops = 2.0 * (&net == &s.net() ? parts : 1.0) * out_numel * per_output / (ms * 1e6);
    }
    nlohmann::json outputs = nlohmann::json::array();
    for (int v : node.outputs) outputs.push_back(net.graph().values[v].name);
    rows.push_back({{"layer", node.name},
                    {"type", node.type},
                    {"outputs", outputs},
                    {"ms", ms},
                    {"gflops", gflops},
                    {"kernel", net.op(k).reported_name()}});
    if (print)
      fmt::print("  {:<20} {:<14} {:>10.4f} {:>10}   {}\n", node.name, node.type, ms,
                 gflops > 0 ? fmt::format("{:.1f}", gflops) : std::string("-"), net.op(k).reported_name());
  }
  return rows;
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Latency and throughput of a deployment bundle, like trtexec");
  struct Opts {
    std::string bundle, batches, report;
    std::vector<std::string> compare;
    int iterations = 100, threads = 0;
    bool json = false, layers = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("bundle", o->bundle, "Bundle written by bakusoku deploy (.bks)")->required();
  cmd->add_option("--batch", o->batches, "Batch sizes, comma separated (default: the bundle's)");
  cmd->add_option("--iterations", o->iterations, "Timed runs per batch size (default 100)")->check(CLI::PositiveNumber);
  cmd->add_option("--threads", o->threads, "CPU threads (default: all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--compare", o->compare, "NET WEIGHTS: also run the unoptimised graph on the same inputs")
      ->expected(2);
  cmd->add_flag("--json", o->json, "Print the figures as one JSON object");
  cmd->add_option("--report", o->report, "Also write the figures, as --json prints them, to this file");
  cmd->add_flag("--layers", o->layers, "Also time each layer (and the GFLOP/s of convolutions and inner products)");
  return [o] {
    Bundle b = load_bundle(o->bundle);
    std::vector<int64_t> batches = o->batches.empty() ? std::vector<int64_t>{0} : parse_batches(o->batches);
    const int threads = CpuBackend(o->threads).threads();
    nlohmann::json report = {{"bundle", o->bundle}, {"threads", threads}, {"iterations", o->iterations}};
    if (!o->json)
      fmt::print(
          "{}: {} threads, {} timed runs per batch size after warm-up\n{:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} "
          "{:>12}\n",
          o->bundle, threads, o->iterations, "batch", "min ms", "mean", "median", "p90", "p95", "p99", "items/s");
    Bundle plain;
    if (!o->compare.empty()) {
      DeployOptions d;
      d.model = o->compare[0];
      d.weights = o->compare[1];
      d.threads = o->threads;
      DeployModel m = load_deploy_model(d);
      strip_training(m);  // data layers become inputs; nothing is folded or fused
      plain.graph = bundle_graph(m);
      plain.weights = weights_by_layer(m);
    }
    for (int64_t batch : batches) {
      InferenceSession s(b, o->bundle, o->threads, batch);
      fill_timing_inputs(s, 1234);
      Latency l = time_session(s, o->iterations);
      nlohmann::json row = to_json(l, s.batch());
      row["batch"] = s.batch();
      if (!o->json)
        fmt::print("{:>6} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>12.0f}\n", s.batch(), l.min, l.mean,
                   l.median, l.p90, l.p95, l.p99, s.batch() / (l.mean / 1000.0));
      if (!o->compare.empty()) {
        InferenceSession u(plain, o->compare[0], o->threads, s.batch());
        fill_timing_inputs(u, 1234);
        // Same inputs: the outputs must agree (relative to each output's largest value).
        s.run();
        u.run();
        const double err = max_relative_difference(u, s);
        Latency lu = time_session(u, o->iterations);
        nlohmann::json cmp = to_json(lu, u.batch());
        cmp["max_relative_difference"] = err;
        cmp["speedup"] = lu.mean / l.mean;
        row["unoptimised"] = cmp;
        if (!o->json)
          fmt::print(
              "{:>6} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>12.0f}  unoptimised graph: {:.2f}x "
              "slower, "
              "outputs differ by {:.1e} (relative)\n",
              u.batch(), lu.min, lu.mean, lu.median, lu.p90, lu.p95, lu.p99, u.batch() / (lu.mean / 1000.0),
              lu.mean / l.mean, err);
      }
      if (o->layers) row["layers"] = layer_times(s, o->iterations, !o->json);
      report["results"].push_back(row);
    }
    if (o->json) fmt::print("{}\n", report.dump());
    if (!o->report.empty()) write_file_atomic(o->report, report.dump() + "\n");
    return 0;
  };
}

}  // namespace bks::cli
