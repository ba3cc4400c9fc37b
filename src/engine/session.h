// Runs a deployment bundle: its graph as a TEST-phase Net (layouts, fusion, one arena) with
// the bundle's blobs. One session serves one thread at a time.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/bundle.h"
#include "graph/precision.h"
#include "runtime/net.h"

namespace bks {

// The precision deploy recorded (fp32 when none was).
Precision bundle_precision(const Bundle& b);
// Copies the bundle's blobs into every parameter of `store` (all must be present, F32, of
// the graph's shapes; InputError naming `source` otherwise).
void copy_bundle_weights(const Bundle& b, const std::string& source, ParamStore& store);

// A net that scores the bundle on its recorded TEST data layers (`data_source`, when not
// empty, replaces their source): data layer -> bundle graph -> Accuracy (top-1 and top-5)
// against the label. InputError when the bundle records no data layer.
Graph scoring_net(const Bundle& b, const std::string& source, const std::string& data_source);

// Bundle info key and value of deploy's activation layout choice (absent: the default).
inline constexpr const char* kActivationLayoutKey = "activation_layout";
inline constexpr const char* kBlockedLayout = "blocked";

// Options of a net that runs a bundle: constant weights (each node says its precision),
// the activation layout deploy chose (InputError naming `source` for an unknown one).
NetOptions inference_options(const Bundle& b, const std::string& source);

// A net built from `graph` (the bundle's own, or scoring_net's) with the bundle's blobs.
struct BundleNet {
  std::unique_ptr<CpuBackend> backend;
  ParamStore store;
  std::unique_ptr<Net> net;
};
std::unique_ptr<BundleNet> build_bundle_net(const Bundle& b, Graph graph, const std::string& source, int threads,
                                            NetOptions options);

// The bundle's micro batch (info "micro_batch", written by deploy's autotuning): how many
// items each forward computes when a batch runs in parts; 0 when it runs whole. InputError
// naming `source` when the entry is not a positive integer.
int64_t bundle_micro_batch(const Bundle& b, const std::string& source);
// Bundle info key of deploy's cut: a batch in parts runs them through this node only, and
// the nodes after it once on the whole batch (engine/graph_cut.h). Absent: parts run it all.
inline constexpr const char* kPartsUntilKey = "micro_batch_until";

class InferenceSession {
 public:
  // batch > 0 overrides the bundle's batch size. `source` names the bundle in errors.
  // micro_batch: items per forward (0: the whole batch at once; -1: the bundle's choice).
  // A batch of N runs as N / m forwards of m items when m divides N, so each layer's output
  // is still in cache when the next layer reads it; inputs and outputs hold all N items.
  // parts_until: the node the parts run through, the rest running once on all N items
  // ("": every node in parts; nullopt: the bundle's choice, kPartsUntilKey). InputError
  // when it names no node the graph can be cut after.
  InferenceSession(const Bundle& b, const std::string& source, int threads, int64_t batch = 0, int64_t micro_batch = -1,
                   std::optional<std::string> parts_until = std::nullopt);
  ~InferenceSession();

  // Value ids: the net's (the head's, when the graph is cut), and a tail value's id is its
  // index in the tail's graph plus the head graph's value count.
  const std::vector<int>& inputs() const { return inputs_; }
  const std::vector<int>& outputs() const { return outputs_; }
  const std::string& value_name(int v) const;
  // Inputs and outputs hold the whole batch; other values the last part computed.
  Tensor& value(int v);
  void run();
  // The net computing one part (the whole batch when it runs whole); when the graph is cut,
  // the head, and tail() the net of the rest (null when not cut).
  Net& net() { return *net_; }
  Net* tail() { return tail_net_ ? tail_net_->net.get() : nullptr; }
  // The activation arenas' bytes (head and tail).
  size_t planned_bytes() const;
  int64_t batch() const { return batch_; }
  // Items per forward: batch() when the batch runs whole.
  int64_t micro_batch() const { return micro_ ? micro_ : batch_; }

 private:
  std::unique_ptr<BundleNet> bundle_net_;
  Net* net_ = nullptr;
  std::vector<int> inputs_;
  int64_t batch_ = 0;
  int64_t micro_ = 0;            // items per forward when the batch runs in parts (0: whole)
  std::map<int, Tensor> whole_;  // the inputs and outputs at the whole batch, when in parts
  std::vector<int> outputs_;
  // A cut graph: the tail's net (whole batch), the head value it is handed (part by part)
  // and the tail's Input value that holds it.
  std::unique_ptr<BundleNet> tail_net_;
  int handed_ = -1, tail_input_ = -1, tail_offset_ = 0;
};

// Fills every input of the session with 0s and 1s drawn from seed `seed`: for timing, where the
// values do not matter but must be the same each time. Both are valid for every layer,
// indices of an Embed included.
void fill_timing_inputs(InferenceSession& s, uint64_t seed);

// How far `b`'s outputs are from `a`'s after both ran: the largest |a - b| of each output
// over that output's largest |a|, worst of all outputs. Infinity when their outputs differ
// in number, shape or type (f32 only).
double max_relative_difference(InferenceSession& a, InferenceSession& b);

// Mean forward milliseconds of each of the session's nodes over `iterations` runs (after
// one unprofiled warm-up run), on whatever its inputs hold: the net's nodes, then the
// tail's (after its Input) when the graph is cut.
std::vector<double> time_nodes(InferenceSession& s, int iterations);

}  // namespace bks
