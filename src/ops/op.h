// The op contract. An op type has one definition (ops/op_def.h: arity, shape inference,
// parameters, gradient facts, traits) and kernels that compute it, registered per (type,
// backend) in an ordered list: the first whose supports() accepts the node runs it.
//
// Kernel lifecycle: constructed once per node; reshape() with the node's shapes (again
// whenever they change); prepare() after the runtime set layouts, to build what runs
// (oneDNN primitives are created there, never per step); forward()/backward() every step.
// Kernels overwrite their outputs and gradients; summing gradients of shared values and
// shared parameters is the executor's job.

#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "graph/graph.h"
#include "ops/op_def.h"

namespace bks {

// Sums `n` doubles in place over the ranks of a data-parallel run (every rank calls it with
// the same n at the same point); what SyncBatchNorm reduces its statistics with.
using CrossRankSum = std::function<void(double* values, size_t n)>;

struct OpInit {
  const Node& node;
  std::string where;  // error prefix naming file, line, layer
  Phase phase;
  uint64_t seed;  // run seed; ops derive their own streams from it
  Backend& backend;
  // The parameters never change after the first forward (inference sessions): ops may keep
  // them in their kernels' layouts, converted once.
  bool constant_params = false;
  // Set in a data-parallel run that asked for synchronised batch statistics (--sync-bn):
  // normalisation layers compute theirs over all ranks' batches. Null: this batch only.
  const CrossRankSum* batch_stats_sum = nullptr;
  // NetOptions::blocked_activations: convolutions prefer channel-blocked outputs.
  bool blocked_activations = false;
  // The arithmetic the node computes in (deploy sets it; kernels are registered for the
  // precisions they compute).
  Precision precision() const { return node.deploy.precision; }
};

struct OpCall {
  // Which batch this is: data layers read batch `step`, random ops derive their stream from
  // it, so a run resumed at step k sees exactly what an uninterrupted run saw.
  int64_t step = 0;
  std::vector<const Tensor*> in;
  std::vector<Tensor*> out;
  std::vector<Tensor*> params;
  // Backward only. A null entry means that gradient is not needed.
  std::vector<const Tensor*> out_grad;
  std::vector<Tensor*> in_grad;
  std::vector<Tensor*> param_grad;
};

// Computes one node on one backend.
class Kernel {
 public:
  explicit Kernel(const OpInit& init);
  virtual ~Kernel();

  // The node's input and output shapes, after shape inference (and whenever they change),
  // before layouts are planned and prepare() runs.
  virtual void reshape(const std::vector<Shape>& in, const std::vector<Shape>& out) {}
  // Builds what runs for the shapes last given to reshape() and the layouts last given to
  // set_layouts() (plain when never set).
  virtual void prepare(const std::vector<Shape>& in, const std::vector<Shape>& out) {}

  virtual LayoutRule layout_rule() const { return LayoutRule::plain_only; }
  // any_in_any_out kernels: the layout output `j` would best be in, given the input
  // layouts (an empty desc means plain). Called after reshape().
  virtual dnnl::memory::desc preferred_output_layout(int j, const std::vector<dnnl::memory::desc>& in) { return {}; }
  // Set by the runtime before prepare(): the layout of every input and output (its data and
  // its gradient alike). Empty descs mean plain.
  void set_layouts(std::vector<dnnl::memory::desc> in, std::vector<dnnl::memory::desc> out) {
    in_layout_ = std::move(in);
    out_layout_ = std::move(out);
  }
  void set_needs_input_grad(std::vector<bool> needs) { needs_in_grad_ = std::move(needs); }
  // Inference kernels that can add their result onto what output 0's buffer holds: the
  // input whose values they would otherwise read and add (OpFacts::output_adds_onto_input),
  // or -1. The runtime says before prepare() whether the plan put output 0 in that input's
  // buffer (then the input's values are already there when forward() runs).
  virtual int output_adds_onto_input() const { return -1; }
  void set_output_in_input_buffer(bool b) { output_in_input_buffer_ = b; }

  virtual void forward(OpCall& c) = 0;
  virtual void backward(OpCall& c);
  // Ops whose outputs' batch depends on their input data (OpFacts::batch_from_data, e.g.
  // Filter): the batch the next forward() will write, from c.in. The executor calls it
  // before forward() and reshapes the outputs, and every node they reach, to it.
  virtual int64_t output_batch(const OpCall& c) { return -1; }
  // Data layers: samples in their dataset (for epochs); 0 for every other op.
  virtual int64_t dataset_size() const { return 0; }
  // Data layers: the items one batch holds, for throughput and epochs (0: axis 0 of the first
  // output; dataset_size() then counts in the same items), and what they are.
  virtual int64_t items_per_batch() const { return 0; }
  virtual const char* item_unit() const { return "images"; }
  // Which implementation runs (logged with --verbose; never a silent slow path).
  virtual std::string kernel_name() const { return "reference"; }
  // What `time`, `bench` and --verbose show: kernel_name(), followed by "oneDNN ref (slow)"
  // and what it is when prepare() built a oneDNN reference primitive (the runtime watches
  // prepare() and records them here), whichever kernel did.
  std::string reported_name() const;
  void set_slow_paths(std::vector<std::string> s) { slow_paths_ = std::move(s); }
  const std::vector<std::string>& slow_paths() const { return slow_paths_; }
  // What autotuning chose, saved as the node's deploy.kernel ("" when nothing was).
  virtual std::string tuning_decision() const { return ""; }

