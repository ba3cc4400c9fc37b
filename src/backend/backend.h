// A backend owns the device-side resources ops run on (engines, streams, handles).
// Ops receive it explicitly; there is no global device mode.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include "core/tensor.h"

namespace bks {

// How an op deals with oneDNN's blocked tensor layouts (e.g. nChw16c), which let
// convolution, pooling and ReLU chains run without converting to and from plain NCHW.
enum class LayoutRule {
  plain_only,       // inputs and outputs are plain row-major (the default)
  any_in_same_out,  // elementwise: any input layout; the output has the input's layout
  any_in_any_out,   // converts internally: any input layout, output in its preferred one
};

// oneDNN's version ("2.6.0") and the best instruction set its kernels use on this CPU.
std::string onednn_version();
std::string onednn_isa();

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string describe() const = 0;
  // Makes the calling thread run this backend's kernels as they were built. Called at the
  // start of every pass, since a net built in one thread may run in another.
  virtual void enter() const {}
};

// CPU: oneDNN engine and stream; threads are OpenMP's (oneDNN and our loops share them).
class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads = 0);  // 0: all cores
  Device device() const override { return {}; }
  std::string describe() const override;
  int threads() const { return threads_; }
  // OpenMP's thread count is the calling thread's own: a net built with 1 thread and run in
  // a fresh std::thread (which has all cores) ran oneDNN's matmul with twice the threads
  // its scratchpad was sized for, and gave wrong results (examples/embed on AVX2).
  void enter() const override;
  dnnl::engine& engine() { return engine_; }
  dnnl::stream& stream() { return stream_; }

 private:
  int threads_;
  dnnl::engine engine_;
  dnnl::stream stream_;
};

}  // namespace bks
