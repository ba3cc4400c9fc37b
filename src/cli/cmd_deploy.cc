#include <fmt/format.h>

#include "cli/commands.h"
#include "core/log.h"
#include "engine/calibrate.h"
#include "engine/quantize.h"
#include "engine/deploy.h"
#include "engine/session.h"
#include "profile/profiler.h"

namespace bks::cli {

namespace {

std::string op_counts(const DeployModel& m) {
  std::map<std::string, int> count;
  for (const Node& n : m.graph.nodes) ++count[n.type];
  std::string s;
  for (auto& [type, c] : count) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", c, type);
  return fmt::format("{} ops: {}", m.graph.nodes.size(), s);
}

struct BatchChoice {
  int64_t batch = 1;
  std::string table;
};

// Times the bundle at batch 1, 2, 4, ... while its activation arena fits `cap_bytes`, and
// stops once two sizes in a row give no more throughput than the best so far.
BatchChoice choose_batch(const Bundle& b, const std::string& name, int threads, double cap_bytes) {
  BatchChoice c;
  double best = 0;
  int worse = 0;
  c.table = "batch auto: items/s by batch size (activation arena)\n";
  for (int64_t batch = 1; batch <= 4096 && worse < 2; batch *= 2) {
    InferenceSession s(b, name, threads, batch);
    double arena = static_cast<double>(s.net().planned_bytes());
    if (arena > cap_bytes) {
      if (batch == 1)
        input_error("--memory-cap {:.3f} MB: even batch 1 needs {:.3f} MB of activations", cap_bytes / 1e6, arena / 1e6);
      c.table += fmt::format("  {:>5}  arena {:.1f} MB exceeds the cap\n", batch, arena / 1e6);
      break;
    }
    for (int v : s.inputs()) s.value(v).fill(0.5f);
    for (int i = 0; i < 3; ++i) s.run();
    int runs = 0;
    double t0 = now_us(), elapsed = 0;
    while (runs < 5 || elapsed < 2e5) {  // at least 5 runs and 0.2 s
      s.run();
      ++runs;
      elapsed = now_us() - t0;
    }
    double rate = batch * runs / (elapsed / 1e6);
    c.table += fmt::format("  {:>5}  {:>10.0f} items/s  ({:.1f} MB)\n", batch, rate, arena / 1e6);
    if (rate > best * 1.02) {
      best = rate;
      c.batch = batch;
      worse = 0;
    } else {
      ++worse;
    }
  }
  c.table += fmt::format("  chosen: batch {}\n", c.batch);
  return c;
}

}  // namespace

Runner add_deploy(CLI::App& app) {
  auto* cmd = app.add_subcommand("deploy", "Optimise a trained network into an inference bundle (.bks)");
  struct Opts {
    std::string model, weights, out, precision = "fp32", batch;
    bool print_graph = false;
    int threads = 0;
    double memory_cap_mb = 1024;
    std::string calib, calib_method = "entropy", calib_from;
    int calib_batches = 10;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "Deploy prototxt, or a train/test prototxt (its TEST phase)")->required();
  cmd->add_option("--weights", o->weights, "Trained weights (.safetensors or .caffemodel)")->required();
  cmd->add_option("-o,--output", o->out, "Bundle file to write (.bks)")->required();
  cmd->add_option("--precision", o->precision,
                  "fp32, bf16 (AVX-512 BF16 / AMX CPUs) or int8 (convolutions; needs --calib)");
  cmd->add_option("--batch", o->batch,
                  "Batch size of the bundle's inputs (default: the net's); 'auto': the highest-throughput batch "
                  "whose activation arena fits --memory-cap");
  cmd->add_option("--memory-cap", o->memory_cap_mb, "MB of activations allowed to --batch auto (default 1024)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--print-graph", o->print_graph, "Show the graph before and after each pass");
  cmd->add_option("--calib", o->calib,
                  "Dataset to calibrate INT8 ranges on ('test': the data the net was tested on; 'random': uniform "
                  "inputs, for timing only); the table is saved in the bundle");
  cmd->add_option("--calib-batches", o->calib_batches, "Calibration batches (default 10)")->check(CLI::PositiveNumber);
  cmd->add_option("--calib-from", o->calib_from,
                  "Reuse the calibration table saved in this bundle (.bks) instead of calibrating again");
  cmd->add_option("--calib-method", o->calib_method, "minmax, percentile (99.99%) or entropy (default; TensorRT's KL)");
  cmd->add_option("--threads", o->threads, "CPU threads (default: all cores)")->check(CLI::NonNegativeNumber);
  return [o] {
    DeployOptions d;
    d.model = o->model;
    d.weights = o->weights;
    d.precision = o->precision;
    d.threads = o->threads;
    const bool auto_batch = o->batch == "auto";
    if (!o->batch.empty() && !auto_batch) {
      try {
        d.batch = std::stoll(o->batch);
      } catch (const std::exception&) {
        d.batch = 0;
      }
      if (d.batch <= 0) input_error("--batch must be a positive integer or 'auto', got '{}'", o->batch);
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
    if (o->precision == "int8" && o->calib.empty() && o->calib_from.empty())
      input_error("--precision int8 needs --calib DATASET (or --calib test) or --calib-from BUNDLE for activation ranges");
    if (!o->calib.empty() && !o->calib_from.empty()) input_error("give --calib or --calib-from, not both");
    DeployResult r = deploy(d, show);
    if (!o->calib.empty() || !o->calib_from.empty()) {
      CalibrationTable t;
      if (!o->calib_from.empty()) {
        Bundle from = load_bundle(o->calib_from);
        auto it = from.info.find("calibration");
        if (it == from.info.end()) input_error("{}: this bundle holds no calibration table", o->calib_from);
        t = CalibrationTable::from_json(it->second, o->calib_from);
      } else {
        t = calibrate(r.bundle, o->out, o->calib == "test" ? std::string() : o->calib, o->calib_batches, o->calib_method,
                      o->threads);
      }
      r.bundle.info["calibration"] = t.to_json();
      fmt::print("calibration ({}, {} batches): {} tensors\n", t.method, t.batches, t.threshold.size());
      for (auto& [name, th] : t.threshold) fmt::print("    {:<24} |x| <= {:.4g}\n", name, th);
      if (o->precision == "int8") {
        Int8Plan q = quantize_int8(r.bundle, t, r.shapes);
        fmt::print("int8: {} convolution / inner product layer(s) quantized, {} of them writing int8 for int8 readers; "
                   "other layers run in FP32\n", q.quantized, q.int8_outputs);
      }
    }
    if (auto_batch) {
      BatchChoice c = choose_batch(r.bundle, o->out, o->threads, o->memory_cap_mb * 1e6);
      r.bundle.info["batch_tuning"] = c.table;
      fmt::print("{}", c.table);
      set_input_batch(r.bundle.net, c.batch);
    }
    // Build the bundle's net once: it checks the graph runs, and shows the kernels chosen.
    InferenceSession s(r.bundle, o->out, o->threads);
    Net& net = s.net();
    // Save what autotuning chose, so loading the bundle does not time kernels again (and
    // every session of an embedding runs the same kernels).
    int tuned = 0;
    for (int n = 0; n < net.num_nodes() && n < r.bundle.net.layer_size(); ++n) {
      std::string choice = net.op(n).tuning_decision();
      if (choice.empty()) continue;
      r.bundle.net.mutable_layer(n)->set_kernel_choice(choice);
      tuned += choice != "direct";
    }
    fmt::print("autotuning: {} layer(s) run a non-default kernel\n", tuned);
    if (o->print_graph) fmt::print("kernels and layouts:\n{}", net.describe());
    save_bundle(o->out, r.bundle);
    fmt::print("wrote {}: {} precision, batch {}, {} ops, activation arena {:.2f} MB\n", o->out, d.precision, s.batch(),
               net.num_nodes(), net.planned_bytes() / 1e6);
    return 0;
  };
}

}  // namespace bks::cli