  const std::string& name() const { return name_; }
  const std::string& where() const { return where_; }
  Phase phase() const { return phase_; }

 protected:
  template <class... A>
  [[noreturn]] void fail(fmt::format_string<A...> f, A&&... a) const {
    throw InputError(where_ + ": " + fmt::format(f, std::forward<A>(a)...));
  }
  using ChannelSplit = OpContext::ChannelSplit;
  ChannelSplit split_channels(const Shape& s) const;

  // Whether backward must produce input i's gradient (set by the runtime before prepare();
  // true when never set), so kernels that would only serve unused gradients are not built.
  bool needs_input_grad(int i) const { return i >= static_cast<int>(needs_in_grad_.size()) || needs_in_grad_[i]; }
  // The layout of input i / output j for a tensor of shape s: the runtime's choice, or plain.
  dnnl::memory::desc in_md(int i, const Shape& s) const;
  dnnl::memory::desc out_md(int j, const Shape& s) const;
  OpContext context() const { return OpContext{node_, where_, phase_}; }

  const Node& node_;
  std::string name_;
  std::string where_;
  std::vector<dnnl::memory::desc> in_layout_, out_layout_;
  std::vector<bool> needs_in_grad_;
  bool output_in_input_buffer_ = false;  // see set_output_in_input_buffer()
  Phase phase_;
  uint64_t seed_;
  Backend& backend_;
  bool constant_params_ = false;
  bool bf16_ = false;

 private:
  std::vector<std::string> slow_paths_;
};

using KernelFactory = std::function<std::unique_ptr<Kernel>(const OpInit&)>;

// Kernels by (op type, device, precision), in order of preference.
class KernelRegistry {
 public:
  static KernelRegistry& get();
  struct Entry {
    std::string type;
    DeviceKind device;
    std::string name;                             // "oneDNN", "reference", ...
    int priority;                                 // higher first; reference kernels lowest
    std::function<bool(const OpInit&)> supports;  // null: every node
    KernelFactory make;
    std::vector<Precision> precisions{Precision::fp32};  // what it computes in
    bool computes(Precision p) const { return std::find(precisions.begin(), precisions.end(), p) != precisions.end(); }
  };
  void add(Entry e);
  // The preferred kernel for init.node on init.backend's device in the node's precision;
  // InputError naming the node when its type is unknown or no kernel supports it.
  std::unique_ptr<Kernel> create(const OpInit& init) const;
  // The entries for a type, in order of preference.
  std::vector<const Entry*> entries(const std::string& type) const;
  bool has(const std::string& type) const;
  // What builds a kernel for a node that no kernel of `device` supports (the CUDA layer's
  // runs the CPU kernel on host copies and says so in its name); without one, that is an
  // error naming the layer and the device.
  void set_fallback(DeviceKind device, KernelFactory make);
  // What `--kernel TYPE=NAME` asks: nodes of `type` run the kernel registered as `name`
  // (an InputError naming the layer where that kernel cannot run one) instead of the
  // preferred one; for measuring one kernel against another. InputError at once when the
  // type or the name is unknown.
  void prefer(const std::string& type, const std::string& name);

 private:
  std::vector<Entry> entries_;
  std::vector<std::pair<std::string, std::string>> preferred_;  // (type, kernel name)
  std::vector<std::pair<DeviceKind, KernelFactory>> fallbacks_;
};

struct KernelRegistrar {
  explicit KernelRegistrar(KernelRegistry::Entry e) { KernelRegistry::get().add(std::move(e)); }
};

#define BKS_REGISTER_KERNEL_IMPL2(type, dev, cls, name, priority, supports, precisions, line) \
  static ::bks::KernelRegistrar bks_kernel_registrar_##line(                                  \
      ::bks::KernelRegistry::Entry{type, dev, name, priority, supports,                       \
                                   [](const ::bks::OpInit& i) { return std::make_unique<cls>(i); }, precisions})
#define BKS_REGISTER_KERNEL_IMPL(type, dev, cls, name, priority, supports, precisions, line) \
  BKS_REGISTER_KERNEL_IMPL2(type, dev, cls, name, priority, supports, precisions, line)
// Registers a kernel class for an op type on a device, computing in fp32. Among the kernels
// for the node's precision whose `supports` (a callable taking const OpInit&, or nullptr for
// all nodes) accepts a node, the highest `priority` runs it; reference kernels register
// with kReferencePriority.
#define BKS_REGISTER_KERNEL(type, dev, cls, name, priority, supports) \
  BKS_REGISTER_KERNEL_IMPL(type, dev, cls, name, priority, supports, {::bks::Precision::fp32}, __LINE__)
// The same for a kernel computing in each of `precisions` (a braced list of Precision).
#define BKS_REGISTER_KERNEL_FOR(type, dev, cls, name, priority, supports, ...)                                    \
  BKS_REGISTER_KERNEL_IMPL(type, dev, cls, name, priority, supports, (std::vector<::bks::Precision> __VA_ARGS__), \
                           __LINE__)
constexpr int kReferencePriority = 0;

}  // namespace bks
