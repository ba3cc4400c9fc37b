// The fallback for ops with no GPU kernel yet (data layers, losses, accuracy, ...): the
// op's CPU kernel runs on host copies of its inputs and parameters, and its outputs and
// gradients are copied back to the device. Correct for every op, slow for large tensors;
// its name says so in `time`, --verbose and the train log, so it is never a silent path.
// Data layers belong here for good (Caffe's read on the CPU too); the copies of the rest
// go as their GPU kernels arrive.
#include <fmt/format.h>

#include <memory>

#include "core/device_memory.h"
#include "core/log.h"
#include "cuda/gpu_kernel.h"
#include "ops/op_def.h"

namespace bks::cuda {

namespace {

// One CPU backend for every fallback kernel of the process (an engine per node would cost
// oneDNN setup for nothing).
CpuBackend& host_backend() {
  static CpuBackend backend;
  return backend;
}

class HostKernel final : public GpuKernel {
 public:
  explicit HostKernel(const OpInit& i)
      : GpuKernel(i),
        cpu_init_{i.node, i.where, i.phase, i.seed, host_backend(), i.constant_params, i.batch_stats_sum},
        cpu_(KernelRegistry::get().create(cpu_init_)) {
    const OpDef* def = OpDefRegistry::get().find(i.node.type);
    BKS_CHECK(def, "no definition of {}", i.node.type);
    def_ = def;
    log::debug("{}: no GPU kernel for {}: its CPU kernel runs on host copies", i.where, i.node.type);
  }

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    facts_ = def_->facts(context(), in);
    cpu_->reshape(in, out);
    in_.assign(in.size(), Tensor());
    out_.assign(out.size(), Tensor());
    for (size_t i = 0; i < in.size(); ++i) in_[i] = Tensor(in[i]);
    for (size_t j = 0; j < out.size(); ++j) out_[j] = Tensor(out[j]);
  }
  void prepare(const std::vector<Shape>& in, const std::vector<Shape>& out) override {
    cpu_->set_needs_input_grad(needs_in_grad_);
    cpu_->prepare(in, out);
  }

  void forward(OpCall& c) override {
    if (facts_.output_is_view) return;  // the output is the input's buffer, reshaped
    OpCall h = host_call(c);
    cpu_->forward(h);
    for (size_t j = 0; j < c.out.size(); ++j) c.out[j]->copy_from(out_[j]);
    // Parameters the forward changes (running statistics) go back too.
    for (size_t p = 0; p < c.params.size(); ++p) c.params[p]->copy_from(params_[p]);
  }

  void backward(OpCall& c) override {
    if (facts_.output_is_view) return;
    OpCall h = host_call(c);
    for (size_t j = 0; j < c.out.size(); ++j) out_[j].copy_from(*c.out[j]);
    h.out_grad.assign(c.out_grad.size(), nullptr);
    for (size_t j = 0; j < c.out_grad.size(); ++j)
      if (c.out_grad[j]) {
        Tensor& g = host_buffer(out_grad_, j, c.out_grad[j]->shape());
        g.copy_from(*c.out_grad[j]);
        h.out_grad[j] = &g;
      }
    h.in_grad.assign(c.in_grad.size(), nullptr);
    for (size_t i = 0; i < c.in_grad.size(); ++i)
      if (c.in_grad[i]) h.in_grad[i] = &host_buffer(in_grad_, i, c.in_grad[i]->shape());
    h.param_grad.assign(c.param_grad.size(), nullptr);
    for (size_t p = 0; p < c.param_grad.size(); ++p)
      if (c.param_grad[p]) h.param_grad[p] = &host_buffer(param_grad_, p, c.param_grad[p]->shape());
    cpu_->backward(h);
    for (size_t i = 0; i < c.in_grad.size(); ++i)
      if (c.in_grad[i]) c.in_grad[i]->copy_from(in_grad_[i]);
    for (size_t p = 0; p < c.param_grad.size(); ++p)
      if (c.param_grad[p]) c.param_grad[p]->copy_from(param_grad_[p]);
  }

  int64_t output_batch(const OpCall& c) override {
    OpCall h = host_call(c);
    return cpu_->output_batch(h);
  }
  int64_t dataset_size() const override { return cpu_->dataset_size(); }
  std::string kernel_name() const override { return "CPU on host copies: " + cpu_->reported_name(); }

 private:
  // Host buffer i of `v`, of shape s: last call's when it fits (kernels overwrite what they
  // write), so steady-state steps allocate nothing.
  static Tensor& host_buffer(std::vector<Tensor>& v, size_t i, const Shape& s) {
    if (v.size() <= i) v.resize(i + 1);
    if (!v[i].defined() || v[i].shape() != s) v[i] = Tensor(s);
    return v[i];
  }

  // The call with host tensors in place of the device ones, inputs and parameters copied
  // over.
  OpCall host_call(const OpCall& c) {
    OpCall h;
    h.step = c.step;
    for (size_t p = 0; p < c.params.size(); ++p) {
      Tensor& t = host_buffer(params_, p, c.params[p]->shape());
      t.copy_from(*c.params[p]);
      h.params.push_back(&t);
    }
    for (size_t i = 0; i < c.in.size(); ++i) in_[i].copy_from(*c.in[i]);
    for (auto& t : in_) h.in.push_back(&t);
    for (auto& t : out_) h.out.push_back(&t);
    return h;
  }

  OpInit cpu_init_;
  std::unique_ptr<Kernel> cpu_;
  const OpDef* def_ = nullptr;
  OpFacts facts_;
  std::vector<Tensor> in_, out_, params_, out_grad_, in_grad_, param_grad_;
};

struct Registration {
  Registration() {
    KernelRegistry::get().set_fallback(DeviceKind::cuda,
                                       [](const OpInit& i) { return std::make_unique<HostKernel>(i); });
  }
} registration;

}  // namespace

}  // namespace bks::cuda
