// An op's definition: what an op type is, apart from any kernel that computes it.
//
// One OpDef per op type, stateless, registered by type name: arity, shape inference,
// parameter declarations, how gradients and buffers flow through it (OpFacts), and traits
// that graph passes ask instead of comparing type names. Kernels (ops/kernel.h) compute it
// on a backend; shape inference, verification and every graph pass need only this.
#pragma once

#include <fmt/format.h>

#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "core/tensor.h"
#include "graph/graph.h"

namespace bks {

struct ParamDecl {
  Shape shape;
  FillerSpec filler;
  // Blobs the op updates itself (BatchNorm statistics) take no gradient and no solver step.
  bool learnable = true;
};

// What the planner (runtime/plan.h) needs to know about one node's op. The op's definition
// fills the first part; the net adds what depends on its parameters and kernels.
struct OpFacts {
  bool has_backward = true;
  bool allows_inplace = false;                // the output may share the input's buffer
  bool backward_reads_input = true;           // backward reads some input
  std::vector<bool> reads_input_in_backward;  // per input (empty: backward_reads_input)
  bool backward_reads_output = false;
  std::vector<bool> can_propagate_to;  // per input (empty: all)
  bool output_is_view = false;         // output 0 is a reshaped view of input 0
  bool external_input = false;         // filled by the caller (Input layer)
  // Concat: each input's element offset in the output when all are contiguous runs of it.
  std::vector<int64_t> input_runs_in_output;
  // An any_in_any_out op whose plain output wants plain inputs, written straight into it
  // (Concat); a blocked output converts inputs in other layouts itself.
  bool plain_output_takes_plain_inputs = false;
  float default_loss_weight = 0.f;
  // The outputs' axis 0 depends on the input data (Filter): infer() gives its largest value,
  // and the kernel's output_batch() the one each forward writes.
  bool batch_from_data = false;
  // Filled by the net:
  // The kernel can add its output onto the values already in the output's buffer, so the
  // output may share input i's buffer when nothing reads that input after the node (a
  // residual sum fused into a convolution at inference); -1: no such input.
  int output_adds_onto_input = -1;
  bool learnable = false;                           // has a parameter that takes gradient steps
  LayoutRule layout_rule = LayoutRule::plain_only;  // the chosen kernel's
};

// Properties graph passes rewrite by (so no pass names an op type).
// How an op relates its inputs' channels (axis 1) to its outputs' (structured pruning,
// engine/channel_pruning.h, follows channels through a graph by it).
enum class ChannelFlow {
  blocks,       // any other way: the channels that reach it must stay as they are
  per_channel,  // output channel c reads channel c of every input (which agree) and its
                // blobs' entries c (a blob of one entry serves every channel)
  mixes,        // reads every input channel through its weights' axis 1 (InnerProduct:
                // its columns) and writes channels of its own (weights' axis 0, bias)
  concat,       // the output's channels are the inputs' channels one after another
  flatten,      // a 2-D output whose axis 1 is each input channel's values in turn
};

struct OpTraits {
  bool training_only = false;  // inference graphs drop it (Dropout, Accuracy, Silence)
  bool data_layer = false;     // reads a dataset; inference graphs take an Input instead
  bool loss = false;           // a training loss; inference keeps its prediction (see below)
  // A loss whose inference form is another op on the same first input (SoftmaxWithLoss ->
  // Softmax): that op's type; empty when inference drops the loss.
  std::string inference_form;
  bool elementwise = false;     // y[i] = f(x[i])
  bool external_input = false;  // filled by the caller
  // Weighted: a Convolution or InnerProduct whose weights' first axis is its output
  // channels, with a bias (blob 1) when bias_term; takes fused post-ops and int8 kernels.
  bool weighted_linear = false;
  bool convolution = false;  // of those, a convolution (padding, geometry)
  // y = a[c] * x + b[c] per channel at inference (BatchNorm with stats, Scale): folds into
  // a weighted_linear producer.
  bool per_channel_affine = false;
  bool fusable_activation = false;  // a ReLU that can become a producer's post-op
  bool residual_sum = false;        // an Eltwise SUM of two branches with unit coefficients
  bool max_pooling = false;         // keeps its input's scale (int8 stays int8 through it)
  // At inference it reads an int8 input (deploy.int8_input_threshold) and writes f32: an
  // average pooling, whose mean of levels is dequantized once per output.
  bool averages_int8 = false;
  // At inference bf16 inputs give a bf16 output (a Pooling on oneDNN's kernel, a Concat of
  // channels-last inputs) or an f32 one: bf16 values may flow through it to bf16 readers.
  bool passes_bf16 = false;
  // An item along axis 0 depends on the others, or on where it sits (attention over time,
  // positions): a batch cannot run in parts, and `sample` feeds such a net whole windows.
  bool mixes_axis0 = false;
};

// Facts of an op nothing flows back through (data layers, metrics, Silence).
OpFacts no_backward_facts();
// Facts of a loss over (prediction, target, ...): weight 1, a gradient for the prediction only.
OpFacts loss_facts(size_t inputs);
// Traits with the given flags set, e.g. traits_with({&OpTraits::training_only}).
OpTraits traits_with(std::initializer_list<bool OpTraits::*> flags);
// `n` becomes a parameterless op of `type` with the same name (a loss's inference form).
void become(Node& n, const std::string& type);

// The node an OpDef is asked about, and how to name it in errors.
struct OpContext {
  const Node& node;
  std::string where;  // "file:line: layer 'name' (Type)"
  Phase phase;

