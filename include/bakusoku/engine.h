// bakusoku inference engine: run a bundle written by `bakusoku deploy` from a C++ program.
//
//   auto engine = bakusoku::Engine::load("lenet.bks");
//   std::vector<float> image(engine->input(0).count()), prob(engine->output(0).count());
//   engine->run({image.data()}, {prob.data()});
//
// Requires: inputs and outputs are dense row-major float32 buffers of exactly the shapes
// inputs()/outputs() report (batch first), one pointer per input and per output, in order.
// Ensures: run() is safe to call from several threads at once. Each concurrent caller gets
// its own execution context (activations, kernels), created on first use and reused, so
// after warm-up a call allocates no tensor memory and only copies inputs in and outputs out.
// Errors (missing or corrupt bundle, wrong number of buffers) throw bakusoku::Error with a
// message naming the file or argument.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace bakusoku {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;
  int64_t count() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

struct EngineOptions {
  int threads_per_run = 1;  // CPU threads each run() uses (0: all cores)
  int64_t batch = 0;        // 0: the bundle's batch size
};

class Engine {
 public:
  static std::unique_ptr<Engine> load(const std::string& bundle_path, const EngineOptions& options = {});
  ~Engine();

  const std::vector<TensorInfo>& inputs() const;
  const std::vector<TensorInfo>& outputs() const;
  const TensorInfo& input(size_t i) const { return inputs().at(i); }
  const TensorInfo& output(size_t i) const { return outputs().at(i); }

  void run(const std::vector<const float*>& inputs, const std::vector<float*>& outputs);

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace bakusoku
