// The op contract. One op = a schema (arity, shape inference, declared parameter blobs,
// which inputs take gradients) plus forward and backward kernels for a backend.
//
// Lifecycle: constructed once per node; infer() whenever input shapes change; prepare()
// after infer() to build kernels (oneDNN primitives are created there, never per step);
// forward()/backward() every step. Kernels overwrite their outputs and gradients; summing
// gradients of shared values and shared parameters is the executor's job.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "graph/graph.h"
#include "backend/backend.h"

namespace bks {

struct ParamDecl {
  Shape shape;
  proto::FillerParameter filler;
  // Blobs the op updates itself (BatchNorm statistics) take no gradient and no solver step.
  bool learnable = true;
};

struct OpInit {
  const Node& node;
  std::string where;  // error prefix naming file, line, layer
  Phase phase;
  uint64_t seed;      // run seed; ops derive their own streams from it
  Backend& backend;
  // The parameters never change after the first forward (inference sessions): ops may keep
  // them in their kernels' layouts, converted once.
  bool constant_params = false;
  // Inference in bfloat16: convolutions and inner products compute in bf16 (values between
  // ops stay f32 and are converted at each such op).
  bool bf16 = false;
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

class Op {
 public:
  explicit Op(const OpInit& init);
  virtual ~Op();

  // Arity: [min, max] inputs and outputs; -1 for unbounded.
  virtual int min_inputs() const = 0;
  virtual int max_inputs() const { return min_inputs(); }
  virtual int min_outputs() const { return 1; }
  virtual int max_outputs() const { return min_outputs(); }

  // Output shapes from input shapes. Throws InputError (via fail()) on bad shapes.
  virtual void infer(const std::vector<Shape>& in, std::vector<Shape>& out) = 0;
  // The parameter blobs in Caffe's order (weights 0, bias 1, ...), given the input shapes.
  virtual std::vector<ParamDecl> declare_params(const std::vector<Shape>& in) { return {}; }
  // Builds kernels for the shapes last given to infer() and the layouts last given to
  // set_layouts() (plain when never set).
  virtual void prepare(const std::vector<Shape>& in, const std::vector<Shape>& out) {}

  virtual LayoutRule layout_rule() const { return LayoutRule::plain_only; }
  // any_in_any_out ops: the layout output `j` would best be in, given the input layouts
  // (an empty desc means plain). Called after infer().
  virtual dnnl::memory::desc preferred_output_layout(int j, const std::vector<dnnl::memory::desc>& in) { return {}; }
  // Set by the runtime before prepare(): the layout of every input and output (its data and
  // its gradient alike). Empty descs mean plain.
  void set_layouts(std::vector<dnnl::memory::desc> in, std::vector<dnnl::memory::desc> out) {
    in_layout_ = std::move(in);
    out_layout_ = std::move(out);
  }
  void set_needs_input_grad(std::vector<bool> needs) { needs_in_grad_ = std::move(needs); }

  virtual void forward(OpCall& c) = 0;
  virtual void backward(OpCall& c);
  virtual bool has_backward() const { return true; }
  virtual bool can_propagate_to(int input) const { return true; }
  // Output may share the input's buffer (Caffe's in-place layers).
  virtual bool allows_inplace() const { return false; }
  // Backward reads the op's own output (so nothing may overwrite it in place).
  virtual bool backward_reads_output() const { return false; }
  // Backward reads the op's inputs (so an in-place successor may not overwrite them, and
  // the memory planner keeps them alive until then).
  virtual bool backward_reads_input() const { return true; }
  // Per input, when inputs differ (default: backward_reads_input() for all).
  virtual bool backward_reads_input_at(int input) const { return backward_reads_input(); }
  virtual float default_loss_weight() const { return 0.f; }
  // The op's output is a reshaped view of its input (Flatten, Reshape): no data moves when
  // the runtime lets them share a buffer.
  virtual bool output_is_view() const { return false; }
  // Concat: the element offset of each input inside the output when every input is one
  // contiguous run of it (nothing before the concatenation axis, e.g. batch-1 inference), so
  // the runtime may have producers write straight into the output; empty otherwise.
  virtual std::vector<int64_t> input_runs_in_output() const { return {}; }
  // Outputs are filled from outside the graph (Input layer): never overwritten in place.
  virtual bool is_external_input() const { return false; }
  // Data layers: samples in their dataset (for epochs); 0 for every other op.
  virtual int64_t dataset_size() const { return 0; }
  // Which implementation runs (logged with --verbose; never a silent slow path).
  virtual std::string kernel_name() const { return "reference"; }
  // What autotuning chose, to be saved as the layer's kernel_choice ("" when nothing was).
  virtual std::string tuning_decision() const { return ""; }

