#include "train/trainer.h"

#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <random>

#include "backend/accelerator.h"
#include "backend/backend.h"
#include "backend/dnnl_util.h"
#include "core/file_io.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/signals.h"
#include "core/sysinfo.h"
#include "data/dataset.h"
#include "data/shared_dataset.h"
#include "dist/communicator.h"
#include "dist/gradient_buckets.h"
#include "formats/caffe_net.h"
#include "formats/caffe_upgrade.h"
#include "formats/prototxt.h"
#include "formats/safetensors.h"
#include "formats/weights.h"
#include "ops/op_def.h"
#include "passes/insert_binarize.h"
#include "passes/insert_distillation.h"
#include "passes/insert_fake_quant.h"
#include "runtime/evaluate.h"
#include "runtime/net.h"
#include "train/distillation.h"
#include "train/global_batch.h"
#include "train/lr_policy.h"
#include "train/magnitude_pruning.h"
#include "train/progress.h"
#include "train/run_dir.h"
#include "train/solver.h"
#include "train/weight_fake_quant.h"

namespace bks {
namespace fs = std::filesystem;
namespace {

// A non-negative integer the solver state's metadata holds (iter, seed); InputError naming
// the file and key when it is not one.
int64_t metadata_integer(const TensorFile& state, const char* key, const std::string& path) {
  const std::string& text = state.metadata.at(key);
  int64_t v = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0)
    input_error("{}: corrupt solver state: metadata '{}' is '{}', not a non-negative integer", path, key, text);
  return v;
}

struct NetSources {
  NetLoad train;
  std::vector<NetLoad> test;
  std::vector<proto::NetState> test_states;
};

NetLoad inline_net(const proto::NetParameter& p, const std::string& where) {
  NetLoad n;
  n.param = p;
  n.source = where;
  return n;
}

// Caffe's rules for which files hold the train and test nets.
NetSources load_nets(const proto::SolverParameter& sp, const std::string& solver_path) {
  std::string dir = fs::path(solver_path).parent_path().string();
  int train_sources = sp.has_net() + sp.has_net_param() + sp.has_train_net() + sp.has_train_net_param();
  if (train_sources != 1)
    input_error("{}: give exactly one of net, net_param, train_net, train_net_param (got {})", solver_path,
                train_sources);
  NetSources ns;
  if (sp.has_net()) ns.train = load_net_file(resolve_path(sp.net(), dir));
  if (sp.has_train_net()) ns.train = load_net_file(resolve_path(sp.train_net(), dir));
  if (sp.has_net_param()) ns.train = inline_net(sp.net_param(), solver_path + ": net_param");
  if (sp.has_train_net_param()) ns.train = inline_net(sp.train_net_param(), solver_path + ": train_net_param");
  for (auto& t : sp.test_net()) ns.test.push_back(load_net_file(resolve_path(t, dir)));
  for (auto& t : sp.test_net_param()) ns.test.push_back(inline_net(t, solver_path + ": test_net_param"));
  if (ns.test.empty() && (sp.has_net() || sp.has_net_param()))
    for (int i = 0; i < std::max(sp.test_iter_size(), sp.test_state_size()); ++i) ns.test.push_back(ns.train);
  if (static_cast<int>(ns.test.size()) != sp.test_iter_size())
    input_error("{}: {} test net(s) but {} test_iter value(s); give one test_iter per test net", solver_path,
                ns.test.size(), sp.test_iter_size());
  if (sp.test_state_size() && sp.test_state_size() != static_cast<int>(ns.test.size()))
    input_error("{}: {} test_state entries for {} test nets", solver_path, sp.test_state_size(), ns.test.size());
  for (size_t i = 0; i < ns.test.size(); ++i) {
    proto::NetState st = sp.test_state_size() ? sp.test_state(static_cast<int>(i)) : proto::NetState();
    st.set_phase(proto::TEST);
    ns.test_states.push_back(st);
  }
  return ns;
}

// The weights a training run starts from, as `caffe train` takes them: --weights (files
// separated by commas) replaces the solver's `weights` entries (each may hold several too);
// none when resuming. Relative paths missing from the current directory are looked up
// beside the solver.
std::vector<std::string> initial_weights(const proto::SolverParameter& sp, const TrainOptions& opt,
                                         const std::string& solver_path) {
  if (!opt.snapshot.empty()) {
    if (sp.weights_size() > 0)
      log::info("{}: resuming from {}; the solver's weights entries are not loaded", solver_path, opt.snapshot);
    return {};
  }
  std::vector<std::string> lists;
  if (!opt.weights.empty())
    lists.push_back(opt.weights);
  else
    lists.assign(sp.weights().begin(), sp.weights().end());
  const std::string dir = std::filesystem::path(solver_path).parent_path().string();
  std::vector<std::string> out;
  for (const std::string& list : lists)
    for (size_t start = 0; start <= list.size();) {
      size_t end = std::min(list.find(',', start), list.size());
      if (end > start)
        out.push_back(opt.weights.empty() ? resolve_path(list.substr(start, end - start), dir)
                                          : list.substr(start, end - start));
      start = end + 1;
    }
  return out;
}

// Solver fields Caffe acts on that bakusoku does differently: said once, not silently dropped.
void note_solver_fields(const proto::SolverParameter& sp, const std::string& where) {
  if (sp.has_snapshot_format())
    log::warn(
        "{}: snapshot_format {}: bakusoku writes snapshots as safetensors (.safetensors weights and "
        ".solverstate)",
        where, proto::SolverParameter::SnapshotFormat_Name(sp.snapshot_format()));
  if (sp.snapshot_diff()) log::warn("{}: snapshot_diff: snapshots hold the weights only, not their gradients", where);
}

void check_solver(const proto::SolverParameter& sp, const std::string& where) {
  if (!sp.has_base_lr() || !(sp.base_lr() > 0.f)) input_error("{}: base_lr must be given and positive", where);
  if (!sp.has_max_iter() || sp.max_iter() < 0) input_error("{}: max_iter must be given and non-negative", where);
  if (sp.test_interval() < 0) input_error("{}: test_interval must be non-negative", where);
  if (sp.display() < 0) input_error("{}: display must be non-negative", where);
  if (sp.snapshot() < 0) input_error("{}: snapshot must be non-negative", where);
  if (sp.average_loss() < 1) input_error("{}: average_loss must be at least 1", where);
  for (int t : sp.test_iter())
    if (t <= 0) input_error("{}: test_iter must be positive", where);
  check_lr_policy(sp, where);
}

std::string json_number_key(const std::string& name) {
  static const char* reserved[] = {"time", "iter", "epoch", "phase", "lr", "loss", "images_per_s"};
  for (auto r : reserved)
    if (name == r) return name == "loss" ? name : "out_" + name;
  return name;
}

class TrainerImpl {
 public:
  explicit TrainerImpl(const TrainOptions& opt) : opt_(opt), comm_(dist::world()), lead_(comm_.rank() == 0) {}
  TrainResult run();

