#include <fmt/format.h>

#include <filesystem>

#include "cli/commands.h"
#include "cli/model.h"
#include "core/log.h"
#include "engine/deploy.h"
#include "engine/session.h"
#include "formats/onnx_import.h"
#include "passes/stand_in_inputs.h"

namespace bks::cli {

namespace {

std::string op_counts(const DeployModel& m) {
  std::map<std::string, int> count;
  for (const Node& n : m.graph.nodes) ++count[n.type];
  std::string s;
  for (auto& [type, c] : count) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", c, type);
  return fmt::format("{} ops: {}", m.graph.nodes.size(), s);
}

// The summary, then the tensors that take the most room.
void print_coding(const std::vector<CodedTensorReport>& rows) {
  fmt::print("compressed: {}\n", coding_summary(rows));
  constexpr size_t kShown = 10;
  for (size_t i = 0; i < rows.size() && i < kShown; ++i) {
    const CodedTensorReport& t = rows[i];
    fmt::print("    {:<24} {:>9} elements, {:>5.1f}% stored, {:<17} {:>10} -> {:>9} bytes ({:.1f}x)\n", t.name,
               t.elements, t.elements ? 100.0 * t.stored / t.elements : 0.0, t.layout, t.dense_bytes, t.coded_bytes,
               t.coded_bytes ? static_cast<double>(t.dense_bytes) / t.coded_bytes : 0.0);
  }
  if (rows.size() > kShown) fmt::print("    ... and {} smaller tensors\n", rows.size() - kShown);
}

}  // namespace

Runner add_deploy(CLI::App& app) {
  auto* cmd = app.add_subcommand("deploy", "Optimise a trained network into an inference bundle (.bks)");
  struct Opts {
    std::string model, weights, out, precision = "fp32", batch;
    bool print_graph = false, random_weights = false, compress = false;
    int threads = 0, weight_bits = 0;
    double memory_cap_mb = 1024;
    std::string calib, calib_method = "mse", calib_from, input_shape, int8_layers = "faster", layout = "auto";
    int calib_batches = 10;
    StateFlags state;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "Deploy prototxt, a train/test prototxt (its TEST phase), or an ONNX model (.onnx, its weights included)")->required();
  auto* weights = cmd->add_option("--weights", o->weights, "Trained weights (.safetensors or .caffemodel)");
  cmd->add_flag("--random-weights", o->random_weights,
                "No weights file: each layer's filler (seed 1), to time a network before training it")
      ->excludes(weights);
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
  cmd->add_option(
      "--calib-method", o->calib_method,
      "mse (default: least clipping + rounding error), entropy (TensorRT's KL), percentile (99.99%) or minmax");
  cmd->add_option("--int8-layers", o->int8_layers,
                  "faster (default): a layer runs INT8 only where it measured faster than in FP32 on this machine; "
                  "all: every calibrated convolution and inner product runs INT8")
      ->check(CLI::IsMember({"faster", "all"}));
  cmd->add_flag("--compress", o->compress,
                "Store the weights coded: pruned zeros as a bit mask, the rest entropy-coded (lossless); layers "
                "running INT8 store their int8 weights");
  cmd->add_option("--weight-bits", o->weight_bits,
                  "With --compress: store every convolution's and inner product's weights on a per-channel grid of "
                  "this many bits (2-8), as Deep Compression does; lossy, so score the bundle with bakusoku test");
  cmd->add_option("--layout", o->layout,
                  "The convolutions' output layout on AVX-512 CPUs: auto (default: time both, keep the faster), "
                  "channels-last or blocked (oneDNN's 16-channel blocks)")
      ->check(CLI::IsMember({"auto", "channels-last", "blocked"}));
  cmd->add_option("--threads", o->threads, "CPU threads (default: all cores)")->check(CLI::NonNegativeNumber);
  add_state_options(cmd, o->state);
  add_input_shape_option(cmd, o->input_shape);
  return [o] {
    DeployOptions d;
    d.state = o->state;
    if (!o->input_shape.empty()) d.input_shape = parse_input_shape(o->input_shape);
    if (o->weights.empty() && !o->random_weights && !is_onnx_file(o->model))
      input_error("deploy: give --weights (trained weights) or --random-weights (timing only)");
    d.random_weights = o->random_weights;
    d.model = o->model;
    d.weights = o->weights;
    d.output = o->out;
    d.precision = parse_precision(o->precision, "--precision");
    d.threads = o->threads;
    d.layout = o->layout;
    d.memory_cap_bytes = o->memory_cap_mb * 1e6;
    if (!o->batch.empty()) {
      d.batch = parse_batch(o->batch, "--batch");
      d.auto_batch = d.batch == 0;
    }
    d.calibration.dataset = o->calib;
    d.calibration.from_bundle = o->calib_from;
    d.calibration.batches = o->calib_batches;
    d.calibration.method = o->calib_method;
    d.int8_where_faster = o->int8_layers == "faster";
    d.compress = o->compress;
    d.weight_bits = o->weight_bits;
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
    if (r.calibration) {
      const CalibrationTable& t = *r.calibration;
      if (t.method == "qat")
        fmt::print("int8 ranges learnt by quantization-aware training (no calibration pass): {} tensors\n",
                   t.threshold.size());
      else
        fmt::print("calibration ({}, {} batches): {} tensors\n", t.method, t.batches, t.threshold.size());
      for (auto& [name, th] : t.threshold) fmt::print("    {:<24} |x| <= {:.4g}\n", name, th);
    }
    if (d.precision == Precision::int8)
      fmt::print(
          "int8: {} convolution / inner product layer(s) quantized, {} of them writing int8 for int8 readers; "
          "other layers run in FP32\n",
          r.int8.quantized, r.int8.int8_outputs);
    for (const PassReport& rep : r.reports)
      if (rep.pass == "keep-int8-where-faster")
        for (const auto& line : rep.changes) fmt::print("    back to FP32: {}\n", line);
    fmt::print("{}", r.batch_table);
    fmt::print("autotuning: {} layer(s) run a non-default kernel\n", r.tuned);
    for (const PassReport& rep : r.reports)
      if (rep.pass == "autotune")
        for (const auto& line : rep.changes) fmt::print("    {}\n", line);
    fmt::print("{}{}", r.layout_table, r.micro_batch_table);
    if (o->print_graph) fmt::print("kernels and layouts:\n{}", r.kernels);
    if (d.compress) print_coding(r.coding);
    if (d.weight_bits > 0)
      fmt::print(
          "    convolution and inner product weights on {}-bit per-channel grids: lossy, score the bundle "
          "(bakusoku test)\n",
          d.weight_bits);
    save_bundle(o->out, r.bundle);
    auto micro = r.bundle.info.find("micro_batch");
    auto until = r.bundle.info.find(kPartsUntilKey);
    std::string parts;
    if (micro != r.bundle.info.end())
      parts = " (in parts of " + micro->second +
              (until == r.bundle.info.end() ? "" : " through '" + until->second + "', the rest whole") + ")";
    fmt::print("wrote {} ({:.3f} MB): {} precision, batch {}{}, {} ops, activation arena {:.2f} MB\n", o->out,
               static_cast<double>(std::filesystem::file_size(o->out)) / 1e6, precision_name(d.precision), r.batch,
               parts, r.ops, r.arena_bytes / 1e6);
    return 0;
  };
}

}  // namespace bks::cli
