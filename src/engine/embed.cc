// The public embedding API (include/bakusoku/engine.h) over InferenceSession: a pool of
// sessions, one per concurrent caller.
#include <cstring>
#include <mutex>

#include "bakusoku/engine.h"
#include "core/error.h"
#include "engine/session.h"

namespace bakusoku {

struct Engine::Impl {
  bks::Bundle bundle;
  std::string path;
  EngineOptions options;
  std::vector<TensorInfo> inputs, outputs;
  std::mutex mu;
  std::vector<std::unique_ptr<bks::InferenceSession>> all;
  std::vector<bks::InferenceSession*> idle;

  std::unique_ptr<bks::InferenceSession> make() {
    return std::make_unique<bks::InferenceSession>(bundle, path, options.threads_per_run, options.batch);
  }
  bks::InferenceSession* acquire() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!idle.empty()) {
        auto* s = idle.back();
        idle.pop_back();
        return s;
      }
    }
    auto s = make();  // outside the lock: building kernels takes a while
    std::lock_guard<std::mutex> lock(mu);
    all.push_back(std::move(s));
    return all.back().get();
  }
  void release(bks::InferenceSession* s) {
    std::lock_guard<std::mutex> lock(mu);
    idle.push_back(s);
  }
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

std::unique_ptr<Engine> Engine::load(const std::string& path, const EngineOptions& options) {
  auto impl = std::make_unique<Impl>();
  try {
    impl->bundle = bks::load_bundle(path);
    impl->path = path;
    impl->options = options;
    auto first = impl->make();
    for (int v : first->inputs()) impl->inputs.push_back({first->value_name(v), first->value(v).shape()});
    for (int v : first->outputs()) impl->outputs.push_back({first->value_name(v), first->value(v).shape()});
    impl->idle.push_back(first.get());
    impl->all.push_back(std::move(first));
  } catch (const std::exception& e) {
    throw Error(e.what());
  }
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

const std::vector<TensorInfo>& Engine::inputs() const { return impl_->inputs; }
const std::vector<TensorInfo>& Engine::outputs() const { return impl_->outputs; }

void Engine::run(const std::vector<const float*>& in, const std::vector<float*>& out) {
  if (in.size() != impl_->inputs.size() || out.size() != impl_->outputs.size())
    throw Error("run: the bundle takes " + std::to_string(impl_->inputs.size()) + " input(s) and " +
                std::to_string(impl_->outputs.size()) + " output(s); got " + std::to_string(in.size()) + " and " +
                std::to_string(out.size()));
  bks::InferenceSession* s = impl_->acquire();
  try {
    for (size_t i = 0; i < in.size(); ++i) {
      bks::Tensor& t = s->value(s->inputs()[i]);
      std::memcpy(t.f32(), in[i], static_cast<size_t>(t.numel()) * sizeof(float));
    }
    s->run();
    for (size_t i = 0; i < out.size(); ++i) {
      const bks::Tensor& t = s->value(s->outputs()[i]);
      std::memcpy(out[i], t.f32(), static_cast<size_t>(t.numel()) * sizeof(float));
    }
  } catch (const std::exception& e) {
    impl_->release(s);
    throw Error(e.what());
  }
  impl_->release(s);
}

}  // namespace bakusoku
