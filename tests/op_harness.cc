#include "op_harness.h"

#include <gtest/gtest.h>

#include <cmath>

#include "formats/caffe_net.h"
#include "formats/prototxt.h"
#include "runtime/filler.h"

namespace bks::test {

namespace {

// The CPU kernel registered for init.node's type under `name`, built for it.
std::unique_ptr<Kernel> create_named(const OpInit& init, const std::string& name) {
  std::string names;
  for (const KernelRegistry::Entry* e : KernelRegistry::get().entries(init.node.type)) {
    if (e->device != DeviceKind::cpu) continue;
    if (e->name != name) {
      names += (names.empty() ? "" : ", ") + e->name;
      continue;
    }
    if (e->supports && !e->supports(init))
      throw InputError("test: the '" + name + "' kernel of " + init.node.type + " does not support this layer");
    return e->make(init);
  }
  throw InputError("test: op type '" + init.node.type + "' has no CPU kernel named '" + name +
                   "' (it has: " + (names.empty() ? "none" : names) + ")");
}

}  // namespace

OpHarness::OpHarness(const std::string& layer, const std::vector<Shape>& in_shapes, Phase phase, int num_outputs,
                     const std::function<void(Kernel&)>& before_prepare, const std::string& kernel) {
  proto::LayerParameter lp;
  parse_prototxt_string(layer, "test layer", lp);
  // Through the Caffe front end, as a net's layers are.
  node_ = std::make_unique<Node>(caffe_layer_node(lp, "test layer"));
  if (node_->name.empty()) node_->name = "op";
  for (size_t i = 0; i < in_shapes.size(); ++i) node_->inputs.push_back(static_cast<int>(i));
  for (int j = 0; j < num_outputs; ++j) node_->outputs.push_back(static_cast<int>(in_shapes.size()) + j);
  backend_ = std::make_unique<CpuBackend>(2);
  OpInit init{*node_, "test:" + node_->name, phase, kHarnessSeed, *backend_};
  OpContext ctx{*node_, init.where, phase};
  std::vector<Shape> out_shapes(num_outputs);
  const OpDef* def = OpDefRegistry::get().find(node_->type);
  if (!def) throw InputError("test: no definition of op type '" + node_->type + "'");
  def->check(ctx);
  def->infer(ctx, in_shapes, out_shapes);
  std::vector<ParamDecl> decls = def->params(ctx, in_shapes);
  facts_ = def->facts(ctx, in_shapes);
  op_ = kernel.empty() ? KernelRegistry::get().create(init) : create_named(init, kernel);
  op_->reshape(in_shapes, out_shapes);
  Rng rng(3);
  for (auto& d : decls) {
    Tensor p(d.shape);
    FillerSpec f;
    f.type = "gaussian";
    f.std = 0.5f;
    fill_tensor(p, f, rng, "test");
    params.push_back(p);
    param_grad.emplace_back(d.learnable ? Tensor(d.shape) : Tensor());
  }
  if (before_prepare) before_prepare(*op_);
  op_->prepare(in_shapes, out_shapes);
  for (auto& s : in_shapes) {
    in.emplace_back(s);
    in_grad.emplace_back(s);
  }
  for (auto& s : out_shapes) {
    out.emplace_back(s);
    Tensor g(s);
    for (int64_t i = 0; i < g.numel(); ++i) g.f32()[i] = rng.uniform(-1.f, 1.f);
    out_grad.push_back(g);
  }
  for (auto& t : in) call_.in.push_back(&t);
  for (auto& t : out) call_.out.push_back(&t);
  for (auto& t : params) call_.params.push_back(&t);
  for (auto& t : out_grad) call_.out_grad.push_back(&t);
  for (size_t i = 0; i < in_grad.size(); ++i)
    call_.in_grad.push_back(can_propagate_to(static_cast<int>(i)) ? &in_grad[i] : nullptr);
  for (auto& t : param_grad) call_.param_grad.push_back(t.defined() ? &t : nullptr);
  randomize_inputs();
}

OpHarness::~OpHarness() = default;

void OpHarness::randomize_inputs(float lo, float hi, uint64_t seed) {
  Rng rng(seed);
  for (auto& t : in)
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = rng.uniform(lo, hi);
}

void OpHarness::forward() { op_->forward(call_); }
void OpHarness::set_step(int64_t step) { call_.step = step; }
void OpHarness::backward() { op_->backward(call_); }

double OpHarness::objective() {
  forward();
  double s = 0;
  for (size_t j = 0; j < out.size(); ++j)
    for (int64_t i = 0; i < out[j].numel(); ++i) s += static_cast<double>(out_grad[j].f32()[i]) * out[j].f32()[i];
  return s;
}

void OpHarness::check_gradients(float step, float tol, std::vector<int> inputs) {
  if (inputs.empty())
    for (size_t i = 0; i < in.size(); ++i)
      if (can_propagate_to(static_cast<int>(i))) inputs.push_back(static_cast<int>(i));
  forward();
  backward();
  std::vector<Tensor> analytic_in, analytic_p;
  for (auto& g : in_grad) analytic_in.push_back(g.clone());
  for (auto& g : param_grad) analytic_p.push_back(g.defined() ? g.clone() : Tensor());
  auto check = [&](Tensor& x, const Tensor& analytic, const std::string& what) {
    for (int64_t i = 0; i < x.numel(); ++i) {
      float orig = x.f32()[i], up = orig + step, down = orig - step;
      x.f32()[i] = up;
      double lp = objective();
      x.f32()[i] = down;
      double lm = objective();
      x.f32()[i] = orig;
      // Divided by the float step actually taken (orig +- step rounds).
      double numeric = (lp - lm) / (static_cast<double>(up) - down);
      double a = analytic.f32()[i];
      double scale = std::max({std::fabs(a), std::fabs(numeric), 1.0});
      ASSERT_NEAR(a, numeric, tol * scale) << what << " element " << i << " of " << shape_str(x.shape());
    }
  };
  for (int i : inputs)
    if (i >= 0) check(in[i], analytic_in[i], "input " + std::to_string(i));
  for (size_t p = 0; p < params.size(); ++p)
    if (analytic_p[p].defined()) check(params[p], analytic_p[p], "param " + std::to_string(p));
}

void expect_close(const Tensor& a, const Tensor& b, float tol, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a.f32()[i], y = b.f32()[i];
    ASSERT_NEAR(x, y, tol * std::max({1.0, std::fabs(x), std::fabs(y)})) << what << " element " << i;
  }
}

}  // namespace bks::test
