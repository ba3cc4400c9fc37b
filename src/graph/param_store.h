// The learnable (and layer-maintained) blobs of a model, shared by its TRAIN and TEST nets.
// Keys are "<layer>.<index>" of the layer that first declared the blob; layers naming the
// same ParamSpec.name share one entry (Caffe's weight sharing).
#pragma once

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace bks {

struct Param {
  std::string key;
  Tensor data;
  Tensor grad;
  Tensor scratch;  // for summing a second gradient contribution
  float lr_mult = 1.f;
  float decay_mult = 1.f;
  bool learnable = true;      // false: maintained by its layer (BatchNorm statistics)
  bool grad_written = false;  // a contribution was written since the last clear
};

class ParamStore {
 public:
  // Index of the entry for `key`, or -1.
  int find(const std::string& key) const;
  int find_shared(const std::string& share_name) const;
  // Adds an entry; data is zeroed and must be filled by the caller.
  int add(const std::string& key, const std::string& share_name, const Shape& shape, bool learnable);
  Param& at(int i) { return params_.at(i); }
  const Param& at(int i) const { return params_.at(i); }
  int size() const { return static_cast<int>(params_.size()); }
  std::deque<Param>& all() { return params_; }
  const std::deque<Param>& all() const { return params_; }
  // Starts a new gradient accumulation (solver: once per iteration).
  void clear_grads();
  // Zeroes gradients nobody wrote since clear_grads() (unused parameters).
  void zero_unwritten_grads();

 private:
  std::deque<Param> params_;  // deque: references stay valid as nets add entries
  std::map<std::string, int> by_key_;
  std::map<std::string, int> by_share_;
};

}  // namespace bks
