// Solvers and learning-rate policies against hand-computed updates.
#include <gtest/gtest.h>

#include <cmath>

#include "formats/prototxt.h"
#include "train/lr_policy.h"
#include "train/solver.h"

namespace bks {
namespace {

proto::SolverParameter solver(const std::string& text) {
  proto::SolverParameter p;
  parse_prototxt_string(text, "solver", p);
  return p;
}

TEST(LrPolicy, AllPoliciesMatchFormulas) {
  auto p = solver("base_lr: 0.1 gamma: 0.5 stepsize: 10 power: 2 max_iter: 100 lr_policy: 'fixed'");
  EXPECT_FLOAT_EQ(learning_rate(p, 57), 0.1f);
  p.set_lr_policy("step");
  EXPECT_FLOAT_EQ(learning_rate(p, 25), 0.1f * 0.25f);
  p.set_lr_policy("exp");
  EXPECT_FLOAT_EQ(learning_rate(p, 3), 0.1f * 0.125f);
  p.set_lr_policy("inv");
  EXPECT_FLOAT_EQ(learning_rate(p, 4), static_cast<float>(0.1 * std::pow(1 + 0.5 * 4, -2)));
  p.set_lr_policy("poly");
  EXPECT_FLOAT_EQ(learning_rate(p, 50), 0.1f * 0.25f);
  p.set_lr_policy("sigmoid");  // base_lr / (1 + exp(-gamma (iter - stepsize)))
  p.set_gamma(-0.5f);
  EXPECT_FLOAT_EQ(learning_rate(p, 10), 0.05f);
  EXPECT_FLOAT_EQ(learning_rate(p, 20), static_cast<float>(0.1 / (1 + std::exp(5.0))));
  EXPECT_FLOAT_EQ(learning_rate(p, 0), static_cast<float>(0.1 / (1 + std::exp(-5.0))));
  auto m = solver("base_lr: 1 gamma: 0.1 lr_policy: 'multistep' stepvalue: 5 stepvalue: 8");
  EXPECT_FLOAT_EQ(learning_rate(m, 4), 1.f);
  EXPECT_FLOAT_EQ(learning_rate(m, 5), 0.1f);
  EXPECT_NEAR(learning_rate(m, 9), 0.01f, 1e-9);
  EXPECT_THROW(check_lr_policy(solver("base_lr: 1 lr_policy: 'wavy'"), "s"), InputError);
  EXPECT_THROW(check_lr_policy(solver("base_lr: 1 lr_policy: 'step'"), "s"), InputError);
}

// One parameter w = [1, -2] with gradient g = [0.5, 0.25]; two steps, compared with the
// update rules written out by hand.
struct OneParam {
  ParamStore store;
  int idx;
  OneParam() {
    idx = store.add("w.0", "", {2}, true);
    store.at(idx).data.f32()[0] = 1.f;
    store.at(idx).data.f32()[1] = -2.f;
  }
  void step(Solver& s, float lr, int iter) {
    store.at(idx).grad.f32()[0] = 0.5f;
    store.at(idx).grad.f32()[1] = 0.25f;
    s.step(store, {idx}, lr, iter);
  }
  float w(int i) { return store.at(idx).data.f32()[i]; }
};

TEST(Solver, SgdMomentumAndL2) {
  auto s = Solver::create(solver("type: 'SGD' momentum: 0.9 weight_decay: 0.1"), "s");
  OneParam r;
  r.step(*s, 0.1f, 0);
  double g0 = 0.5 + 0.1 * 1.0, v0 = 0.1 * g0, w0 = 1.0 - v0;
  EXPECT_NEAR(r.w(0), w0, 1e-6);
  r.step(*s, 0.1f, 1);
  double g1 = 0.5 + 0.1 * w0, v1 = 0.9 * v0 + 0.1 * g1;
  EXPECT_NEAR(r.w(0), w0 - v1, 1e-6);
}

TEST(Solver, L1Regularisation) {
  auto s = Solver::create(solver("type: 'SGD' weight_decay: 0.1 regularization_type: 'L1'"), "s");
  OneParam r;
  r.step(*s, 1.f, 0);
  EXPECT_NEAR(r.w(1), -2.0 - (0.25 - 0.1), 1e-6);
}

TEST(Solver, Nesterov) {
  auto s = Solver::create(solver("type: 'Nesterov' momentum: 0.9"), "s");
  OneParam r;
  r.step(*s, 0.1f, 0);
  double v0 = 0.05;
  EXPECT_NEAR(r.w(0), 1.0 - 1.9 * v0, 1e-6);
  r.step(*s, 0.1f, 1);
  double v1 = 0.9 * v0 + 0.05;
  EXPECT_NEAR(r.w(0), 1.0 - 1.9 * v0 - (1.9 * v1 - 0.9 * v0), 1e-6);
}

TEST(Solver, AdaGradRMSPropAdaDeltaAdam) {
  {
    auto s = Solver::create(solver("type: 'AdaGrad' delta: 1e-8"), "s");
    OneParam r;
    r.step(*s, 0.1f, 0);
    r.step(*s, 0.1f, 1);
    double w = 1.0 - 0.1 * 0.5 / std::sqrt(0.25) - 0.1 * 0.5 / std::sqrt(0.5);
    EXPECT_NEAR(r.w(0), w, 1e-5);
  }
  {
    auto s = Solver::create(solver("type: 'RMSProp' rms_decay: 0.9 delta: 1e-8"), "s");
    OneParam r;
    r.step(*s, 0.1f, 0);
    r.step(*s, 0.1f, 1);
    double h0 = 0.1 * 0.25, h1 = 0.9 * h0 + 0.1 * 0.25;
    EXPECT_NEAR(r.w(0), 1.0 - 0.1 * 0.5 / std::sqrt(h0) - 0.1 * 0.5 / std::sqrt(h1), 1e-4);
  }
  // AdaDelta and Adam over two steps with different gradients (0.5, then -0.1 for w[0]):
  // with one step, or one gradient repeated, their decay rates cancel out of the update.
  auto second_step = [](Solver& s, OneParam& r, float lr) {
    r.store.at(r.idx).grad.f32()[0] = -0.1f;
    r.store.at(r.idx).grad.f32()[1] = 0.3f;
    s.step(r.store, {r.idx}, lr, 1);
  };
  {
    auto s = Solver::create(solver("type: 'AdaDelta' momentum: 0.95 delta: 1e-6"), "s");
    OneParam r;
    r.step(*s, 1.f, 0);
    const double d = 1e-6, g1 = 0.5, g2 = -0.1;
    double hg = 0.05 * g1 * g1, u1 = g1 * std::sqrt(d / (hg + d));
    EXPECT_NEAR(r.w(0), 1.0 - u1, 1e-6);
    double hu = 0.05 * u1 * u1;
    hg = 0.95 * hg + 0.05 * g2 * g2;
    const double u2 = g2 * std::sqrt((hu + d) / (hg + d));
    second_step(*s, r, 1.f);
    EXPECT_NEAR(r.w(0), 1.0 - u1 - u2, 1e-6);
  }
  {
    auto s = Solver::create(solver("type: 'Adam' momentum: 0.8 momentum2: 0.9 delta: 1e-8"), "s");
    OneParam r;
    r.step(*s, 0.01f, 0);
    // The first step moves each weight by lr against the gradient's sign, whatever the betas.
    EXPECT_NEAR(r.w(0), 1.0 - 0.01, 1e-5);
    EXPECT_NEAR(r.w(1), -2.0 - 0.01, 1e-5);
    const double b1 = 0.8, b2 = 0.9, g1 = 0.5, g2 = -0.1;
    const double m = b1 * (1 - b1) * g1 + (1 - b1) * g2, v = b2 * (1 - b2) * g1 * g1 + (1 - b2) * g2 * g2;
    const double correction = std::sqrt(1 - b2 * b2) / (1 - b1 * b1);
    second_step(*s, r, 0.01f);
    EXPECT_NEAR(r.w(0), 1.0 - 0.01 - 0.01 * correction * m / (std::sqrt(v) + 1e-8), 1e-6);
  }
  EXPECT_THROW(Solver::create(solver("type: 'AdaGrad' momentum: 0.9"), "s"), InputError);
  EXPECT_THROW(Solver::create(solver("type: 'Lion'"), "s"), InputError);
}

TEST(Solver, IterSizeAveragesAccumulatedGradient) {
  // A gradient summed over 2 micro-batches with iter_size 2 equals one batch's mean.
  auto s2 = Solver::create(solver("type: 'SGD' iter_size: 2"), "s");
  auto s1 = Solver::create(solver("type: 'SGD'"), "s");
  OneParam a, b;
  a.store.at(a.idx).grad.f32()[0] = 1.0f;  // 0.5 + 0.5
  a.store.at(a.idx).grad.f32()[1] = 0.5f;
  s2->step(a.store, {a.idx}, 0.1f, 0);
  b.step(*s1, 0.1f, 0);
  EXPECT_FLOAT_EQ(a.w(0), b.w(0));
  EXPECT_FLOAT_EQ(a.w(1), b.w(1));
}

TEST(Solver, ClipGradientsScalesToGlobalNorm) {
  auto s = Solver::create(solver("type: 'SGD' clip_gradients: 0.1"), "s");
  OneParam r;
  r.step(*s, 1.f, 0);
  double norm = std::sqrt(0.25 + 0.0625);
  EXPECT_NEAR(r.w(0), 1.0 - 0.5 * 0.1 / norm, 1e-6);
  EXPECT_NEAR(r.w(1), -2.0 - 0.25 * 0.1 / norm, 1e-6);
  // With iter_size 2, Caffe clips the gradient summed over the micro-batches, then divides
  // it by 2: a summed norm of 2 x 0.559 is scaled to 0.1 and halved to 0.05.
  auto s2 = Solver::create(solver("type: 'SGD' clip_gradients: 0.1 iter_size: 2"), "s");
  OneParam a;
  a.store.at(a.idx).grad.f32()[0] = 1.0f;
  a.store.at(a.idx).grad.f32()[1] = 0.5f;
  s2->step(a.store, {a.idx}, 1.f, 0);
  EXPECT_NEAR(a.w(0), 1.0 - 1.0 * (0.1 / (2 * norm)) / 2, 1e-6);
  EXPECT_NEAR(a.w(1), -2.0 - 0.5 * (0.1 / (2 * norm)) / 2, 1e-6);
}

TEST(Solver, StateRoundTrip) {
  auto s = Solver::create(solver("type: 'Adam'"), "s");
  OneParam r;
  r.step(*s, 0.01f, 0);
  TensorFile f;
  for (auto& [n, t] : s->state()) f.tensors.emplace_back(n, t->clone());
  auto s2 = Solver::create(solver("type: 'Adam'"), "s");
  s2->load_state(f, r.store, "state");
  OneParam r1, r2;
  r1.store.at(r1.idx).data.copy_from(r.store.at(r.idx).data);
  r2.store.at(r2.idx).data.copy_from(r.store.at(r.idx).data);
  r1.step(*s, 0.01f, 1);
  r2.step(*s2, 0.01f, 1);
  EXPECT_EQ(r1.w(0), r2.w(0));
  TensorFile bad;
  bad.tensors.emplace_back("w.0.h0", Tensor({3}));
  EXPECT_THROW(s2->load_state(bad, r.store, "state"), InputError);
}

}  // namespace
}  // namespace bks