  template <class... A>
  [[noreturn]] void fail(fmt::format_string<A...> f, A&&... a) const {
    throw InputError(where + ": " + fmt::format(f, std::forward<A>(a)...));
  }
  void expect_ndim(const Shape& s, int lo, int hi, const char* what) const;
  struct ChannelSplit {
    int64_t n, c, spatial;
  };
  // Views an (N, C, ...) bottom as N x C x spatial; fails with fewer than 2 axes.
  ChannelSplit split_channels(const Shape& s) const;
};

class OpDef {
 public:
  virtual ~OpDef();
  // Arity: [min, max] inputs and outputs; -1 for unbounded.
  virtual int min_inputs(const OpContext& c) const = 0;
  virtual int max_inputs(const OpContext& c) const { return min_inputs(c); }
  virtual int min_outputs(const OpContext& c) const { return 1; }
  virtual int max_outputs(const OpContext& c) const { return min_outputs(c); }
  // Checks the attributes (InputError via c.fail naming the field); called before infer().
  virtual void check(const OpContext& c) const {}
  // Output shapes from input shapes. InputError (via c.fail) on bad shapes.
  virtual void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const = 0;
  // The parameter blobs in Caffe's order (weights 0, bias 1, ...), given the input shapes.
  virtual std::vector<ParamDecl> params(const OpContext& c, const std::vector<Shape>& in) const { return {}; }
  // Gradients and buffers (see OpFacts), given the input shapes.
  virtual OpFacts facts(const OpContext& c, const std::vector<Shape>& in) const { return {}; }
  virtual OpTraits traits(const Node& n) const { return {}; }

