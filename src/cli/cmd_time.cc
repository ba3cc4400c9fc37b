#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/model.h"
#include "formats/onnx_import.h"
#include "profile/profiler.h"

namespace bks::cli {

Runner add_time(CLI::App& app) {
  auto* cmd = app.add_subcommand("time", "Per-layer forward/backward time (ms), like caffe time");
  struct Opts {
    std::string model, phase, trace, input_shape;
    std::vector<std::string> kernels;
    int iterations = 50, threads = 0;
    StateFlags state;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--model", o->model, "Net prototxt or ONNX model (.onnx)")->required();
  cmd->add_option("--iterations", o->iterations, "Timed iterations (default 50)")->check(CLI::PositiveNumber);
  cmd->add_option("--phase", o->phase, "TRAIN (forward+backward; the default for a prototxt) or TEST (forward; the default for an ONNX model)");
  cmd->add_option("--trace", o->trace, "Write a Chrome/Perfetto trace (one span per op per iteration)");
  cmd->add_option("--threads", o->threads, "CPU threads (default: all cores)")->check(CLI::NonNegativeNumber);
  add_state_options(cmd, o->state);
  add_input_shape_option(cmd, o->input_shape);
  add_kernel_option(cmd, o->kernels);
  return [o] {
    use_kernels(o->kernels);
    // An ONNX model is an inference graph: its default is the forward pass alone.
    Phase phase = parse_phase(!o->phase.empty() ? o->phase : is_onnx_file(o->model) ? "TEST" : "TRAIN");
    auto m = load_model(o->model, phase, o->threads, o->state, 1, true, o->input_shape);
    Net& net = *m->net;
    bool train = phase == proto::TRAIN;
    // Warm-up: first-touch of buffers and kernel caches are not what we measure.
    net.forward(0);
    if (train) net.backward();
    Profiler prof(!o->trace.empty());
    prof.resize(net.num_nodes());
    net.set_profiler(&prof);
    double t0 = now_us();
    for (int i = 0; i < o->iterations; ++i) {
      net.forward(i + 1);
      if (train) net.backward();
    }
    double total_ms = (now_us() - t0) / 1000.0;
    net.set_profiler(nullptr);
    double n = o->iterations, fsum = 0, bsum = 0;
    fmt::print("{:<20} {:<20} {:>12} {:>12}   {}\n", "layer", "type", "forward ms", "backward ms", "kernel");
    for (int k = 0; k < net.num_nodes(); ++k) {
      double f = prof.total_ms(k, Profiler::Pass::forward) / n, b = prof.total_ms(k, Profiler::Pass::backward) / n;
      fsum += f;
      bsum += b;
      const Node& node = net.graph().nodes[k];
      fmt::print("{:<20} {:<20} {:>12.4f} {:>12.4f}   {}\n", node.name, node.type, f,
                 train && net.node_runs_backward(k) ? b : 0.0, net.op(k).reported_name());
    }
    auto [batch, ds] = net.data_extent();
    if (batch == 0)
      for (int v : net.inputs()) batch = std::max<int64_t>(batch, net.value(v).dim(0));
    double per_iter = total_ms / n;
    fmt::print("Average forward pass: {:.4f} ms\n", fsum);
    if (train) fmt::print("Average backward pass: {:.4f} ms\n", bsum);
    fmt::print("Average {} iteration: {:.4f} ms", train ? "forward-backward" : "forward", per_iter);
    if (batch > 0) {
      // Slow nets (FCN at 500x500: 0.03 images/s on two cores) keep two significant digits.
      const double rate = batch * 1000.0 / per_iter;
      const std::string unit = net.data_unit();
      if (rate >= 10)
        fmt::print(" ({:.0f} {}/s at batch {})", rate, unit, batch);
      else
        fmt::print(" ({:.2g} {}/s at batch {})", rate, unit, batch);
    }
    fmt::print("\nTotal time: {:.1f} ms for {} iterations\n", total_ms, o->iterations);
    if (!o->trace.empty()) {
      prof.write_chrome_trace(o->trace);
      fmt::print("Trace written to {} (open in ui.perfetto.dev or chrome://tracing)\n", o->trace);
    }
    return 0;
  };
}

}  // namespace bks::cli
