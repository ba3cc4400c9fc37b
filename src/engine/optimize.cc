#include "engine/optimize.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "core/error.h"
#include "engine/channel_pruning.h"
#include "engine/deploy.h"
#include "engine/low_rank.h"
#include "engine/magnitude_masks.h"
#include "engine/recalibrate_statistics.h"
#include "engine/rewritten_model.h"
#include "engine/session.h"
#include "formats/caffe_net.h"
#include "profile/profiler.h"
#include "runtime/evaluate.h"

namespace bks {

namespace fs = std::filesystem;

namespace {

// The levels each technique tries without training, mildest first: a family stops at its
// first level outside the accuracy budget, as the next would lose more.
constexpr double kSparsity[] = {0.5, 0.7, 0.9};
constexpr double kChannelFlops[] = {0.2, 0.4, 0.6};
constexpr double kLowRankEnergy[] = {0.95, 0.9, 0.8};
// With fine-tuning: structured pruning deep enough to pay, and the sparsity of docs/compression.md.
constexpr double kTunedChannelFlops[] = {0.5, 0.7};
constexpr double kTunedSparsity = 0.9;
// Distillation from the unoptimised net: the temperature and soft-target weight that helped
// most in docs/compression.md's measurements.
constexpr const char* kDistillTemperature = "4";
constexpr const char* kDistillAlpha = "0.8";
// Channels kept in multiples of the AVX2 vector (8 floats): ragged counts waste the padding.
constexpr int64_t kChannelMultiple = 8;
// Training batches that re-estimate a channel-pruned net's BatchNorm statistics.
constexpr int kRecalibrationBatches = 50;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median milliseconds of one run of the bundle at `batch` (0: its own, which `batch` then
// gets), on uniform inputs, after warm-up: at least 10 runs and 0.3 s of them.
double time_bundle(const Bundle& b, const std::string& path, int threads, int64_t& batch) {
  InferenceSession s(b, path, threads, batch);
  batch = s.batch();
  fill_timing_inputs(s, 1234);
  for (int i = 0; i < 3; ++i) s.run();
  std::vector<double> ms;
  double spent = 0;
  while ((ms.size() < 10 || spent < 300) && ms.size() < 5000) {
    const double t0 = now_us();
    s.run();
    ms.push_back((now_us() - t0) / 1e3);
    spent += ms.back();
  }
  return median(ms);
}

// Top-1 accuracy of the bundle over its whole recorded test set; `items` gets the count.
double score_bundle(const Bundle& b, const std::string& path, int threads, int64_t& items) {
  auto scored = build_bundle_net(b, scoring_net(b, path, ""), path, threads, inference_options(b, path));
  Net& net = *scored->net;
  const auto [batch, samples] = net.data_extent();
  if (batch <= 0 || samples <= 0) input_error("{}: the recorded test data layer reads no items", path);
  const int batches = static_cast<int>((samples + batch - 1) / batch);
  items = batch * batches;
  const Evaluation ev = evaluate(net, batches, 0);
  for (size_t k = net.outputs().size(); k-- > 0;)
    if (net.graph().values[net.outputs()[k]].name == "accuracy") return ev.output_means[k];
  runtime_error("{}: the scoring net has no accuracy output", path);
}

// The first data layer of the net's TRAIN phase with a source: INT8 ranges are calibrated on
// training data, so the test set only scores. "" when there is none (then the test data).
std::string train_data_source(const NetLoad& nl) {
  const proto::NetState st = net_state(nl, proto::TRAIN, {});
  for (const proto::LayerParameter& l : nl.param.layer()) {
    if (!caffe_data_layer_type(l.type()) || !layer_included(l, st)) continue;
    if (l.has_data_param() && !l.data_param().source().empty()) return l.data_param().source();
    if (l.has_hdf5_data_param() && !l.hdf5_data_param().source().empty()) return l.hdf5_data_param().source();
  }
  return "";
}

bool has_layer(const NetLoad& nl, const std::string& type) {
  const auto& ls = nl.param.layer();
  return std::any_of(ls.begin(), ls.end(), [&](const proto::LayerParameter& l) { return l.type() == type; });
}

std::string percent(double x) { return fmt::format("{:.0f}%", 100 * x); }

// A net and weights a candidate deploys, and how it came about.
struct Variant {
  Variant(std::string n, int t, std::string m = "", std::string w = "")
      : name(std::move(n)), techniques(t), model(std::move(m)), weights(std::move(w)) {}
  std::string name;
  int techniques;
  std::string model, weights;
  bool qat = false;      // trained with --qat int8: deploys INT8 from its learned ranges only
  double fp32_cost = 0;  // its objective's figure in FP32, once measured
};

class Search {
 public:
  Search(const OptimizeOptions& o, const std::function<void(const std::string&)>& progress)
      : o_(o), progress_(progress), start_(now_us()) {
    r_.objective = o.objective;
    r_.max_accuracy_drop = o.max_accuracy_drop;
    r_.batch = o.batch > 0 ? o.batch : o.objective == "throughput" ? 0 : 1;
    r_.threads = CpuBackend(o.threads).threads();
    nl_ = load_net_file(o.model);
    const proto::NetState test = net_state(nl_, proto::TEST, {});
    const auto& ls = nl_.param.layer();
    if (std::none_of(ls.begin(), ls.end(), [&](const proto::LayerParameter& l) {
          return caffe_data_layer_type(l.type()) && l.type() != "Input" && l.type() != "MemoryData" &&
                 l.type() != "DummyData" && layer_included(l, test);
        }))
      input_error("{}: no TEST-phase data layer to score the candidates on (optimize needs a train/test prototxt)",
                  o.model);
    calibration_data_ = train_data_source(nl_);
    batch_norm_ = has_layer(nl_, "BatchNorm");
  }

  OptimizeResult run();

 private:
  bool out_of_time() const { return (now_us() - start_) / 1e6 > o_.budget_seconds; }
  std::string dir(const std::string& what) {
    return (fs::path(o_.work_dir) / fmt::format("c{:02d}-{}", ++dirs_, what)).string();
  }
  // Deploys, scores and times one candidate; false when it could not be measured (or no time
  // was left to try it).
  bool measure(Candidate c);
  bool fits(const Candidate& c) const {
    return 100 * (r_.candidates[0].accuracy - c.accuracy) <= o_.max_accuracy_drop + 1e-9;
  }
  // The variant in FP32; its accuracy and cost recorded when measured.
  bool measure_fp32(Variant& v);
  // v deployed in precision p ("int8 (mse)", "int8 (percentile)" or "bf16").
  Candidate with_precision(const Variant& v, const std::string& p) const;
  void measure_precisions(const Variant& v);
  // A rewrite of `from` that may fail (a net with nothing to prune): the error is a row.
  bool rewrite(const Variant& from, Variant& v, const std::function<void(Variant&)>& make);
  void magnitude_prune(const Variant& from, double sparsity, Variant& v);
  void retime();
  void choose();

  const OptimizeOptions& o_;
  std::function<void(const std::string&)> progress_;
  double start_;
  OptimizeResult r_;
  NetLoad nl_;
  std::string calibration_data_;
  bool batch_norm_ = false;
  int dirs_ = 0;
  std::vector<std::string> fitting_precisions_;  // those that kept the unoptimised net in budget
};

bool Search::measure(Candidate c) {
  if (!r_.candidates.empty() && out_of_time()) {  // the unoptimised net is measured whatever the budget
    r_.not_tried.push_back(c.name);
    return false;
  }
  const double t0 = now_us();
  try {
    DeployOptions d;
    d.model = c.model;
    d.weights = c.weights;
    d.precision = parse_precision(c.precision, "precision");
    d.batch = r_.batch;
    d.auto_batch = r_.batch == 0;
    d.threads = o_.threads;
    d.compress = o_.objective == "size";
    d.weight_bits = c.weight_bits;
    if (d.precision == Precision::int8 && c.calibration != "qat") {
      d.calibration.dataset = calibration_data_.empty() ? "test" : calibration_data_;
      d.calibration.method = c.calibration;
    }
    c.bundle = dir("bundle") + ".bks";
    d.output = c.bundle;
    DeployResult dr = deploy(d);
    save_bundle(c.bundle, dr.bundle);
    c.bytes = static_cast<int64_t>(fs::file_size(c.bundle));
    c.accuracy = score_bundle(dr.bundle, c.bundle, o_.threads, r_.test_items);
    c.batch = r_.batch;
    c.ms = time_bundle(dr.bundle, c.bundle, o_.threads, c.batch);
    c.items_per_s = static_cast<double>(c.batch) * 1e3 / c.ms;
  } catch (const std::exception& e) {
    if (r_.candidates.empty()) throw;  // the unoptimised net must deploy and score
    c.error = e.what();
  }
  c.seconds = (now_us() - t0) / 1e6;
  const bool ok = c.error.empty();
  if (ok) c.fits = r_.candidates.empty() || fits(c);
  r_.candidates.push_back(c);
  if (progress_) {
    const Candidate& base = r_.candidates[0];
    const std::string line = ok ? fmt::format("accuracy {:.4f} ({:+.2f}){}, {:.3f} ms at batch {}, {:.1f} KB",
                                              c.accuracy, 100 * (c.accuracy - base.accuracy),
                                              c.fits ? "" : " outside the budget", c.ms, c.batch, c.bytes / 1e3)
                                : "failed: " + c.error;
    progress_(fmt::format("[{}] {}: {} ({:.1f} s)", r_.candidates.size(), c.name, line, c.seconds));
  }
  return ok;
}

bool Search::measure_fp32(Variant& v) {
  Candidate c;
  c.name = v.name;
  c.techniques = v.techniques;
  c.model = v.model;
  c.weights = v.weights;
  if (v.qat) c.precision = "int8", c.calibration = "qat";
  if (!measure(c)) return false;
  const Candidate& m = r_.candidates.back();
  v.fp32_cost = objective_cost(r_, m);
  return m.fits;
}

Candidate Search::with_precision(const Variant& v, const std::string& p) const {
  Candidate c;
  // The unoptimised net's own precisions are named alone; any other net's name leads.
  const bool unoptimised = v.model == o_.model && v.weights == o_.weights;
  c.name = unoptimised ? p : v.name + " + " + p;
  c.techniques = v.techniques + 1;
  c.model = v.model;
  c.weights = v.weights;
  if (p.ends_with("-bit weights")) {  // FP32, the weights stored on a grid of that many bits
    c.weight_bits = std::stoi(p);
    return c;
  }
  c.precision = p.starts_with("int8") ? "int8" : p;
  if (c.precision == "int8") c.calibration = p.substr(p.find('(') + 1, p.find(')') - p.find('(') - 1);
  return c;
}

void Search::measure_precisions(const Variant& v) {
  for (const std::string& p : fitting_precisions_) measure(with_precision(v, p));
}

bool Search::rewrite(const Variant& from, Variant& v, const std::function<void(Variant&)>& make) {
  if (out_of_time()) {
    r_.not_tried.push_back(v.name);
    return false;
  }
  try {
    make(v);
    return true;
  } catch (const std::exception& e) {
    Candidate c;
    c.name = v.name;
    c.techniques = v.techniques;
    c.model = from.model;
    c.error = e.what();
    r_.candidates.push_back(c);
    if (progress_) progress_(fmt::format("[{}] {}: not possible: {}", r_.candidates.size(), c.name, c.error));
    return false;
  }
}

void Search::magnitude_prune(const Variant& from, double sparsity, Variant& v) {
  DeployOptions d;
  d.model = from.model;
  d.weights = from.weights;
  const NetLoad nl = load_net_file(from.model);
  const DeployModel m = load_deploy_model(d, nl);
  std::map<std::string, Tensor> w = weights_by_layer(m);
  std::vector<Tensor*> pruned;
  for (const proto::LayerParameter& l : nl.param.layer())
    if (l.type() == "Convolution" || l.type() == "InnerProduct") {
      auto it = w.find(l.name() + ".0");
      if (it != w.end() && std::find(pruned.begin(), pruned.end(), &it->second) == pruned.end())
        pruned.push_back(&it->second);
    }
  if (pruned.empty()) input_error("{}: no Convolution or InnerProduct weights to prune", from.model);
  const std::vector<const Tensor*> view(pruned.begin(), pruned.end());
  const std::vector<std::vector<uint8_t>> keep = magnitude_masks(view, sparsity);
  for (size_t k = 0; k < pruned.size(); ++k)
    for (int64_t i = 0; i < pruned[k]->numel(); ++i)
      if (!keep[k][static_cast<size_t>(i)]) pruned[k]->f32()[i] = 0.f;
  std::tie(v.model, v.weights) = write_rewritten_model(
      dir("sparse"), nl.param, w,
      fmt::format("{} with {} of its weights pruned (bakusoku optimize)", from.model, percent(sparsity)), from.model,
      from.weights);
}

OptimizeResult Search::run() {
  Variant base{"unoptimised (fp32)", 0, o_.model, o_.weights};
  measure_fp32(base);
  // Precisions alone: those that keep the accuracy and beat FP32 on the objective are tried
  // on every model that fits (BF16 without native BF16 dot products is slower than FP32).
  std::vector<std::string> precisions = {"int8 (mse)", "int8 (percentile)"};
  if (cpu_has_bf16()) precisions.push_back("bf16");
  // For size, fewer bits per stored weight (deploy --weight-bits): INT8 layers would store
  // the same levels, so FP32 with them is as small.
  if (o_.objective == "size") precisions.insert(precisions.end(), {"6-bit weights", "5-bit weights", "4-bit weights"});
  for (const std::string& p : precisions)
    if (measure(with_precision(base, p)) && r_.candidates.back().fits &&
        objective_cost(r_, r_.candidates.back()) < base.fp32_cost)
      fitting_precisions_.push_back(p);

  std::vector<Variant> fitting;  // model rewrites within budget in FP32 (or their own precision)
  // Outcome of one rewrite: a family of levels stops at the first outside the budget, and
  // skips a level whose net is one it already has.
  enum class Outcome { fits, outside, repeat };
  std::set<std::string> made;
  auto try_variant = [&](const Variant& from, Variant v, const std::function<void(Variant&)>& make) {
    if (!rewrite(from, v, make)) return Outcome::outside;
    if (!made.insert(v.name).second) return Outcome::repeat;
    if (!measure_fp32(v)) return Outcome::outside;
    if (!v.qat) fitting.push_back(v);
    return Outcome::fits;
  };
  // Without training, mildest level first.
  for (double s : kSparsity)
    if (try_variant(base, {fmt::format("sparsity {}", percent(s)), 1},
                    [&](Variant& v) { magnitude_prune(base, s, v); }) == Outcome::outside)
      break;
  // Named by the cut it made: with whole multiples of channels kept, two targets can give
  // one net.
  auto prune_channels_to = [&](double flops, Variant& v) {
    ChannelPruneOptions p;
    p.flops = flops;
    p.multiple = kChannelMultiple;
    ChannelPruneResult pr = prune_channels(o_.model, o_.weights, p);
    const bool conv = pr.conv_macs_before > 0;
    const double cut = 1 - (conv ? pr.conv_macs_after / pr.conv_macs_before : pr.macs_after / pr.macs_before);
    v.name = fmt::format("channels -{} {}", percent(cut), conv ? "conv MACs" : "MACs");
    if (made.contains(v.name)) return;
    if (batch_norm_) recalibrate_statistics(pr.net, o_.model, pr.weights, kRecalibrationBatches, o_.threads);
    std::tie(v.model, v.weights) =
        write_rewritten_model(dir("channels"), pr.net, pr.weights,
                              fmt::format("{} with {} fewer multiply-adds (bakusoku optimize)", o_.model, percent(cut)),
                              o_.model, o_.weights);
  };
  for (double f : kChannelFlops)
    if (try_variant(base, {fmt::format("channels -{} FLOPs", percent(f)), 1},
                    [&](Variant& v) { prune_channels_to(f, v); }) == Outcome::outside)
      break;
  for (double e : kLowRankEnergy)
    if (try_variant(base, {fmt::format("low-rank {} energy", percent(e)), 1}, [&](Variant& v) {
          LowRankOptions l;
          l.energy = e;
          LowRankResult lr = factorize_low_rank(o_.model, o_.weights, l);
          if (std::none_of(lr.layers.begin(), lr.layers.end(), [](const LowRankLayer& x) { return x.factorised; }))
            input_error("no layer gets smaller at {} energy", percent(e));
          std::tie(v.model, v.weights) =
              write_rewritten_model(dir("low-rank"), lr.net, lr.weights,
                                    fmt::format("{} factorised to {} energy (bakusoku optimize)", o_.model, percent(e)),
                                    o_.model, o_.weights);
        }) == Outcome::outside)
      break;

  if (o_.fine_tune) {
    using Flags = std::vector<std::string>;
    auto tuned = [&](const Variant& from, const Flags& flags, Variant& v) {
      const std::string snapshot = o_.fine_tune({from.model, from.weights, flags, dir("train")});
      v.model = from.model;
      v.weights = snapshot;
    };
    // Distillation: a pruned net relearns from the soft targets of the net it was cut from.
    const Flags distilled = {"--teacher",         o_.model,  "--teacher-weights", o_.weights, "--temperature",
                             kDistillTemperature, "--alpha", kDistillAlpha};
    // The accuracy of the candidate just tried if it is `name` and was measured, else -1.
    auto last_accuracy = [&](const std::string& name) {
      const Candidate& c = r_.candidates.back();
      return c.name == name && c.error.empty() ? c.accuracy : -1.0;
    };
    // The control: the net given the same training, unchanged. Fine-tuned candidates owe
    // part of their accuracy to the extra iterations; this row shows how much.
    try_variant(base, {"unoptimised, fine-tuned (control)", 0}, [&](Variant& v) { tuned(base, {}, v); });
    std::set<std::string> pruned_nets;
    for (double f : kTunedChannelFlops) {
      Variant pruned{fmt::format("channels -{} FLOPs", percent(f)), 1};
      if (!rewrite(base, pruned, [&](Variant& v) {
            const std::set<std::string> before = made;
            made.clear();  // the no-training nets of the same cut are fine-tuned too
            prune_channels_to(f, v);
            made = before;
          }))
        continue;
      if (!pruned_nets.insert(pruned.name).second) continue;
      const std::string plain_name = pruned.name + ", fine-tuned", taught_name = pruned.name + ", distilled";
      try_variant(pruned, {plain_name, 1}, [&](Variant& v) { tuned(pruned, {}, v); });
      const double plain = last_accuracy(plain_name);
      try_variant(pruned, {taught_name, 2}, [&](Variant& v) { tuned(pruned, distilled, v); });
      const double taught = last_accuracy(taught_name);
      // QAT trains the way that recovered more.
      const bool distil = taught > plain;
      Variant qat{pruned.name + " + QAT int8" + (distil ? ", distilled" : ""), distil ? 3 : 2};
      qat.qat = true;
      Flags flags = distil ? distilled : Flags{};
      flags.insert(flags.end(), {"--qat", "int8"});
      try_variant(pruned, qat, [&](Variant& v) { tuned(pruned, flags, v); });
    }
    try_variant(base, {fmt::format("sparsity {}, fine-tuned", percent(kTunedSparsity)), 1}, [&](Variant& v) {
      tuned(base, {"--prune", fmt::format("{}", kTunedSparsity)}, v);
    });
    Variant qat{"QAT int8", 1};
    qat.qat = true;
    try_variant(base, qat, [&](Variant& v) { tuned(base, {"--qat", "int8"}, v); });
  }

  // Each model that fits, with each precision that fits, most promising first.
  std::sort(fitting.begin(), fitting.end(),
            [](const Variant& a, const Variant& b) { return a.fp32_cost < b.fp32_cost; });
  for (const Variant& v : fitting) measure_precisions(v);
  // Structured then unstructured pruning: the most aggressive of each that fits alone.
  std::optional<Variant> channels;
  double sparsity = 0;
  for (const Variant& v : fitting) {
    if (v.name.starts_with("channels") && (!channels || v.fp32_cost < channels->fp32_cost)) channels = v;
    for (double s : kSparsity)
      if (v.name == fmt::format("sparsity {}", percent(s))) sparsity = std::max(sparsity, s);
  }
  if (channels && sparsity > 0) {
    Variant both{fmt::format("{} + sparsity {}", channels->name, percent(sparsity)), 2};
    if (try_variant(*channels, both, [&](Variant& v) { magnitude_prune(*channels, sparsity, v); }) == Outcome::fits)
      measure_precisions(fitting.back());
  }
  retime();
  choose();
  r_.seconds = (now_us() - start_) / 1e6;
  return r_;
}

// Every candidate's time again, in alternating rounds: a burst of load on the machine only
// slows a run, so each keeps the lowest of its medians.
void Search::retime() {
  if (o_.objective == "size") return;
  std::vector<size_t> measured;
  for (size_t i = 0; i < r_.candidates.size(); ++i)
    if (r_.candidates[i].error.empty()) measured.push_back(i);
  constexpr int kRounds = 2;
  if (progress_)
    progress_(fmt::format("Timing the {} candidates again, in {} alternating rounds", measured.size(), kRounds));
  // One bundle in memory at a time: a large net's candidates would not all fit.
  for (int round = 0; round < kRounds; ++round)
    for (size_t i : measured) {
      Candidate& c = r_.candidates[i];
      c.ms = std::min(c.ms, time_bundle(load_bundle(c.bundle), c.bundle, o_.threads, c.batch));
      c.items_per_s = static_cast<double>(c.batch) * 1e3 / c.ms;
    }
}

void Search::choose() {
  std::vector<Candidate>& cs = r_.candidates;
  auto better = [&](int i, int best) {
    if (best < 0) return true;
    const double a = objective_cost(r_, cs[i]), b = objective_cost(r_, cs[best]);
    return a < b || (a == b && cs[i].accuracy > cs[best].accuracy);
  };
  r_.best = r_.best_single = -1;
  for (int i = 0; i < static_cast<int>(cs.size()); ++i) {
    if (!cs[i].error.empty() || !cs[i].fits) continue;
    if (better(i, r_.best)) r_.best = i;
    if (cs[i].techniques <= 1 && better(i, r_.best_single)) r_.best_single = i;
  }
  for (Candidate& c : cs) {
    c.pareto = c.error.empty();
    for (const Candidate& d : cs) {
      if (!c.pareto) break;
      if (&d == &c || !d.error.empty()) continue;
      const bool no_worse = d.accuracy >= c.accuracy && d.ms <= c.ms && d.bytes <= c.bytes;
      const bool better_in_one = d.accuracy > c.accuracy || d.ms < c.ms || d.bytes < c.bytes;
      if (no_worse && better_in_one) c.pareto = false;
    }
  }
}

}  // namespace

double objective_cost(const OptimizeResult& r, const Candidate& c) {
  if (r.objective == "throughput") return -c.items_per_s;
  if (r.objective == "size") return static_cast<double>(c.bytes);
  return c.ms;
}

OptimizeResult optimize(const OptimizeOptions& o, const std::function<void(const std::string&)>& progress) {
  if (o.objective != "latency" && o.objective != "throughput" && o.objective != "size")
    input_error("--objective must be latency, throughput or size, got '{}'", o.objective);
  if (!(o.max_accuracy_drop >= 0 && o.max_accuracy_drop <= 100))
    input_error("--max-accuracy-drop must be in [0, 100] percentage points, got {}", o.max_accuracy_drop);
  if (o.batch < 0) input_error("--batch must be positive, got {}", o.batch);
  if (!(o.budget_seconds > 0)) input_error("--budget-minutes must be positive, got {}", o.budget_seconds / 60);
  if (o.work_dir.empty()) input_error("optimize: no directory for the candidates");
  if (!fs::exists(o.weights)) input_error("--weights {}: no such file", o.weights);
  fs::create_directories(o.work_dir);
  Search s(o, progress);
  return s.run();
}

}  // namespace bks