  // What deploy's graph passes ask, so they name no op type (defaults: the op takes part
  // in none of these rewrites).
  //
  // per_channel_affine ops: the map y = a[c] * x + b[c] the node computes at inference over
  // `channels` channels (axis 1) from its parameter blobs `blobs`; false when it does not
  // (BatchNorm computing batch statistics, Scale over other axes or with a second bottom).
  // Ops without blobs whose map is the same for every channel (affine Power) fill every c.
  virtual bool channel_affine(const Node& n, const std::vector<const Tensor*>& blobs, int64_t channels,
                              std::vector<double>& a, std::vector<double>& b) const {
    return false;
  }
  // weighted_linear ops: output channels, whether weights are stored [input, output]
  // (InnerProduct's transpose) instead of [output, ...], whether there is a bias blob (and
  // turning one on), and whether the input is zero-padded (a constant shift of the input
  // then cannot fold into the bias).
  virtual int64_t output_channels(const Node& n) const { return 0; }
  virtual bool weights_output_last(const Node& n) const { return false; }
  virtual bool has_bias(const Node& n) const { return false; }
  virtual void set_bias_term(Node& n) const {}
  virtual bool pads_input(const Node& n) const { return false; }
  // Losses with an inference form: the node's type and attributes become that form's
  // (SoftmaxWithLoss -> Softmax, keeping softmax_param); the pass trims inputs and outputs.
  virtual void to_inference_form(Node& n) const {}
  // fusable_activation ops: the negative slope of the ReLU a producer applies as a post-op.
  virtual float activation_slope(const Node& n) const { return 0.f; }
  // And its upper bound (ReLU6: 6); infinity for none.
  virtual float activation_max(const Node& n) const { return std::numeric_limits<float>::infinity(); }

  // How the node maps channels (ChannelFlow), given its input shapes: by default,
  // per_channel for elementwise ops, else blocks.
  virtual ChannelFlow channel_flow(const Node& n, const std::vector<Shape>& in) const;
  // Structured pruning left the node `channels` output channels: ops whose attributes count
  // them (a Convolution's or InnerProduct's num_output; a depthwise convolution's group).
  virtual void set_channels(Node& n, int64_t channels) const {}

  // Data layers whose source does not exist (a train_val file timed or deployed without its
  // data): the missing path and what the definition alone says of the output shapes (batch
  // from batch_size, size from crop_size, channels from the mean; 0 where it cannot tell).
  // nullopt when the source exists, and for every other op.
  struct AbsentSource {
    std::string path;
    std::vector<Shape> shapes;
  };
  virtual std::optional<AbsentSource> absent_source(const OpContext& c) const { return std::nullopt; }
};

class OpDefRegistry {
 public:
  static OpDefRegistry& get();
  void add(const std::string& type, std::unique_ptr<OpDef> def);
  // Null when the type has no definition.
  const OpDef* find(const std::string& type) const;
  std::vector<std::string> types() const;

 private:
  std::map<std::string, std::unique_ptr<OpDef>> defs_;
};

// The external input op (Input): `n` becomes one with these output shapes; and the same
// op keeping only its outputs j with keep[j] (and their shapes).
void make_external_input(Node& n, const std::vector<Shape>& shapes);
void keep_external_outputs(Node& n, const std::vector<bool>& keep);
// An external input op taking batches of `batch`: axis 0 of each of its shapes.
void set_external_input_batch(Node& n, int64_t batch);

// The definition of node n's type; InputError naming the node when there is none.
const OpDef& op_def(const Graph& g, int n);

// The traits of a node's type (none for an unknown type); the second form for a layer as
// the Caffe front end stores it (bundles keep their graph in that form).
OpTraits op_traits(const Node& n);
OpTraits op_traits(const proto::LayerParameter& layer);

struct OpDefRegistrar {
  OpDefRegistrar(const char* type, std::unique_ptr<OpDef> def) { OpDefRegistry::get().add(type, std::move(def)); }
};

#define BKS_REGISTER_OP_DEF_IMPL2(type, cls, line) \
  static ::bks::OpDefRegistrar bks_def_registrar_##line(type, std::make_unique<cls>())
#define BKS_REGISTER_OP_DEF_IMPL(type, cls, line) BKS_REGISTER_OP_DEF_IMPL2(type, cls, line)
// Registers the definition of an op type.
#define BKS_REGISTER_OP_DEF(type, cls) BKS_REGISTER_OP_DEF_IMPL(type, cls, __LINE__)

}  // namespace bks
