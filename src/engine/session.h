// Runs a deployment bundle: its graph as a TEST-phase Net (layouts, fusion, one arena) with
// the bundle's blobs. One session serves one thread at a time.
#pragma once

#include <memory>
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

// Options of a net that runs a bundle: constant weights (each node says its precision).
NetOptions inference_options(const Bundle& b);

// A net built from `graph` (the bundle's own, or scoring_net's) with the bundle's blobs.
struct BundleNet {
  std::unique_ptr<CpuBackend> backend;
  ParamStore store;
  std::unique_ptr<Net> net;
};
std::unique_ptr<BundleNet> build_bundle_net(const Bundle& b, Graph graph, const std::string& source, int threads,
                                            NetOptions options);

class InferenceSession {
 public:
  // batch > 0 overrides the bundle's batch size. `source` names the bundle in errors.
  InferenceSession(const Bundle& b, const std::string& source, int threads, int64_t batch = 0);
  ~InferenceSession();

  const std::vector<int>& inputs() const { return inputs_; }
  const std::vector<int>& outputs() const { return net_->outputs(); }
  const std::string& value_name(int v) const { return net_->graph().values[v].name; }
  Tensor& value(int v) { return net_->value(v); }
  void run() { net_->forward(); }
  Net& net() { return *net_; }
  int64_t batch() const { return batch_; }

 private:
  std::unique_ptr<BundleNet> bundle_net_;
  Net* net_ = nullptr;
  std::vector<int> inputs_;
  int64_t batch_ = 0;
};

// Fills every input of the session with uniform [0, 1) values (seed `seed`): for timing, where
// the values do not matter but must be the same each time.
void fill_inputs_uniform(InferenceSession& s, uint64_t seed);

// Mean forward milliseconds of each of the session's nodes over `iterations` runs (after
// one unprofiled warm-up run), on whatever its inputs hold.
std::vector<double> time_nodes(InferenceSession& s, int iterations);

}  // namespace bks