  const std::string& name() const { return name_; }
  const std::string& where() const { return where_; }
  Phase phase() const { return phase_; }

 protected:
  template <class... A>
  [[noreturn]] void fail(fmt::format_string<A...> f, A&&... a) const {
    throw InputError(where_ + ": " + fmt::format(f, std::forward<A>(a)...));
  }
  void expect_ndim(const Shape& s, int lo, int hi, const char* what) const;
  // Views an (N, C, ...) bottom as N x C x spatial; fails with fewer than 2 axes.
  struct ChannelSplit {
    int64_t n, c, spatial;
  };
  ChannelSplit split_channels(const Shape& s) const;
  // The INT8 thresholds deploy gave this layer (int8_input_threshold, int8_output_threshold;
  // 0 when absent), checked: positive, inference only, an output one only with an input one.
  void read_int8_thresholds(const OpInit& init, float& in, float& out) const;

  // Whether backward must produce input i's gradient (set by the runtime before prepare();
  // true when never set), so kernels that would only serve unused gradients are not built.
  bool needs_input_grad(int i) const { return i >= static_cast<int>(needs_in_grad_.size()) || needs_in_grad_[i]; }
  // The layout of input i / output j for a tensor of shape s: the runtime's choice, or plain.
  dnnl::memory::desc in_md(int i, const Shape& s) const;
  dnnl::memory::desc out_md(int j, const Shape& s) const;

  std::string name_;
  std::string where_;
  std::vector<dnnl::memory::desc> in_layout_, out_layout_;
  std::vector<bool> needs_in_grad_;
  Phase phase_;
  uint64_t seed_;
  Backend& backend_;
  bool constant_params_ = false;
  bool bf16_ = false;
};

using OpFactory = std::function<std::unique_ptr<Op>(const OpInit&)>;

class OpRegistry {
 public:
  static OpRegistry& get();
  void add(const std::string& type, DeviceKind dev, OpFactory f);
  // Throws InputError naming the node's file and line when the type is unknown.
  std::unique_ptr<Op> create(const OpInit& init) const;
  bool has(const std::string& type) const;
  std::vector<std::string> types() const;

 private:
  std::vector<std::tuple<std::string, DeviceKind, OpFactory>> entries_;
};

struct OpRegistrar {
  OpRegistrar(const char* type, DeviceKind dev, OpFactory f) { OpRegistry::get().add(type, dev, std::move(f)); }
};

#define BKS_REGISTER_OP_IMPL2(type, cls, line) \
  static ::bks::OpRegistrar bks_registrar_##line(  \
      type, ::bks::DeviceKind::cpu, [](const ::bks::OpInit& i) { return std::make_unique<cls>(i); })
#define BKS_REGISTER_OP_IMPL(type, cls, line) BKS_REGISTER_OP_IMPL2(type, cls, line)
// Registers a CPU kernel class for a Caffe layer type.
#define BKS_REGISTER_OP(type, cls) BKS_REGISTER_OP_IMPL(type, cls, __LINE__)

}  // namespace bks
