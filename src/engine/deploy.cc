#include "engine/deploy.h"

#include <google/protobuf/text_format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <set>

#include "backend/dnnl_util.h"
#include "core/error.h"
#include "core/log.h"
#include "core/sysinfo.h"
#include "engine/batch_tuning.h"
#include "engine/session.h"
#include "formats/caffe_net.h"
#include "formats/safetensors.h"
#include "formats/weights.h"
#include "ops/shape_inference.h"
#include "passes/insert_binarize.h"
#include "passes/stand_in_inputs.h"
#include "profile/profiler.h"
#include "runtime/net.h"
#include "runtime/param_binding.h"

namespace bks {

bool cpu_has_bf16() {
  const SysInfo si = query_sysinfo();
  return si.has("avx512_bf16") || si.has("amx_bf16");
}

void require_bf16() {
  if (!cpu_has_bf16())
    input_error("--precision bf16: this CPU ({}) has neither AVX-512 BF16 nor AMX-BF16 instructions",
                query_sysinfo().cpu_model);
}

DeployModel load_deploy_model(const DeployOptions& o, const NetLoad& nl) {
  if (o.precision == Precision::bf16) require_bf16();
  const proto::NetState st = net_state(nl, proto::TEST, o.state);
  // Shapes from the op definitions and each layer's blobs (sharing resolved) from the
  // weights file: no kernel is built.
  DeployModel m;
  m.graph = build_caffe_graph(nl, st);
  for (const std::string& line : stand_in_absent_data(m.graph, proto::TEST, o.input_shape)) log::info("{}", line);
  infer_shapes(m.graph, proto::TEST);
  ParamStore store;
  auto node_params = bind_parameters(m.graph, store, 1, declared_params(m.graph, proto::TEST));
  if (!o.random_weights) {
    if (!o.weights.empty()) load_weights(o.weights, store);
    else load_weights(nl.weights, store, nl.source);  // an ONNX model's own initializers
  }
  for (size_t n = 0; n < m.graph.nodes.size(); ++n)
    for (size_t i = 0; i < m.graph.nodes[n].params.size(); ++i)
      m.weights[m.graph.nodes[n].params[i].key] = store.at(node_params[n][i]).data;
  return m;
}

namespace {

// The TEST data layers as prototxt text, so `bakusoku test` can score a bundle on them.
std::string test_data_layers(const NetLoad& nl, const StateFlags& state) {
  const proto::NetState st = net_state(nl, proto::TEST, state);
  std::string data;
  for (const auto& l : nl.param.layer())
    if (op_traits(l).data_layer && layer_included(l, st)) {
      std::string t;
      google::protobuf::TextFormat::PrintToString(l, &t);
      data += "layer {\n" + t + "}\n";
    }
  return data;
}

}  // namespace

DeployModel load_deploy_model(const DeployOptions& o) { return load_deploy_model(o, load_net_file(o.model, o.input_shape)); }

namespace {

// `learned`: the weights hold ranges from quantization-aware training (train --qat int8).
void check_options(const DeployOptions& o, bool learned) {
  const CalibrationOptions& c = o.calibration;
  if (o.precision == Precision::int8 && c.dataset.empty() && c.from_bundle.empty() && !learned)
    input_error(
        "--precision int8 needs --calib DATASET (or --calib test) or --calib-from BUNDLE for activation ranges, "
        "or weights trained with train --qat int8");
  if (!c.dataset.empty() && !c.from_bundle.empty()) input_error("give --calib or --calib-from, not both");
  if (o.auto_batch && o.batch > 0) input_error("--batch: give a batch size or 'auto', not both");
  if (o.weight_bits != 0 && !o.compress) input_error("--weight-bits is for --compress (the weights are stored coded)");
  if (o.weight_bits != 0 && (o.weight_bits < 2 || o.weight_bits > 8))
    input_error("--weight-bits must be in [2, 8], got {}", o.weight_bits);
}

// The bundle's graph must still build after every step that changed it: a session of it, or
// a RuntimeError naming the step.
std::unique_ptr<InferenceSession> checked_session(const Bundle& b, const std::string& name, const std::string& stage,
                                                  int threads) {
  try {
    return std::make_unique<InferenceSession>(b, name, threads);
  } catch (const InputError& e) {
    runtime_error("deploy: the bundle's graph no longer builds after {}: {}", stage, e.what());
  }
}
void verify_bundle(const Bundle& b, const std::string& name, const std::string& stage, int threads) {
  checked_session(b, name, stage, threads);
}

CalibrationTable calibration_table(const DeployOptions& o, const Bundle& b, const std::string& name) {
  const CalibrationOptions& c = o.calibration;
  if (c.from_bundle.empty())
    return calibrate(b, name, c.dataset == "test" ? std::string() : c.dataset, c.batches, c.method, o.threads);
  Bundle from = load_bundle(c.from_bundle);
  auto it = from.info.find("calibration");
  if (it == from.info.end()) input_error("{}: this bundle holds no calibration table", c.from_bundle);
  return CalibrationTable::from_json(it->second, c.from_bundle);
}

// Each node's forward time in the FP32 bundle and in the INT8 session, on the same uniform
// [0, 1) inputs: rounds alternate between the two and every node keeps its lowest time, so a
// burst of load on the machine does not decide a layer's precision.
std::pair<std::vector<double>, std::vector<double>> time_fp32_and_int8(const Bundle& fp32, InferenceSession& int8,
                                                                      const std::string& name, int threads) {
  InferenceSession a(fp32, name, threads);
  fill_timing_inputs(a, 7);
  fill_timing_inputs(int8, 7);
  const double t0 = now_us();
  a.run();
  const double once_ms = (now_us() - t0) / 1e3;
  const int iterations = std::clamp(static_cast<int>(100.0 / std::max(once_ms, 1e-3)), 2, 20);
  std::vector<double> fa = time_nodes(a, iterations), fb = time_nodes(int8, iterations);
  for (int round = 1; round < 3; ++round) {
    const std::vector<double> ta = time_nodes(a, iterations), tb = time_nodes(int8, iterations);
    for (size_t k = 0; k < fa.size(); ++k) fa[k] = std::min(fa[k], ta[k]);
    for (size_t k = 0; k < fb.size(); ++k) fb[k] = std::min(fb[k], tb[k]);
  }
  return {fa, fb};
}

// The grid a snapshot's weights were trained on (train --qat binary / pow2 / xnor; "" when
// none) and the weights training left float.
struct TrainedGrid {
  std::string name;
  std::set<std::string> float_keys;
};

TrainedGrid trained_weight_grid(const DeployOptions& o) {
  if (o.random_weights || !o.weights.ends_with(".safetensors")) return {};
  const TensorFile f = load_safetensors(o.weights);
  auto it = f.metadata.find("weight_grid");
  if (it == f.metadata.end()) return {};
  TrainedGrid g{it->second, {}};
  if (auto fl = f.metadata.find("weight_grid_float"); fl != f.metadata.end()) {
    const auto keys = nlohmann::json::parse(fl->second, nullptr, false);
    if (!keys.is_array() || !std::all_of(keys.begin(), keys.end(), [](const auto& k) { return k.is_string(); }))
      input_error("{}: metadata 'weight_grid_float' is not a JSON list of weight names: '{}'", o.weights, fl->second);
    for (const auto& k : keys) g.float_keys.insert(k.get<std::string>());
  }
  return g;
}

}  // namespace

DeployResult deploy(const DeployOptions& o,
                    const std::function<void(const PassReport&, const DeployModel&)>& after_each) {
  // Weights trained with --qat int8 carry their ranges: no calibration pass unless asked for.
  const bool calibrate_asked = !o.calibration.dataset.empty() || !o.calibration.from_bundle.empty();
  const std::optional<CalibrationTable> learned =
      o.precision != Precision::int8 || o.random_weights || calibrate_asked ? std::nullopt : learned_ranges(o.weights);
  check_options(o, learned.has_value());
  const std::string name = o.output.empty() ? o.model : o.output;
  NetLoad nl = load_net_file(o.model, o.input_shape);
  DeployModel m = load_deploy_model(o, nl);
  if (after_each) after_each(PassReport{"input", {}}, m);
  DeployResult r;
  // Weights trained on a binary / pow2 grid: rounded as training saw them, before BatchNorm
  // folds into them.
  // XNOR-Net weights (--qat xnor) also had binary inputs: the same Binarize nodes first.
  const TrainedGrid trained = trained_weight_grid(o);
  const std::string& grid = trained.name;
  if (grid == "xnor") {
    r.reports.push_back(insert_binarize(m.graph));
    if (after_each) after_each(r.reports.back(), m);
  }
  if (!grid.empty()) {
    r.reports.push_back(round_weights_to_grid(m, weight_grid(grid), grid, trained.float_keys));
    if (after_each) after_each(r.reports.back(), m);
  }
  for (PassReport& p : run_deploy_passes(m, after_each)) r.reports.push_back(std::move(p));
  // Then the binarized layers onto the XNOR + popcount kernels.
  if (grid == "xnor") {
    r.reports.push_back(binarize_layers(m));
    if (after_each) after_each(r.reports.back(), m);
  }
  r.bundle.graph = bundle_graph(m);
  if (o.precision == Precision::bf16) r.reports.push_back(compute_in_bf16(r.bundle.graph));
  if (o.batch > 0) set_input_batch(r.bundle.graph, o.batch);
  r.bundle.weights = weights_by_layer(m);
  for (const Value& v : m.graph.values) r.shapes[v.name] = v.shape;
  r.bundle.info["precision"] = precision_name(o.precision);
  r.bundle.info["source_model"] = o.model;
  r.bundle.info["source_weights"] = o.random_weights    ? "random (each layer's filler, seed 1)"
                                    : !o.weights.empty() ? o.weights
                                                         : o.model + " (its initializers)";
  std::string data = test_data_layers(nl, o.state);
  if (!data.empty()) r.bundle.info["data_layers"] = data;

  // Calibration (measured on the FP32 bundle), then INT8 quantization from its table.
  if (calibrate_asked || learned) {
    r.calibration = learned ? *learned : calibration_table(o, r.bundle, name);
    r.bundle.info["calibration"] = r.calibration->to_json();
    PassReport cal{"calibrate", {}};
    if (learned) cal.changes.push_back("the ranges quantization-aware training learnt, from " + o.weights);
    for (auto& [blob, th] : r.calibration->threshold) cal.changes.push_back(fmt::format("{}: |x| <= {:.4g}", blob, th));
    r.reports.push_back(cal);
    if (o.precision == Precision::int8) {
      const Bundle fp32 = r.bundle;
      r.int8 = quantize_int8(r.bundle, *r.calibration);
      std::unique_ptr<InferenceSession> int8 = checked_session(r.bundle, name, "quantize-int8", o.threads);
      std::vector<std::string> sent_back;
      if (o.int8_where_faster && r.int8.quantized > 0) {
        log::info("int8: timing {} quantized layer(s) against FP32 on this machine (--int8-layers all skips this)",
                  r.int8.quantized);
        auto [fp32_ms, int8_ms] = time_fp32_and_int8(fp32, *int8, name, o.threads);
        int8.reset();
        sent_back = keep_int8_where_faster(r.bundle.graph, fp32_ms, int8_ms, r.int8);
        if (!sent_back.empty()) verify_bundle(r.bundle, name, "keep-int8-where-faster", o.threads);
      }
      r.reports.push_back({"quantize-int8",
                           {fmt::format("{} convolution / inner product layer(s) quantized, {} writing int8 for int8 "
                                        "readers",
                                        r.int8.quantized, r.int8.int8_outputs)}});
      if (o.int8_where_faster) r.reports.push_back({"keep-int8-where-faster", sent_back});
    }
  }
  // Last of the passes that change weights or which layers run INT8.
  if (o.compress) {
    r.coding = compress_weights(r.bundle, o.weight_bits);
    PassReport rep{"compress-weights", {coding_summary(r.coding)}};
    if (o.weight_bits > 0) {
      r.bundle.info["weight_bits"] = std::to_string(o.weight_bits);
      rep.changes.push_back(fmt::format("weights on {}-bit per-channel grids (lossy)", o.weight_bits));
    }
    for (const CodedTensorReport& t : r.coding)
      rep.changes.push_back(fmt::format("{}: {} of {} elements stored, {}, {} -> {} bytes", t.name, t.stored,
                                        t.elements, t.layout, t.dense_bytes, t.coded_bytes));
    r.reports.push_back(rep);
  }
  if (o.auto_batch) {
    BatchChoice c = choose_batch(r.bundle, name, o.threads, o.memory_cap_bytes);
    r.batch_table = c.table;
    r.bundle.info["batch_tuning"] = c.table;
    set_input_batch(r.bundle.graph, c.batch);
    r.reports.push_back({"tune-batch", {fmt::format("batch {}", c.batch)}});
  }
  // Build the bundle's net once: it checks the graph runs and autotunes the kernels. What
  // autotuning chose is saved, so loading the bundle does not time kernels again (and
  // every session of an embedding runs the same kernels).
  if (o.autotune) autotune(r, name, o.threads, o.layout);
  std::string passes;
  for (const auto& rep : r.reports)
    if (rep.pass != "calibrate")
      for (const auto& c : rep.changes) passes += rep.pass + ": " + c + "\n";
  r.bundle.info["passes"] = passes;
  return r;
}

void autotune(DeployResult& r, const std::string& name, int threads, const std::string& layout) {
  if (layout != "auto" && layout != "channels-last" && layout != kBlockedLayout)
    input_error("{}: layout '{}' is none of auto, channels-last, blocked", name, layout);
  InferenceSession s(r.bundle, name, threads);
  Net& net = s.net();
  // Convolutions time their candidates when built; a sparse inner product times itself on
  // its first input, so run once.
  fill_timing_inputs(s, 7);
  s.run();
  PassReport tune{"autotune", {}};
  for (int n = 0; n < net.num_nodes() && n < static_cast<int>(r.bundle.graph.nodes.size()); ++n) {
    std::string choice = net.op(n).tuning_decision();
    if (choice.empty()) continue;
    r.bundle.graph.nodes[n].deploy.kernel = choice;
    if (choice != "direct") {
      ++r.tuned;
      tune.changes.push_back(fmt::format("{}: {}", net.graph().nodes[n].name, choice));
    }
  }
  r.kernels = net.describe();
  r.arena_bytes = net.planned_bytes();
  r.batch = s.batch();
  r.ops = net.num_nodes();
  // The convolutions' output layout and whether the batch runs faster in parts, chosen
  // together: the parts that suit one layout may not suit the other (MobileNet v2 at batch
  // 32 ran blocked faster whole, channels-last faster in parts of 2).
  auto set_layout = [&](bool blocked) {
    if (blocked)
      r.bundle.info[kActivationLayoutKey] = kBlockedLayout;
    else
      r.bundle.info.erase(kActivationLayoutKey);
  };
  auto parts = [&](bool blocked) {
    set_layout(blocked);
    r.bundle.info.erase("micro_batch");
    r.bundle.info.erase(kPartsUntilKey);
    return r.batch > 1 ? choose_micro_batch(r.bundle, name, threads) : MicroBatchChoice{};
  };
  bool blocked = layout == kBlockedLayout && onednn_has_avx512();
  MicroBatchChoice micro = parts(blocked);
  if (layout == "auto" && onednn_has_avx512()) {
    MicroBatchChoice in_blocks = parts(true);
    LayoutChoice c = choose_activation_layout(r.bundle, name, threads, micro.micro, in_blocks.micro);
    r.layout_table = c.table;
    if (c.blocked) {
      blocked = true;
      micro = in_blocks;
    }
  }
  set_layout(blocked);
  if (blocked) {
    tune.changes.push_back("convolutions write 16-channel blocks");
    InferenceSession chosen(r.bundle, name, threads, 0, 0);
    r.kernels = chosen.net().describe();
    r.arena_bytes = chosen.net().planned_bytes();
  }
  r.micro_batch_table = micro.table;
  if (micro.micro > 0) {
    r.bundle.info["micro_batch"] = std::to_string(micro.micro);
    tune.changes.push_back(fmt::format("batch {} runs in parts of {}", r.batch, micro.micro));
    if (!micro.until.empty()) {
      r.bundle.info[kPartsUntilKey] = micro.until;
      tune.changes.push_back(fmt::format("the parts run through '{}', the rest whole", micro.until));
    }
    r.arena_bytes = micro.arena_bytes;
  }
  r.reports.push_back(tune);
}

}  // namespace bks
