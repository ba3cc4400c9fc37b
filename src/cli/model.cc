#include "cli/model.h"

#include <algorithm>
#include <charconv>

#include "core/log.h"
#include "formats/caffe_net.h"
#include "formats/onnx_import.h"
#include "formats/weights.h"
#include "ops/op.h"
#include "passes/stand_in_inputs.h"

namespace bks::cli {

Phase parse_phase(const std::string& phase) {
  std::string p = phase;
  std::transform(p.begin(), p.end(), p.begin(), ::toupper);
  if (p == "TRAIN") return proto::TRAIN;
  if (p == "TEST") return proto::TEST;
  input_error("--phase must be TRAIN or TEST, got '{}'", phase);
}

std::unique_ptr<LoadedModel> load_model(const std::string& model, Phase phase, int threads, const StateFlags& state,
                                        uint64_t seed, bool stand_in, const std::string& input_shape) {
  auto m = std::make_unique<LoadedModel>();
  // An ONNX model's input takes --input-shape itself; a prototxt's data layers stand in.
  const bool onnx = is_onnx_file(model);
  NetLoad nl = load_net_file(model, onnx && !input_shape.empty() ? parse_input_shape(input_shape) : Shape{});
  proto::NetState st = net_state(nl, phase, state);
  m->backend = std::make_unique<CpuBackend>(threads);
  NetOptions opt;
  opt.force_backward = nl.param.force_backward();
  Graph g = build_caffe_graph(nl, st);
  if (stand_in && !onnx)
    for (const std::string& line :
         stand_in_absent_data(g, phase, input_shape.empty() ? Shape{} : parse_input_shape(input_shape)))
      log::info("{}", line);
  m->net = std::make_unique<Net>(std::move(g), phase, m->store, *m->backend, seed, opt);
  if (!nl.weights.empty()) load_weights(nl.weights, m->store, model);
  return m;
}

int64_t parse_batch(const std::string& text, const std::string& option) {
  if (text == "auto") return 0;
  int64_t batch = 0;
  const char* end = text.data() + text.size();
  const auto [rest, ec] = std::from_chars(text.data(), end, batch);
  if (ec != std::errc() || rest != end || batch <= 0)
    input_error("{} must be a positive integer or 'auto', got '{}'", option, text);
  return batch;
}

void add_input_shape_option(CLI::App* cmd, std::string& shape) {
  cmd->add_option("--input-shape", shape,
                  "N,C,H,W of the data when the file's data source is absent (default: batch_size, crop_size and "
                  "the mean's channels from the file)");
}

void add_kernel_option(CLI::App* cmd, std::vector<std::string>& choices) {
  cmd->add_option("--kernel", choices,
                  "TYPE=NAME: layers of TYPE run kernel NAME instead of the preferred one (repeatable), e.g. "
                  "LSTM=loops");
}

void use_kernels(const std::vector<std::string>& choices) {
  for (const std::string& c : choices) {
    const size_t eq = c.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == c.size())
      input_error("--kernel {}: give TYPE=NAME, e.g. LSTM=loops", c);
    KernelRegistry::get().prefer(c.substr(0, eq), c.substr(eq + 1));
  }
}

void add_state_options(CLI::App* cmd, StateFlags& flags) {
  cmd->add_option("--stage", flags.stages, "Net stages for include/exclude rules (repeat, or separate with commas)")
      ->delimiter(',');
  cmd->add_option("--level", flags.level, "Net level for include/exclude rules (default: the file's state)")
      ->check(CLI::NonNegativeNumber);
}

}  // namespace bks::cli
