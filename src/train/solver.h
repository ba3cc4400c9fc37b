// Caffe's solvers (SGD, Nesterov, AdaGrad, RMSProp, AdaDelta, Adam) with gradient clipping,
// iter_size normalisation and L1/L2 regularisation, each fused into one pass per blob.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "caffe.pb.h"
#include "formats/safetensors.h"
#include "graph/param_store.h"

namespace bks {

class Solver {
 public:
  // Validates the solver type and its parameters (InputError naming `where`).
  static std::unique_ptr<Solver> create(const proto::SolverParameter& p, const std::string& where);
  virtual ~Solver() = default;
  virtual const char* type() const = 0;

  // Applies one update with learning rate `rate` to every learnable blob in `indices`, using
  // the gradients summed in the store. `iter` counts updates from 0.
  void step(ParamStore& store, const std::vector<int>& indices, float rate, int64_t iter);
  // Solver history (momentum etc.) for snapshots: "<param key>.h<k>".
  std::vector<std::pair<std::string, const Tensor*>> state() const;
  // Restores history saved by state(); throws InputError when it does not fit the store.
  void load_state(const TensorFile& f, const ParamStore& store, const std::string& path);

 protected:
  explicit Solver(const proto::SolverParameter& p) : p_(p) {}
  virtual int history_size() const = 0;
  // The fused update of one blob: g is the raw gradient (already clipped); gscale folds in
  // iter_size normalisation; decay and l1 give the regulariser; w is updated in place.
  struct Blob {
    float* w;
    const float* g;
    float* h[2];
    int64_t n;
  };
  virtual void update(const Blob& b, float lr, float gscale, float decay, bool l1, int64_t iter) = 0;
  proto::SolverParameter p_;

 private:
  std::vector<std::pair<std::string, std::vector<Tensor>>> history_;
  std::vector<Tensor>& history_for(const Param& p);
};

}  // namespace bks