 private:
  void setup();
  // Picks the nets' device: --gpu, else the solver's solver_mode and device_id (gpu_ stays
  // null for the CPU).
  void choose_gpu();
  // setup() on every rank, then the ranks agree that all of them succeeded with the same
  // net and solver; the weights are rank 0's from then on.
  void setup_everywhere();
  uint64_t configuration_hash() const;
  void broadcast_params(bool learnable);
  void prepare_gradient_buckets();
  // Whether to stop before the next step: this process's interrupt alone, or with several
  // ranks what they agreed on with the last step's loss (an interrupt on any rank stops
  // them all, at the same iteration).
  bool stop_requested() const;
  bool ranks_stop_ = false;
  // The solver's learning rate at `iter`, with --lr-scale applied.
  float scaled_learning_rate(int64_t iter) const;
  void restore();
  void test_all();
  void snapshot();
  // --teacher: loads it and has it score each batch once the train net's data layer ran.
  void attach_teacher(int threads);
  nlohmann::json hardware_json() const;
  double epoch() const {
    return dataset_size_ > 0 ? static_cast<double>(iter_) * batch_ * sp_.iter_size() * comm_.size() / dataset_size_
                             : 0.0;
  }
  double since_start() const { return (now_us() - start_us_) / 1e6; }

  TrainOptions opt_;
  dist::Communicator& comm_;
  const bool lead_;             // rank 0: the rank that writes the run directory and prints
  uint64_t fallback_seed_ = 0;  // rank 0's random seed, for solvers without random_seed
  std::unique_ptr<dist::GradientBuckets> buckets_;
  std::vector<int> bucket_slot_;  // per store index: its gradient's slot in buckets_, or -1
  bool last_micro_step_ = true;   // the backward pass that completes this step's gradients
  proto::SolverParameter sp_;
  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<Backend> gpu_;  // the nets' backend when training on a GPU
  Backend& net_backend() { return gpu_ ? *gpu_ : *backend_; }
  ParamStore store_;
  std::unique_ptr<Net> train_net_;
  std::vector<std::unique_ptr<Net>> test_nets_;
  std::vector<int> test_iters_;
  std::unique_ptr<Solver> solver_;
  std::unique_ptr<WeightFakeQuant> weight_quant_;  // --qat: weights on its grid in forward and backward
  std::unique_ptr<MagnitudePruning> pruning_;      // --prune
  std::unique_ptr<Teacher> teacher_;               // --teacher
  PruningSchedule prune_schedule_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::unique_ptr<Progress> progress_;
  std::string run_dir_, last_snapshot_, configuration_;
  uint64_t seed_ = 0;
  int64_t iter_ = 0, batch_ = 0, dataset_size_ = 0;
  bool debug_info_ = false;  // Caffe's debug_info (the solver's or the net's)
  double start_us_ = 0;
  std::map<std::string, double> last_test_;
};

nlohmann::json TrainerImpl::hardware_json() const {
  SysInfo si = query_sysinfo();
  return {{"cpu", si.cpu_model},
          {"logical_cpus", si.logical_cpus},
          {"physical_cores", si.physical_cores},
          {"isa", si.isa},
          {"onednn", onednn_version()},
          {"onednn_isa", onednn_isa()},
          {"memory_gb", si.memory_gb}};
}

void TrainerImpl::setup() {
  read_solver_file(opt_.solver, sp_);  // Caffe's solver and inline-net upgrades applied
  check_solver(sp_, opt_.solver);
  // The pruning schedule, checked before anything is loaded.
  const bool pruned = opt_.prune != 0 || opt_.prune_until >= 0 || opt_.prune_every > 0 || opt_.prune_from > 0;
  if (pruned) {
    PruningSchedule& s = prune_schedule_;
    s.sparsity = opt_.prune;
    s.begin = opt_.prune_from;
    s.end = opt_.prune_until >= 0 ? opt_.prune_until : sp_.max_iter() * 3 / 4;
    s.every = opt_.prune_every > 0 ? opt_.prune_every : std::max<int64_t>(1, (s.end - s.begin) / 20);
    s.scope = opt_.prune_scope;
    if (opt_.prune == 0) input_error("--prune-from, --prune-until and --prune-every go with --prune SPARSITY");
    s.check(sp_.max_iter());
  }
  if (opt_.teacher.empty() && !opt_.teacher_weights.empty()) input_error("--teacher-weights goes with --teacher NET");
  // An ONNX teacher carries its weights; a prototxt needs them.
  if (!opt_.teacher.empty() && opt_.teacher_weights.empty() && !opt_.teacher.ends_with(".onnx"))
    input_error("--teacher {}: give its trained weights with --teacher-weights", opt_.teacher);
  if (!opt_.teacher.empty() && !(opt_.temperature > 0.f && opt_.temperature <= 1e4f))
    input_error("--temperature must be in (0, 10000], got {}", opt_.temperature);
  note_solver_fields(sp_, opt_.solver);
  NetSources ns = load_nets(sp_, opt_.solver);
  if (opt_.global_batch) divide_train_batch(ns.train.param, comm_.size(), ns.train.source);

  // Resume continues in the snapshot's run directory unless told otherwise.
  TensorFile state;
  if (!opt_.snapshot.empty()) {
    if (!opt_.weights.empty()) input_error("give --weights or --snapshot, not both");
    state = load_safetensors(opt_.snapshot);
    if (!state.metadata.count("iter") || !state.metadata.count("weights"))
      input_error("{}: not a bakusoku solver state (missing iter/weights metadata)", opt_.snapshot);
  }
  if (sp_.random_seed() >= 0) {
    seed_ = static_cast<uint64_t>(sp_.random_seed());
  } else if (state.metadata.count("seed")) {
    seed_ = static_cast<uint64_t>(metadata_integer(state, "seed", opt_.snapshot));
  } else {
    seed_ = fallback_seed_;
  }
  run_dir_ = opt_.out_dir;
  if (run_dir_.empty() && !opt_.snapshot.empty())
    run_dir_ = fs::path(opt_.snapshot).parent_path().parent_path().string();
  if (run_dir_.empty()) {
    std::string name = ns.train.param.name().empty() ? "net" : ns.train.param.name();
    run_dir_ = (fs::path("runs") / (name + "-" + utc_timestamp())).string();
  }
  // A fresh run never writes into another run's directory (its metrics would mix);
  // resuming continues the directory it came from.
  // Only rank 0 writes the run directory; the other ranks read what it names.
  if (lead_) {
    if (opt_.snapshot.empty() && fs::exists(fs::path(run_dir_) / "metrics.jsonl"))
      input_error("{}: already holds a run (metrics.jsonl); choose another --out, or resume it with --snapshot",
                  run_dir_);
    make_run_dir(run_dir_);
    // What a writer killed mid-write left behind (the files it was replacing are intact).
    for (const fs::path& d : {fs::path(run_dir_), fs::path(run_dir_) / "snapshots"})
      if (int n = remove_stale_temporaries(d.string()))
        log::debug("{}: removed {} stale temporary file(s)", d.string(), n);
    log::set_file((fs::path(run_dir_) / "log.txt").string());
    log::info("Run directory: {}", run_dir_);
  }
  if (sp_.has_snapshot_prefix())
    log::debug("snapshot_prefix '{}' is not used: snapshots go to {}/snapshots", sp_.snapshot_prefix(), run_dir_);
  choose_gpu();

  // Ranks sharing a host share its cores.
  int threads = opt_.threads;
  if (threads == 0 && comm_.local_size() > 1) threads = std::max(1, query_sysinfo().logical_cpus / comm_.local_size());
  backend_ = std::make_unique<CpuBackend>(threads);
  proto::NetState train_state = sp_.train_state();
  train_state.set_phase(proto::TRAIN);
  // The TRAIN and TEST nets never run at the same time: one arena holds the activations and
  // gradients of all of them.
  NetOptions net_opt;
  net_opt.arena = std::make_shared<Arena>();
  net_opt.force_backward = ns.train.param.force_backward();
  if (opt_.sync_bn && comm_.size() > 1)
    net_opt.batch_stats_sum = [this](double* v, size_t n) { comm_.allreduce_sum(v, n); };
  // Quantization-aware training: the nets see int8-rounded activations and weights.
  // Distillation: the train net also learns the teacher's scores (its pass infers shapes,
  // which reads the data: the pin keeps it for the net built next).
  DatasetPin pin;
  size_t binarized_inputs = 0;
  auto graph_of = [&](const NetLoad& nl, const proto::NetState& state) {
    Graph g = build_caffe_graph(nl, state);
    if (opt_.qat == "int8") {  // binary and pow2 round the weights only
      const PassReport r = insert_fake_quant(g);
      log::debug("{}: {} FakeQuant node(s) inserted", g.name, r.changes.size());
    }
    if (opt_.qat == "xnor") {  // and binary inputs to the layers between the first and the last
      const PassReport r = insert_binarize(g);
      for (const std::string& line : r.changes) log::debug("{}: {}", g.name, line);
      if (state.phase() == proto::TRAIN) binarized_inputs = r.changes.size();
    }
    if (!opt_.teacher.empty() && state.phase() == proto::TRAIN)
      for (const std::string& line : insert_distillation(g, opt_.temperature, opt_.alpha).changes)
        log::info("Distillation: {}", line);
    return g;
  };
  train_net_ =
      std::make_unique<Net>(graph_of(ns.train, train_state), proto::TRAIN, store_, net_backend(), seed_, net_opt);
  net_opt.force_backward = false;
  net_opt.batch_stats_sum = nullptr;  // test passes split batches over ranks: no shared statistics
  // Caffe's solver prints the train net's statistics on display iterations, the test nets'
  // on every pass; bakusoku also takes the net's own debug_info, which Caffe's solver overrides.
  debug_info_ = sp_.debug_info() || ns.train.param.debug_info();
  for (size_t i = 0; i < ns.test.size(); ++i) {
    test_nets_.push_back(std::make_unique<Net>(graph_of(ns.test[i], ns.test_states[i]), proto::TEST, store_,
                                               net_backend(), seed_, net_opt));
    test_nets_.back()->set_debug_info(debug_info_);
    test_iters_.push_back(sp_.test_iter(static_cast<int>(i)));
  }
  log::debug("Train net:\n{}", train_net_->describe());
  log::debug("Activation and gradient arena: {:.1f} MB (train net plan {:.1f} MB)", net_opt.arena->size() / 1e6,
             train_net_->planned_bytes() / 1e6);
  solver_ = Solver::create(sp_, opt_.solver);
  if (pruned) {
    pruning_ = std::make_unique<MagnitudePruning>(store_, *train_net_, prune_schedule_);
    log::info("Pruning {} layer(s) to {:.1f}% zeros ({}) from iteration {} to {}, masks updated every {} iterations",
              pruning_->layers(), 100 * prune_schedule_.sparsity,
              prune_schedule_.scope == "layer"  ? "each layer on its own"
              : prune_schedule_.scope == "lamp" ? "ranked over all of them by LAMP score"
                                                : "ranked over all of them by magnitude",
              prune_schedule_.begin, prune_schedule_.end, prune_schedule_.every);
  }
  if (!opt_.qat.empty()) {
    const WeightGrid grid = weight_grid(opt_.qat);
    weight_quant_ = std::make_unique<WeightFakeQuant>(store_, *train_net_, grid, int8_weight_levels(),
                                                      grid == WeightGrid::binary && !opt_.qat_every_layer);
    if (grid == WeightGrid::int8)
      log::info(
          "Quantization-aware training (--qat int8): {} layer(s) see int8 weights ({} levels per side) and inputs",
          weight_quant_->layers(), int8_weight_levels());
    else
      log::info("Quantization-aware training (--qat {}): {} layer(s) see {} weights, one scale per output channel{}{}",
                opt_.qat, weight_quant_->layers(), grid == WeightGrid::binary ? "binary (+-mean |w|)" : "power-of-two",
                opt_.qat == "xnor"
                    ? fmt::format("; {} of them binary inputs (sign, straight-through gradient)", binarized_inputs)
                    : "",
                weight_quant_->float_keys().empty()
                    ? ""
                    : fmt::format("; {} stay float (the first and the last; --qat-every-layer rounds them too)",
                                  fmt::join(weight_quant_->float_keys(), ", ")));
  }
  std::tie(batch_, dataset_size_) = train_net_->data_extent();
  if (!opt_.teacher.empty()) attach_teacher(threads);
  if (dataset_size_ > 0 && dataset_size_ < comm_.size())
    input_error("{}: the training set has {} samples, fewer than the {} ranks: a rank would have none of its own",
                ns.train.source, dataset_size_, comm_.size());

  for (const std::string& w : initial_weights(sp_, opt_, opt_.solver)) {
    int n = load_weights(w, store_, opt_.reinit_mismatched);
    log::info("Initialised {} parameter blobs from {}", n, w);
  }
  if (!opt_.snapshot.empty()) {
    std::string wpath = (fs::path(opt_.snapshot).parent_path() / state.metadata["weights"]).string();
    load_weights(wpath, store_);
    solver_->load_state(state, store_, opt_.snapshot);
    iter_ = metadata_integer(state, "iter", opt_.snapshot);
    log::info("Resumed from {} at iteration {}", opt_.snapshot, iter_);
    const std::string metrics = (fs::path(run_dir_) / "metrics.jsonl").string();
    if (lead_)
      if (int n = drop_superseded_metrics(metrics, iter_))
        log::info("{}: dropped {} record(s) after iteration {}; this run writes them again", metrics, n, iter_);
  }
  if (pruning_) pruning_->start(iter_);  // a resumed run's zeros are its masks
  // What every rank must have the same of: the nets, the solver and the parameters' shapes.
  configuration_ = ns.train.param.DebugString();
  for (const NetLoad& t : ns.test) configuration_ += t.param.DebugString();
  configuration_ += sp_.DebugString();
  for (const Param& p : store_.all()) configuration_ += p.key + shape_str(p.data.shape()) + "\n";
  // Ranks must also lay out the same gradient buckets and scale the same way.
  configuration_ +=
      fmt::format("buckets {} {} sync_bn {} global_batch {} lr_scale {} {} qat {} {} prune {} {} {} {} {}\n",
                  opt_.first_bucket_mb, opt_.bucket_mb, opt_.sync_bn, opt_.global_batch, opt_.lr_scale,
                  opt_.warmup_iters, opt_.qat, opt_.qat_every_layer, prune_schedule_.sparsity, prune_schedule_.begin,
                  prune_schedule_.end, prune_schedule_.every, prune_schedule_.scope);
  if (teacher_)
    configuration_ +=
        fmt::format("teacher {} {} {} {}\n", opt_.teacher, opt_.teacher_weights, opt_.temperature, opt_.alpha);
  if (!lead_) return;

  // Copies of the definitions, and run.json, for the dashboard and for reproducing the run.
  auto copy_text = [&](const std::string& src, const std::string& name) {
    if (fs::exists(src)) write_file_atomic((fs::path(run_dir_) / name).string(), read_file(src, "prototxt"));
  };
  copy_text(opt_.solver, "solver.prototxt");
  copy_text(ns.train.source, "net.prototxt");
  nlohmann::json run = {{"version", BKS_VERSION},
                        {"command", opt_.command_line},
                        {"solver", opt_.solver},
                        {"net", ns.train.source},
                        {"net_name", ns.train.param.name()},
                        {"weights", opt_.weights},
                        {"resumed_from", opt_.snapshot},
                        {"start_iter", iter_},
                        {"max_iter", sp_.max_iter()},
                        {"seed", seed_},
                        {"threads", backend_->threads()},
                        {"device", gpu_ ? gpu_->describe() : "cpu"},
                        {"tf32", gpu_ != nullptr && opt_.tf32},
                        {"batch_size", batch_},
                        {"world_size", comm_.size()},
                        {"hosts", comm_.hosts()},
                        {"ranks_per_host", comm_.local_size()},
                        {"global_batch_size", batch_ * comm_.size()},
                        {"batch_rule", opt_.global_batch ? "global (--global-batch)" : "per rank"},
                        {"lr_scale", opt_.lr_scale},
                        {"sync_bn", opt_.sync_bn},
                        {"warmup_iters", opt_.warmup_iters},
                        {"qat", opt_.qat.empty() ? "none" : opt_.qat},
                        {"qat_float_layers", weight_quant_ ? weight_quant_->float_keys() : std::vector<std::string>{}},
                        {"prune", pruning_ ? nlohmann::json{{"sparsity", prune_schedule_.sparsity},
                                                            {"from", prune_schedule_.begin},
                                                            {"until", prune_schedule_.end},
                                                            {"every", prune_schedule_.every},
                                                            {"scope", prune_schedule_.scope}}
                                           : nlohmann::json("none")},
                        {"distill", teacher_ ? nlohmann::json{{"teacher", opt_.teacher},
                                                              {"teacher_weights", opt_.teacher_weights},
                                                              {"temperature", opt_.temperature},
                                                              {"alpha", opt_.alpha}}
                                             : nlohmann::json("none")},
                        {"iter_size", sp_.iter_size()},
                        {"dataset_size", dataset_size_},
                        {"solver_type", solver_->type()},
                        {"started_utc", utc_timestamp()},
                        {"hardware", hardware_json()}};
  write_file_atomic((fs::path(run_dir_) / "run.json").string(), run.dump(2) + "\n");
  metrics_ = std::make_unique<MetricsWriter>((fs::path(run_dir_) / "metrics.jsonl").string());
}

void TrainerImpl::test_all() {
  // Statistics layers keep (BatchNorm's, FakeQuant's ranges) are rank 0's: the ranks test one
  // set of weights.
  broadcast_params(false);
  if (weight_quant_) weight_quant_->quantize();
  for (size_t t = 0; t < test_nets_.size(); ++t) {
    Net& net = *test_nets_[t];
    const auto& outs = net.outputs();
    int64_t pass = sp_.test_interval() > 0 ? iter_ / sp_.test_interval() : 0;
    // Each rank runs its share of the pass's batches; the sums over ranks give the means a
    // single process would report.
    Evaluation ev = evaluate(net, test_iters_[t], pass * test_iters_[t], comm_.rank(), comm_.size());
    if (comm_.size() > 1) {
      std::vector<double> sums{ev.loss * ev.batches, static_cast<double>(ev.batches)};
      for (double m : ev.output_means) sums.push_back(m * ev.batches);
      comm_.allreduce_sum(sums.data(), sums.size());
      ev.loss = sums[0] / sums[1];
      for (size_t k = 0; k < ev.output_means.size(); ++k) ev.output_means[k] = sums[k + 2] / sums[1];
    }
    if (!lead_) continue;
    nlohmann::json rec = {{"time", since_start()},
                          {"iter", iter_},
                          {"epoch", epoch()},
                          {"phase", "test"},
                          {"lr", scaled_learning_rate(iter_)},
                          {"loss", ev.loss}};
    if (test_nets_.size() > 1) rec["test_net"] = t;
    std::string text = fmt::format("Test net #{} @ iter {}:", t, iter_);
    for (size_t k = 0; k < outs.size(); ++k) {
      double mean = ev.output_means[k];
      std::string name = net.graph().values[outs[k]].name;
      if (net.loss_weight(outs[k]) == 0.f) rec[json_number_key(name)] = mean;
      text += fmt::format(" {} = {:.4f}", name, mean);
      if (t == 0) last_test_[name] = mean;
    }
    metrics_->write(rec);
    progress_->line(text);
    log::to_file(text);
  }
  if (weight_quant_) weight_quant_->restore();
}

void TrainerImpl::attach_teacher(int threads) {
  teacher_ = std::make_unique<Teacher>(opt_.teacher, opt_.teacher_weights, batch_, threads);
  const Graph& g = train_net_->graph();
  // The teacher reads the student's blob of its input's name, else the first data layer's data.
  int in = g.find_value(teacher_->input_name());
  for (size_t n = 0; n < g.nodes.size() && in < 0; ++n)
    if (op_traits(g.nodes[n]).data_layer && !g.nodes[n].outputs.empty()) in = g.nodes[n].outputs[0];
  if (in < 0)
    input_error("--teacher {}: the student's net has no blob '{}' nor a data layer to give it", opt_.teacher,
                teacher_->input_name());
  const int scores = g.find_value(kTeacherScores);
  teacher_->check_matches(g.values[in].name, train_net_->value(in).shape(), train_net_->value(scores).shape());
  const int after = g.values[in].producer;
  train_net_->set_forward_hook([this, in, scores, after](int n) {
    if (n != after) return;
    if (train_net_->is_blocked(in))
      teacher_->run(train_net_->plain_copy(in).f32(), train_net_->value(scores).f32());
    else
      teacher_->run(train_net_->value(in).f32(), train_net_->value(scores).f32());
  });
}

void TrainerImpl::snapshot() {
  if (!lead_) return;
  fs::path dir = fs::path(run_dir_) / "snapshots";
  std::string wname = fmt::format("iter_{}.safetensors", iter_);
  std::string sname = fmt::format("iter_{}.solverstate", iter_);
  // Weights first: the state names them, so a state never points at a missing file.
  // Binary / pow2 weights are kept as floats: deploy rounds them as training did, all but
  // the layers training left float.
  std::map<std::string, std::string> grid_meta;
  if (opt_.qat == "binary" || opt_.qat == "pow2" || opt_.qat == "xnor") {
    grid_meta["weight_grid"] = opt_.qat;
    if (!weight_quant_->float_keys().empty())
      grid_meta["weight_grid_float"] = nlohmann::json(weight_quant_->float_keys()).dump();
  }
  save_weights((dir / wname).string(), store_, grid_meta);
  save_safetensors((dir / sname).string(), solver_->state(),
                   {{"format", "bakusoku-solverstate"},
                    {"iter", std::to_string(iter_)},
                    {"weights", wname},
                    {"seed", std::to_string(seed_)},
                    {"solver_type", solver_->type()}});
  last_snapshot_ = (dir / sname).string();
  log::info("Snapshot at iteration {}: {}", iter_, (dir / wname).string());
  if (int n = prune_snapshots(run_dir_, opt_.keep_snapshots))
    log::debug("Removed {} older snapshot(s), keeping the newest {}", n, opt_.keep_snapshots);
}

uint64_t TrainerImpl::configuration_hash() const {
  return fnv1a(configuration_) & ~(uint64_t{1} << 63);  // the top bit marks a failed rank
}

void TrainerImpl::setup_everywhere() {
  // Rank 0's seed serves ranks whose solver gives none: their data orders must agree.
  uint64_t job[2] = {std::random_device{}(),
                     (uint64_t{std::random_device{}()} << 32) ^ static_cast<uint64_t>(getpid())};
  comm_.broadcast(job, sizeof(job), 0);
  fallback_seed_ = job[0];
  if (comm_.size() == 1) return setup();
  // Ranks on one host read each dataset once, into memory they share (data/shared_dataset.h).
  if (comm_.local_size() > 1) share_datasets_between_processes(fmt::format("{:016x}", job[1]));
  if (!lead_) log::set_level(log::Level::warn);  // quiet unless something is wrong
  std::exception_ptr failed;
  int code = 0;
  try {
    setup();
  } catch (const InputError&) {
    failed = std::current_exception(), code = 2;
  } catch (...) {
    failed = std::current_exception(), code = 1;
  }
  const uint64_t kFailed = uint64_t{1} << 63;
  std::vector<uint64_t> all = comm_.allgather(failed ? kFailed | static_cast<uint64_t>(code) : configuration_hash());
  // Every rank has opened its datasets by now: their shared files can go (the mappings stay).
  remove_shared_dataset_files();
  int failures = 0, first_code = 0;
  for (uint64_t v : all)
    if (v & kFailed) first_code = first_code ? first_code : static_cast<int>(v & 0xff), ++failures;
  if (failures) {
    dist::mark_error_agreed();
    // All failing means the same files failed everywhere: rank 0 says it once.
    const bool report = failed && (failures < comm_.size() || lead_);
    if (report) std::rethrow_exception(failed);
    throw dist::QuietExit{failed ? code : first_code};
  }
  std::string differ;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  if (!differ.empty()) {
    dist::mark_error_agreed();
    if (!lead_) throw dist::QuietExit{2};
    input_error(
        "{}: rank(s) {} loaded a different net, solver or parameter shapes than rank 0; every rank must train the "
        "same files",
        opt_.solver, differ);
  }
  broadcast_params(true);
  broadcast_params(false);
  prepare_gradient_buckets();
}

void TrainerImpl::broadcast_params(bool learnable) {
  if (comm_.size() == 1) return;
  for (Param& p : store_.all())
    if (p.learnable == learnable) comm_.broadcast(p.data.f32(), p.data.numel() * sizeof(float), 0);
}

void TrainerImpl::prepare_gradient_buckets() {
  std::vector<dist::GradientSlot> slots;
  bucket_slot_.assign(static_cast<size_t>(store_.size()), -1);
  for (int idx : train_net_->grad_ready_order()) {
    Param& p = store_.at(idx);
    // Statistics a layer keeps itself (BatchNorm's) have no gradient to average.
    if (bucket_slot_[static_cast<size_t>(idx)] >= 0 || !p.learnable || !p.grad.defined()) continue;
    bucket_slot_[static_cast<size_t>(idx)] = static_cast<int>(slots.size());
    slots.push_back({nullptr, static_cast<size_t>(p.grad.numel())});
  }
  dist::BucketOptions bo;
  bo.first_bucket_bytes = static_cast<size_t>(opt_.first_bucket_mb * 1e6);
  bo.bucket_bytes = static_cast<size_t>(opt_.bucket_mb * 1e6);
  bo.debug = opt_.dist_debug;
  buckets_ = std::make_unique<dist::GradientBuckets>(comm_, std::move(slots), bo);
  // The gradients live in their buckets: backward writes them where they are reduced.
  for (size_t idx = 0; idx < bucket_slot_.size(); ++idx)
    if (int slot = bucket_slot_[idx]; slot >= 0) {
      Param& p = store_.at(static_cast<int>(idx));
      p.grad.bind(buckets_->storage(slot), buckets_->byte_offset(slot), p.grad.shape());
    }
  log::info(
      "Data-parallel over {} ranks on {} host(s): batch {} per rank, {} in all; gradients averaged in {} "
      "bucket(s)",
      comm_.size(), comm_.hosts(), batch_, batch_ * comm_.size(), buckets_->buckets());
  train_net_->set_grad_ready_hook([this](int idx) {
    if (!last_micro_step_ || bucket_slot_[static_cast<size_t>(idx)] < 0) return;
    Param& p = store_.at(idx);
    if (!p.grad_written) p.grad.zero(), p.grad_written = true;
    buckets_->ready(bucket_slot_[static_cast<size_t>(idx)]);
  });
}

float TrainerImpl::scaled_learning_rate(int64_t iter) const {
  const float rate = learning_rate(sp_, iter);
  if (opt_.lr_scale != "linear") return rate;
  const double ranks = comm_.size();
  const double ramp = opt_.warmup_iters > 0 ? std::min(1.0, static_cast<double>(iter) / opt_.warmup_iters) : 1.0;
  return static_cast<float>(rate * (1.0 + (ranks - 1.0) * ramp));
}

bool TrainerImpl::stop_requested() const { return buckets_ ? ranks_stop_ : interrupt_requested(); }

TrainResult TrainerImpl::run() {
  start_us_ = now_us();
  setup_everywhere();
  const int64_t max_iter = sp_.max_iter();
  const int64_t display = sp_.display() > 0 ? sp_.display() : 100;
  progress_ = std::make_unique<Progress>(opt_.progress && lead_, max_iter, display, !dist::launched_by_mpi());
  const std::string unit = train_net_->data_unit();
  if (unit != "images") progress_->set_unit(unit);
  log::info("Training {} for {} iterations: {} solver, batch {} x iter_size {}, {} threads, seed {}",
            train_net_->graph().name, max_iter, solver_->type(), batch_, sp_.iter_size(), backend_->threads(), seed_);

  TrainResult res;
  std::deque<float> recent;
  double recent_sum = 0;
  double train_us = 0, window_us = 0;
  int64_t window_iters = 0, start_iter = iter_;
  const int64_t images_per_iter = batch_ * sp_.iter_size() * comm_.size();
  double ips = 0;
  const auto& params = train_net_->param_indices();

  while (iter_ < max_iter) {
    if (sp_.test_interval() > 0 && iter_ % sp_.test_interval() == 0 && (iter_ > 0 || sp_.test_initialization()) &&
        !test_nets_.empty())
      test_all();
    if (stop_requested()) break;

    double t0 = now_us();
    train_net_->set_debug_info(debug_info_ && sp_.display() > 0 && iter_ % sp_.display() == 0);
    store_.clear_grads();
    if (weight_quant_) weight_quant_->quantize();
    float loss = 0;
    for (int k = 0; k < sp_.iter_size(); ++k) {
      // Rank r of N reads batch N * s + r of the data a single process reads as batch s:
      // together the ranks read what one process with N times the batch would.
      loss += train_net_->forward((iter_ * sp_.iter_size() + k) * comm_.size() + comm_.rank());
      last_micro_step_ = k + 1 == sp_.iter_size();
      train_net_->backward();
    }
    if (weight_quant_) weight_quant_->restore();  // the solver updates the float weights
    loss /= static_cast<float>(sp_.iter_size());
    if (buckets_) {
      buckets_->finish();
      // One small reduction per step: the mean loss, and whether any rank was interrupted.
      double agree[2] = {loss, interrupt_requested() ? 1.0 : 0.0};
      comm_.allreduce_sum(agree, 2);
      loss = static_cast<float>(agree[0] / comm_.size());
      ranks_stop_ = agree[1] > 0;
    }
    if (!std::isfinite(loss)) {
      dist::mark_error_agreed();  // every rank has the same (averaged) loss: rank 0 says it
      if (!lead_) throw dist::QuietExit{1};
      progress_->finish();
      runtime_error("training diverged: loss is {} at iteration {}; stopped without saving{}", loss, iter_,
                    last_snapshot_.empty() ? std::string() : "; the last good snapshot is " + last_snapshot_);
    }
    store_.zero_unwritten_grads();
    float rate = scaled_learning_rate(iter_);
    solver_->step(store_, params, rate, iter_);
    if (train_net_->debug_info()) train_net_->update_debug_info();
    double dt = now_us() - t0;
    train_us += dt;
    window_us += dt;
    ++window_iters;
    ++iter_;
    if (pruning_) pruning_->after_step(iter_);  // pruned weights stay zero through the update

    recent.push_back(loss);
    recent_sum += loss;
    if (static_cast<int>(recent.size()) > sp_.average_loss()) {
      recent_sum -= recent.front();
      recent.pop_front();
    }
    float smoothed = static_cast<float>(recent_sum / recent.size());
    if (window_us > 0) ips = window_iters * images_per_iter / (window_us / 1e6);
    double eta = (iter_ - start_iter) > 0 ? train_us / 1e6 / (iter_ - start_iter) * (max_iter - iter_) : -1;
    if (iter_ % display == 0 || iter_ == max_iter) {
      nlohmann::json rec = {{"time", since_start()}, {"iter", iter_}, {"epoch", epoch()},
                            {"phase", "train"},      {"lr", rate},    {"loss", smoothed},
                            {"images_per_s", ips}};
      if (pruning_) rec["weight_sparsity"] = pruning_->sparsity();
      // Scalar outputs (a train net's accuracy), averaged over ranks.
      std::vector<int> scalars;
      std::vector<double> values;
      for (int v : train_net_->outputs())
        if (train_net_->loss_weight(v) == 0.f && train_net_->value(v).numel() == 1)
          scalars.push_back(v), values.push_back(train_net_->host_value(v).f32()[0]);
      comm_.allreduce_sum(values.data(), values.size());
      for (size_t k = 0; k < scalars.size(); ++k)
        rec[json_number_key(train_net_->graph().values[scalars[k]].name)] = values[k] / comm_.size();
      if (lead_) metrics_->write(rec);
      window_us = 0;
      window_iters = 0;
    }
    progress_->update(iter_, smoothed, rate, ips, eta);
    if (sp_.snapshot() > 0 && iter_ % sp_.snapshot() == 0) snapshot();
  }

  res.interrupted = iter_ < max_iter;
  if (res.interrupted) {
    progress_->finish();
    snapshot();
    progress_->line(fmt::format("Interrupted at iteration {}; resume with --snapshot {}", iter_, last_snapshot_));
  } else {
    if (sp_.snapshot_after_train() && (sp_.snapshot() == 0 || iter_ % sp_.snapshot() != 0)) snapshot();
    if (sp_.test_interval() > 0 && iter_ % sp_.test_interval() == 0 && !test_nets_.empty()) test_all();
    progress_->finish();
  }
  res.run_dir = run_dir_;
  res.iterations = iter_;
  res.trained_iterations = iter_ - start_iter;
  res.wall_s = since_start();
  res.train_s = train_us / 1e6;
  res.images_per_s = train_us > 0 ? res.trained_iterations * images_per_iter / res.train_s : 0;
  res.item_unit = unit;
  res.last_snapshot = last_snapshot_;
  res.last_test = last_test_;
  res.world_size = comm_.size();
  res.exposed_comm_s = buckets_ ? buckets_->exposed_wait_s() : 0.0;
  if (buckets_ && res.train_s > 0)
    log::info("Gradient reductions: {:.2f} s waited for after backward, {:.1f}% of the {:.1f} s of training",
              res.exposed_comm_s, 100 * res.exposed_comm_s / res.train_s, res.train_s);
  log::set_file("");
  return res;
}

}  // namespace

void TrainerImpl::choose_gpu() {
  const bool asked = opt_.gpu >= 0;
  const bool solver_asks = opt_.gpu == TrainOptions::kAsSolverSays && sp_.has_solver_mode() &&
                           sp_.solver_mode() == proto::SolverParameter::GPU;
  if (!asked && !solver_asks) return;
  const int index = asked ? opt_.gpu : sp_.device_id();
  const std::string why_not = opt_.teacher.empty() ? gpu_problem(index) : "--teacher runs on the CPU only so far";
  if (!why_not.empty()) {
    if (asked) input_error("--gpu {}: {} (--gpu -1 trains on the CPU)", opt_.gpu, why_not);
    if (lead_) log::warn("{}: solver_mode GPU, but {}: training on the CPU", opt_.solver, why_not);
    return;
  }
  gpu_ = make_gpu_backend(index, opt_.tf32);
  if (lead_) log::info("Training on {}", gpu_->describe());
}

TrainResult train(const TrainOptions& opt) { return TrainerImpl(opt).run(); }

}  // namespace bks
